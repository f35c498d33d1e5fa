"""PodmanClient driven through MockTransport: what each endpoint sends, how answers
and failures come back, and that every deadline in Timeouts is the one applied.

No socket here (tests/faults/test_client.py covers the HTTP layer on a real one).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import msgspec
import pytest

from podmand.libpod import (
    BadEvent,
    Event,
    MockTransport,
    PodmanClient,
    PodmanError,
    PodmanUnavailable,
    PodmanUnreadable,
    Request,
    Response,
    Streamed,
    Timeouts,
    UnixTransport,
    path_stat,
)
from podmand.libpod.client import log_configuration

DEADLINE = 10.0  # bounds every test; a deadline the client failed to apply ends as TimeoutError here
SHORT = 0.05  # a deadline under test: a hanging handler must end in PodmanUnavailable


def run(coro: Awaitable[Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, DEADLINE)

    return asyncio.run(bounded())


def ok(body: Any = b"", status: int = 200, **headers: str) -> Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Response(status, dict(headers), data)


class Recorder:
    """A handler that remembers each request and answers from a function of it."""

    def __init__(self, answer: Callable[[Request], Response | Streamed] = lambda _r: ok()) -> None:
        self.seen: list[Request] = []
        self.answer = answer

    def __call__(self, request: Request) -> Response | Streamed:
        self.seen.append(request)
        return self.answer(request)

    @property
    def last(self) -> Request:
        return self.seen[-1]

    def path_and_query(self) -> tuple[str, dict[str, list[str]]]:
        path, _, query = self.last.target.partition("?")
        return urllib.parse.unquote(path), urllib.parse.parse_qs(query)


def client_with(handler: Any, **timeouts: float) -> PodmanClient:
    return PodmanClient(transport=MockTransport(handler), timeouts=Timeouts(**timeouts))


async def hang(_request: Request) -> Response:
    await asyncio.Event().wait()
    raise AssertionError("never answers")


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


# ---------------------------------------------------------------- what endpoints send


def test_list_containers_sends_libpod_filters_as_json() -> None:
    rec = Recorder(lambda _r: ok([{"Id": "c1", "Names": ["n1"], "State": "running"}]))

    async def main() -> None:
        entries = await client_with(rec).list_containers(["a=b", "c=d"])
        assert [(e.id, e.names, e.state) for e in entries] == [("c1", ["n1"], "running")]

    run(main())
    path, query = rec.path_and_query()
    assert (rec.last.method, path) == ("GET", "/v4.0.0/libpod/containers/json")
    assert query == {"all": ["true"], "filters": ['{"label":["a=b","c=d"]}']}


def test_a_list_by_name_sends_the_name_filter_beside_the_labels() -> None:
    rec = Recorder(lambda _r: ok([]))
    run(client_with(rec).list_containers(["a=b"], name="^podmand-read-"))
    assert rec.path_and_query()[1]["filters"] == ['{"label":["a=b"],"name":["^podmand-read-"]}']


def test_create_container_posts_the_spec_as_json() -> None:
    rec = Recorder(lambda _r: ok({"Id": "abc", "Warnings": ["w1"]}, 201))

    async def main() -> tuple[str, list[str]]:
        return await client_with(rec).create_container({"name": "x", "labels": {"k": "v"}})

    assert run(main()) == ("abc", ["w1"])
    assert rec.last.target == "/v4.0.0/libpod/containers/create"
    assert rec.last.headers["Content-Type"] == "application/json"
    expected = {"name": "x", "labels": {"k": "v"}, "log_configuration": {"driver": "k8s-file"}}
    assert isinstance(rec.last.body, bytes) and json.loads(rec.last.body) == expected


def test_every_container_logs_to_a_file_unless_its_spec_says_otherwise() -> None:
    """k8s-file whatever containers.conf's log_driver says (journald the user cannot read:
    containers/podman#26910); a spec's own log_configuration is kept."""
    rec = Recorder(lambda _r: ok({"Id": "abc", "Warnings": []}, 201))
    own = {"driver": "none"}

    async def main() -> None:
        await client_with(rec).create_container({"name": "x", "log_configuration": own})

    run(main())
    assert json.loads(rec.last.body)["log_configuration"] == own


def test_every_container_log_is_bounded_by_the_clients_log_size_max() -> None:
    """libpod's SpecGenerator ``log_configuration.size`` (bytes; Podman passes it to conmon as
    --log-size-max); 0 sends none, leaving containers.conf's log_size_max to Podman."""
    rec = Recorder(lambda _r: ok({"Id": "abc", "Warnings": []}, 201))
    bounded = PodmanClient(transport=MockTransport(rec), log_size_max=65536)
    run(bounded.create_container({"name": "x"}))
    assert json.loads(rec.last.body)["log_configuration"] == {"driver": "k8s-file", "size": 65536}
    assert log_configuration(0) == {"driver": "k8s-file"}


def test_image_references_are_one_path_segment() -> None:
    rec = Recorder(lambda _r: ok({"Id": "sha256:1", "Config": {"User": "1000", "Env": ["A=1"]}}))

    async def main() -> None:
        image = await client_with(rec).inspect_image("quay.io/org/img:1.0")
        assert (image.id, image.config.user, image.config.env) == ("sha256:1", "1000", ["A=1"])

    run(main())
    assert rec.last.target == "/v4.0.0/libpod/images/quay.io%2Forg%2Fimg%3A1.0/json"


async def read_all(stream: AbstractAsyncContextManager[AsyncIterator[bytes]]) -> bytes:
    async with stream as chunks:
        return b"".join([c async for c in chunks])


@pytest.mark.parametrize(("call", "method", "target"), [
    (lambda c: c.ping(), "GET", "/_ping"),
    (lambda c: c.start_container("x"), "POST", "/v4.0.0/libpod/containers/x/start"),
    (lambda c: c.unpause_container("x"), "POST", "/v4.0.0/libpod/containers/x/unpause"),
    (lambda c: c.stop_container("x", 7), "POST", "/v4.0.0/libpod/containers/x/stop?timeout=7"),
    (lambda c: c.remove_container("x", 3), "DELETE", "/v4.0.0/libpod/containers/x?force=true&timeout=3&volumes=true"),
    (lambda c: c.remove_volume("v"), "DELETE", "/v4.0.0/libpod/volumes/v?force=true"),
    (lambda c: c.remove_network("n"), "DELETE", "/v4.0.0/libpod/networks/n"),
    (lambda c: read_all(c.archive("x", "/etc/passwd")), "GET",
     "/v4.0.0/libpod/containers/x/archive?path=%2Fetc%2Fpasswd"),
])
def test_endpoint_request_lines(call: Callable[[PodmanClient], Awaitable[Any]], method: str, target: str) -> None:
    rec = Recorder(lambda _r: ok(status=204))
    run(call(client_with(rec)))
    assert (rec.last.method, rec.last.target) == (method, target)


def test_put_archive_sends_the_tar_as_the_body() -> None:
    rec = Recorder(lambda _r: ok(status=200))
    run(client_with(rec).put_archive("x", "/.openshell/channel", b"TAR"))
    assert rec.last.method == "PUT"
    # copyUIDGID=false: the tar's owners stay (libpod's default chowns all to the container's user)
    assert rec.last.target == "/v4.0.0/libpod/containers/x/archive?path=%2F.openshell%2Fchannel&copyUIDGID=false"
    assert rec.last.headers == {"Content-Type": "application/x-tar"} and rec.last.body == b"TAR"


def test_put_archive_raises_podmans_refusal() -> None:
    rec = Recorder(lambda _r: ok({"cause": "no such file", "message": "no such file or directory", "response": 404},
                                 status=404))
    with pytest.raises(PodmanError) as exc:
        run(client_with(rec).put_archive("x", "/nope", b"TAR"))
    assert exc.value.status == 404 and "no such file" in exc.value.message


def test_pull_sends_credentials_only_with_the_pull_and_yields_lines() -> None:
    body = b'{"stream":"Trying"}\n{"id":"sha256:abc","images":["sha256:abc"]}\n'
    rec = Recorder(lambda _r: Streamed(200, {}, chunks(body[:5], body[5:])))

    async def main() -> list[tuple[str, str]]:
        client = client_with(rec)
        lines = [(line.stream, line.id) async for line in client.pull_image("img:1", "missing", auth="tok")]
        await client.ping()
        return lines

    assert run(main()) == [("Trying", ""), ("", "sha256:abc")]
    pull, ping = rec.seen
    assert pull.target == "/v4.0.0/libpod/images/pull?reference=img%3A1&policy=missing"
    assert pull.headers == {"X-Registry-Auth": "tok"}
    assert "X-Registry-Auth" not in ping.headers


def test_wait_repeats_its_condition_and_returns_the_exit_code() -> None:
    rec = Recorder(lambda _r: Streamed(200, {}, chunks(b"13", b"7\n")))
    assert run(client_with(rec).wait_container("x")) == 137
    path, query = rec.path_and_query()
    assert path == "/v4.0.0/libpod/containers/x/wait" and query == {"condition": ["stopped", "exited"]}


def test_import_streams_the_file_with_its_content_type() -> None:
    rec = Recorder(lambda _r: ok({"Id": "sha256:new"}))
    tar = b"x" * (3 * 1024 * 1024 + 5)  # more than one read
    got = run(client_with(rec).import_image(io.BytesIO(tar + b"trailing"), len(tar), "localhost/r:1", None))
    assert got == "sha256:new"
    assert rec.last.target == "/v4.0.0/libpod/images/import?reference=localhost%2Fr%3A1"
    assert rec.last.headers == {"Content-Type": "application/x-tar"}
    assert rec.last.body == tar  # exactly the declared size, read whole by the mock


def test_import_of_a_short_file_is_refused_before_podman_answers() -> None:
    rec = Recorder(lambda _r: ok({"Id": "sha256:new"}))
    with pytest.raises(PodmanError, match="ended 10 bytes short") as err:
        run(client_with(rec).import_image(io.BytesIO(b"abc"), 13, "r:1", None))
    assert err.value.status == 400 and rec.seen == []


def test_past_events_decodes_each_line() -> None:
    lines = b'{"Action":"start","timeNano":1}\n\n{"Action":"died","Actor":{"Attributes":{"containerExitCode":"3"}}}\n'
    rec = Recorder(lambda _r: ok(lines))
    events = run(client_with(rec).past_events("cid", 100))
    assert [e.Action for e in events] == ["start", "died"]
    assert (events[1].Actor.attributes or {})["containerExitCode"] == "3"
    _path, query = rec.path_and_query()
    assert query["stream"] == ["false"] and query["since"] == ["100"]
    assert json.loads(query["filters"][0]) == {"container": ["cid"], "type": ["container"]}


def test_image_names_keeps_only_the_repository() -> None:
    images = [{"Id": "1", "Names": ["localhost/podmand-rootfs:a", "localhost/other:b"]}, {"Id": "2", "Names": None}]
    rec = Recorder(lambda _r: ok(images))
    assert run(client_with(rec).image_names("localhost/podmand-rootfs")) == ["localhost/podmand-rootfs:a"]
    assert json.loads(rec.path_and_query()[1]["filters"][0]) == {"reference": ["localhost/podmand-rootfs"]}


def test_lists_accept_null_for_none() -> None:
    rec = Recorder(lambda _r: ok(b"null"))

    async def main() -> None:
        client = client_with(rec)
        assert await client.list_containers([]) == []
        assert await client.list_volumes([]) == []
        assert await client.list_networks([]) == []
        assert await client.list_images() == []

    run(main())


# ---------------------------------------------------------------- answers that are errors


def test_404_is_a_gone_podman_error_and_409_is_not() -> None:
    def answer(req: Request) -> Response:
        if req.method == "DELETE":
            return ok({"message": "container is in use"}, 409)
        return ok({"cause": "no such container", "message": "no container with name x"}, 404)

    async def main() -> None:
        client = client_with(answer)
        with pytest.raises(PodmanError) as err:
            await client.inspect_container("x")
        assert err.value.gone and err.value.status == 404 and err.value.message == "no container with name x"
        with pytest.raises(PodmanError) as err:
            await client.remove_image("img")
        assert not err.value.gone and err.value.status == 409

    run(main())


def test_removing_or_inspecting_what_is_gone_is_not_an_error() -> None:
    gone = ok({"message": "no such volume: v"}, 500)  # what Podman says when someone removed it a moment ago

    async def main() -> None:
        client = client_with(lambda _r: gone)
        assert await client.remove_volume("v") is False
        assert await client.remove_container("c", 0) is False
        assert await client.inspect_volume("v") is None
        assert await client.inspect_network("n") is None

    run(main())


def test_image_exists_is_yes_no_or_an_error() -> None:
    statuses = iter([204, 404, 500])

    async def main() -> None:
        client = client_with(lambda _r: ok({"message": "storage is broken"}, next(statuses)))
        assert await client.image_exists("a") is True
        assert await client.image_exists("b") is False
        with pytest.raises(PodmanError, match="storage is broken"):
            await client.image_exists("c")

    run(main())


def test_a_stream_refused_up_front_is_a_podman_error() -> None:
    refused = Streamed(500, {}, chunks(b'{"message":', b'"events are off"}'))

    async def main() -> None:
        with pytest.raises(PodmanError, match="events are off"):
            async with client_with(lambda _r: refused).events([]):
                raise AssertionError("a refused stream yields nothing")

    run(main())


def test_a_failed_pull_reported_in_band_is_a_podman_error() -> None:
    body = b'{"stream":"Trying"}\n{"error":"manifest unknown"}\n'

    async def main() -> list[str]:
        seen = []
        with pytest.raises(PodmanError, match="manifest unknown"):
            async for line in client_with(lambda _r: Streamed(200, {}, chunks(body))).pull_image("i", "always"):
                seen.append(line.stream)
        return seen

    assert run(main()) == ["Trying"]


# ---------------------------------------------------------------- answers podmand cannot read


@pytest.mark.parametrize(("body", "call"), [
    (b"<html>not libpod</html>", lambda c: c.info()),
    (b'{"host": "not an object"}', lambda c: c.info()),
    (b'{"Warnings": []}', lambda c: c.create_container({})),  # no Id
    (b'[{"Id": 7}]', lambda c: c.list_containers([])),
    (b'{"Status": ["healthy"]}', lambda c: c.healthcheck("x")),
    (b"garbage", lambda c: c.past_events("x", 0)),
])
def test_undecodable_answers_are_podman_unreadable(body: bytes, call: Callable[[PodmanClient], Awaitable[Any]]) -> None:
    with pytest.raises(PodmanUnreadable, match="is not what libpod sends") as err:
        run(call(client_with(lambda _r: ok(body))))
    assert not isinstance(err.value, msgspec.DecodeError)


def test_unreadable_stream_lines_are_podman_unreadable() -> None:
    async def main() -> None:
        with pytest.raises(PodmanUnreadable, match="no exit code"):
            await client_with(lambda _r: Streamed(200, {}, chunks(b"exited\n"))).wait_container("x")
        with pytest.raises(PodmanUnreadable, match="image pull"):
            async for _ in client_with(lambda _r: Streamed(200, {}, chunks(b"{not json\n"))).pull_image("i", "x"):
                pass

    run(main())


def test_an_over_long_pull_line_is_a_broken_podman() -> None:
    huge = b'{"stream":"' + b"x" * (5 << 20)

    async def main() -> None:
        with pytest.raises(PodmanUnavailable, match="over-long line"):
            async for _ in client_with(lambda _r: Streamed(200, {}, chunks(huge[:1 << 20], huge[1 << 20:]))).pull_image(
                    "i", "x"):
                pass

    run(main())


def test_events_decode_across_chunks_and_report_bad_lines() -> None:
    good = b'{"Type":"container","Action":"start","Actor":{"ID":"' + b"ab" * 32 + b'"}}'
    stream = Streamed(200, {}, chunks(good[:10], good[10:] + b"\n{bad", b"}\n" + good + b"\n"))

    async def main() -> list[Event | BadEvent]:
        async with client_with(lambda _r: stream).events(["x=y"]) as events:
            return [e async for e in events]

    out = run(main())
    assert [type(e).__name__ for e in out] == ["Event", "BadEvent", "Event"]
    assert isinstance(out[0], Event) and out[0].Actor.id == "ab" * 32
    assert isinstance(out[1], BadEvent) and "undecodable" in out[1].reason


def test_an_error_podman_writes_into_an_answered_event_stream_is_its_refusal() -> None:
    """Podman before 5.1 answers /events 200 at once; when its event logger cannot be read
    (events_logger = "none") its error body follows as a line: a PodmanError, not an event."""
    said = b'{"cause":"cannot read events with the \\"none\\" backend",' \
           b'"message":"cannot read events with the \\"none\\" backend","response":500}\n'

    async def main() -> list[str]:
        seen = []
        with pytest.raises(PodmanError, match=r'\(500\): cannot read events with the "none" backend'):
            async with client_with(lambda _r: Streamed(200, {}, chunks(b'{"Action":"start"}\n', said))).events(
                    []) as events:
                async for event in events:
                    assert isinstance(event, Event)
                    seen.append(event.Action)
        return seen

    assert run(main()) == ["start"]


# ---------------------------------------------------------------- broken connections


def test_oserror_from_the_handler_or_mid_stream_is_unavailable() -> None:
    def refuse(_r: Request) -> Response:
        raise ConnectionRefusedError("refused")

    async def broken() -> AsyncIterator[bytes]:
        yield b'{"Action":"start"}\n'
        raise ConnectionResetError("reset mid-stream")

    async def main() -> list[str]:
        with pytest.raises(PodmanUnavailable) as err:
            await client_with(refuse).info()
        assert isinstance(err.value.__cause__, ConnectionRefusedError)
        seen = []
        with pytest.raises(PodmanUnavailable, match="reset mid-stream"):
            async with client_with(lambda _r: Streamed(200, {}, broken())).events([]) as events:
                async for event in events:
                    assert isinstance(event, Event)
                    seen.append(event.Action)
        return seen

    assert run(main()) == ["start"]


def test_a_stream_left_early_is_closed() -> None:
    closed = asyncio.Event()

    async def endless() -> AsyncIterator[bytes]:
        try:
            while True:
                yield b'{"Action":"start"}\n'
        finally:
            closed.set()

    async def main() -> None:
        async with client_with(lambda _r: Streamed(200, {}, endless())).events([]) as events:
            async for _ in events:
                break
        await asyncio.wait_for(closed.wait(), DEADLINE)

    run(main())


# ---------------------------------------------------------------- deadlines (Timeouts)


@pytest.mark.parametrize(("call", "deadline", "what"), [
    (lambda c: c.info(), "request", "GET /info"),
    (lambda c: c.ping(), "ping", "GET /_ping"),
    (lambda c: c.create_container({"name": "x"}), "create", "POST /containers/create"),
    (lambda c: c.start_container("x"), "start", "POST /containers/x/start"),
    (lambda c: c.stop_container("x", 0), "stop_grace", "POST /containers/x/stop"),
    (lambda c: c.remove_container("x", 0), "remove_grace", "DELETE /containers/x"),
    (lambda c: c.healthcheck("x"), "healthcheck", "GET /containers/x/healthcheck"),
    (lambda c: c.past_events("x", 0), "past_events", "GET /events"),
])
def test_each_call_gives_up_at_its_own_deadline(call: Callable[[PodmanClient], Awaitable[Any]], deadline: str,
                                                what: str) -> None:
    """Only the deadline under test is short; were another one applied, the call would
    outlast the test's bound instead of ending in PodmanUnavailable."""
    long = {name: 3600.0 for name in ("request", "ping", "create", "start", "stop_grace", "remove_grace",
                                      "healthcheck", "past_events")}
    client = client_with(hang, **{**long, deadline: SHORT})
    with pytest.raises(PodmanUnavailable, match=f"did not answer {what} in time"):
        run(call(client))


def test_an_import_gives_up_when_podman_goes_quiet() -> None:
    with pytest.raises(PodmanUnavailable, match="did not answer the import of r:1 in time"):
        run(client_with(hang, request=3600.0).import_image(io.BytesIO(b"abc"), 3, "r:1", SHORT))


def test_the_socket_transport_takes_the_connect_deadline() -> None:
    client = PodmanClient("/nonexistent/podman.sock", timeouts=Timeouts(connect=1.5))
    assert isinstance(client.transport, UnixTransport)
    assert (client.transport.socket_path, client.transport.connect_timeout) == ("/nonexistent/podman.sock", 1.5)
    assert client.socket_path == "/nonexistent/podman.sock"
    with pytest.raises(TypeError):
        PodmanClient()



# ---------------------------------------------------------------- a path's stat (the archive endpoint's header)

# As Podman 4.3.1 answered HEAD /containers/<reader>/archive for an image with /a/b/c/d/e -> /opt/openshell/bin
# and /dangling -> /nowhere (tests/e2e/test_workdir.py makes such an image).
LINK = ("eyJuYW1lIjoiYmluIiwic2l6ZSI6MTgsIm1vZGUiOjEzNDIxODIzOSwibXRpbWUiOiIyMDI2LTEyLTA2VDA2OjM4OjI4WiIsImlzRGlyIjp0"
        "cnVlLCJsaW5rVGFyZ2V0IjoiL29wdC9vcGVuc2hlbGwvYmluIn0=")


def encoded(**info: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(info).encode()).decode()


def test_a_stat_says_whether_the_last_component_is_a_symbolic_link() -> None:
    link = path_stat(200, {"x-docker-container-path-stat": LINK}, "'/a/b/c/d/e'")
    assert link is not None and link.symlink and link.link_target == "/opt/openshell/bin" and link.is_dir
    directory = path_stat(200, {"x-docker-container-path-stat": encoded(name="d", mode=2147484141, isDir=True)}, "")
    assert directory is not None and not directory.symlink
    dangling = path_stat(404, {"x-docker-container-path-stat": encoded(name="nowhere", mode=134218239)}, "")
    assert dangling is not None and dangling.symlink  # a link leading nowhere is still one
    assert path_stat(404, {"content-length": "91"}, "") is None  # no such path


def test_a_stat_podman_could_not_make_or_that_cannot_be_read_is_an_error() -> None:
    with pytest.raises(PodmanError) as exc:
        path_stat(500, {}, "'/a' in container r")
    assert exc.value.status == 500 and "the stat of '/a' in container r failed" in str(exc.value)
    for header in ({}, {"x-docker-container-path-stat": "not base64!"},
                   {"x-docker-container-path-stat": encoded(mode="x")}):
        with pytest.raises(PodmanUnreadable, match="Podman's stat of '/a' is not base64 JSON"):
            path_stat(200, header, "'/a'")
