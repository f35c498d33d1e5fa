"""Unit tests for the servicer's error boundary and the request-decoding interceptor."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from podmand._proto import compute_driver_pb2 as pb
from podmand.decoding import DecodeRequests, decoding
from podmand.errors import InvalidArgument, NotFound, Unavailable
from podmand.libpod import PodmanError, PodmanUnavailable
from podmand.servicer import INTERNAL_MESSAGE, ComputeDriverServicer, Readiness


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, details)
        self.code, self.details = code, details


class Context:
    """What the servicer uses of grpc's context: abort raises, as grpc's does."""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


def rpc_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "podmand.rpc"]


def run(call: Callable[[], Awaitable[Any]]) -> Aborted:
    servicer = ComputeDriverServicer(None, None, Readiness())  # type: ignore[arg-type]
    with pytest.raises(Aborted) as err:
        asyncio.run(servicer._run("GetSandbox", "sb1", Context(), call))
    return err.value


def raising(exc: BaseException) -> Callable[[], Awaitable[Any]]:
    async def call() -> Any:
        raise exc

    return call


def test_unexpected_exception_is_internal_with_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """A bug is INTERNAL (not UNKNOWN), logged code=INTERNAL with its traceback; the
    client gets a short message without the exception text (it may hold request data)."""
    with caplog.at_level(logging.INFO, "podmand.rpc"):
        err = run(raising(KeyError("secret-ish detail")))
    assert (err.code, err.details) == (grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)
    assert "secret-ish" not in err.details
    [record] = rpc_records(caplog)
    assert record.levelno == logging.ERROR
    assert "code=INTERNAL" in record.getMessage() and "code=OK" not in record.getMessage()
    # The traceback: as exc_info, or already formatted (and redacted) by podmand's log filter.
    assert (record.exc_info is not None and isinstance(record.exc_info[1], KeyError)) or \
        "KeyError: 'secret-ish detail'" in (record.exc_text or "")


@pytest.mark.parametrize(
    ("exc", "code", "details"),
    [
        (NotFound("sandbox sb1 not found"), grpc.StatusCode.NOT_FOUND, "sandbox sb1 not found"),
        (Unavailable("busy"), grpc.StatusCode.UNAVAILABLE, "busy"),
        (PodmanUnavailable("socket gone"), grpc.StatusCode.UNAVAILABLE, "Podman is unavailable: socket gone"),
        (PodmanError(500, "boom"), grpc.StatusCode.INTERNAL, "podman API error (500): boom"),
    ],
)
def test_known_errors_keep_their_codes(exc: Exception, code: grpc.StatusCode, details: str,
                                       caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, "podmand.rpc"):
        err = run(raising(exc))
    assert (err.code, err.details) == (code, details)
    [record] = rpc_records(caplog)
    assert f"code={code.name}" in record.getMessage() and record.exc_info is None and not record.exc_text


def test_cancelled_rpc_is_logged_cancelled(caplog: pytest.LogCaptureFixture) -> None:
    servicer = ComputeDriverServicer(None, None, Readiness())  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, "podmand.rpc"), pytest.raises(asyncio.CancelledError):
        asyncio.run(servicer._run("GetSandbox", "sb1", Context(), raising(asyncio.CancelledError())))
    [record] = rpc_records(caplog)
    assert "code=CANCELLED" in record.getMessage()


def test_success_is_ok(caplog: pytest.LogCaptureFixture) -> None:
    servicer = ComputeDriverServicer(None, None, Readiness())  # type: ignore[arg-type]

    async def call() -> str:
        return "done"

    with caplog.at_level(logging.INFO, "podmand.rpc"):
        assert asyncio.run(servicer._run("GetSandbox", "sb1", Context(), call)) == "done"
    assert "code=OK" in rpc_records(caplog)[0].getMessage()


@pytest.mark.parametrize(
    ("sandbox_id", "shown"),
    [
        ("x\nFORGED podmand: ready", "'x\\nFORGED podmand: ready'"),
        ("a\rb\x1b[2Jc", "'a\\rb\\x1b[2Jc'"),
        ("z" * 129, "(129 characters)"),
        ("sb-1.ok_x", "sb-1.ok_x"),  # a valid id is logged as it is
    ],
)
def test_invalid_ids_are_logged_escaped(sandbox_id: str, shown: str, caplog: pytest.LogCaptureFixture) -> None:
    """An id is logged before it is checked: one that is not a valid id is logged as
    requestchecks.shown renders it (escaped, bounded), so a caller's newline cannot
    start a log line of its own; the JSON field carries the same rendering."""
    servicer = ComputeDriverServicer(None, None, Readiness())  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, "podmand.rpc"), pytest.raises(Aborted):
        asyncio.run(servicer._run("GetSandbox", sandbox_id, Context(), raising(InvalidArgument("sandbox_id: bad"))))
    [record] = rpc_records(caplog)
    message = record.getMessage()
    assert f"sandbox={shown} code=INVALID_ARGUMENT" in message
    assert "\n" not in message and "\r" not in message and "\x1b" not in message
    assert record.fields["sandbox"] == shown  # type: ignore[attr-defined]


# ---------------------------------------------------------------- request decoding


def test_decoding_unary_refuses_bad_bytes_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[pb.GetSandboxRequest] = []

    async def get(request: pb.GetSandboxRequest, context: Any) -> pb.GetSandboxResponse:
        seen.append(request)
        return pb.GetSandboxResponse()

    handler = grpc.unary_unary_rpc_method_handler(get, request_deserializer=pb.GetSandboxRequest.FromString,
                                                  response_serializer=pb.GetSandboxResponse.SerializeToString)
    wrapped = decoding(handler, "/openshell.compute.v1.ComputeDriver/GetSandbox")
    assert wrapped.request_deserializer is None
    assert wrapped.response_serializer is handler.response_serializer
    good = pb.GetSandboxRequest(sandbox_id="sb1").SerializeToString()
    asyncio.run(wrapped.unary_unary(good, Context()))
    assert [r.sandbox_id for r in seen] == ["sb1"]
    with caplog.at_level(logging.INFO, "podmand.rpc"), pytest.raises(Aborted) as err:
        asyncio.run(wrapped.unary_unary(b"\xff\xff\xff", Context()))
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid protobuf message" in err.value.details
    [record] = rpc_records(caplog)
    assert record.levelno == logging.WARNING and record.exc_info is None and not record.exc_text
    assert "rpc=GetSandbox code=INVALID_ARGUMENT" in record.getMessage()


def test_decoding_unary_stream_generator() -> None:
    async def watch(request: pb.WatchSandboxesRequest, context: Any) -> Any:
        for i in range(2):
            yield pb.WatchSandboxesEvent(sandbox=pb.WatchSandboxesSandboxEvent(sandbox=pb.DriverSandbox(id=str(i))))

    handler = grpc.unary_stream_rpc_method_handler(watch, request_deserializer=pb.WatchSandboxesRequest.FromString)
    wrapped = decoding(handler, "/x/WatchSandboxes")

    async def collect(raw: bytes) -> list[str]:
        return [e.sandbox.sandbox.id async for e in wrapped.unary_stream(raw, Context())]

    assert asyncio.run(collect(b"")) == ["0", "1"]
    with pytest.raises(Aborted):
        asyncio.run(collect(b"\xff\xff"))


def test_decoding_stream_stream() -> None:
    async def echo(requests: Any, context: Any) -> Any:
        async for request in requests:
            yield pb.GetSandboxResponse(sandbox=pb.DriverSandbox(id=request.sandbox_id))

    handler = grpc.stream_stream_rpc_method_handler(echo, request_deserializer=pb.GetSandboxRequest.FromString)
    wrapped = decoding(handler, "/x/Echo")

    async def collect(raws: list[bytes]) -> list[str]:
        async def source() -> Any:
            for raw in raws:
                yield raw

        return [r.sandbox.id async for r in wrapped.stream_stream(source(), Context())]

    assert asyncio.run(collect([pb.GetSandboxRequest(sandbox_id="a").SerializeToString()])) == ["a"]
    with pytest.raises(Aborted):
        asyncio.run(collect([b"\xff\xff"]))


def test_interceptor_caches_per_method_and_passes_unknown() -> None:
    handler = grpc.unary_unary_rpc_method_handler(lambda r, c: r, request_deserializer=bytes)
    details = type("D", (), {"method": "/s/M"})()
    interceptor = DecodeRequests()

    async def lookup(found: Any) -> Any:
        async def continuation(_: Any) -> Any:
            return found

        return await interceptor.intercept_service(continuation, details)

    first, second = asyncio.run(lookup(handler)), asyncio.run(lookup(handler))
    assert first is second and first.request_deserializer is None
    assert asyncio.run(lookup(None)) is None
