"""Where podmand's traces begin: a server span per driver RPC, a client span per libpod call.

When ``otlp_endpoint`` is set, :func:`start` turns tracing on (``tracing``) and the
server gets :class:`RpcSpans` as its outermost interceptor: each call of the
ComputeDriver service runs in a span named ``driver.<snake_rpc>`` (upstream's
names: ``driver.create_sandbox``...; a method the proto does not declare is
``driver.unknown``, so a caller cannot mint span names) with upstream's attributes
(``rpc.system``, ``rpc.service``, ``rpc.method``, ``rpc.grpc.status_code``), whose
parent is the W3C ``traceparent`` the caller sent in its metadata. Health and
reflection are not traced. :func:`observe` gives the libpod client
:func:`libpod_call`, so what the driver asks of Podman inside an RPC (or of the
provisioning it starts) is a child span named by method and route template.
Without an endpoint none of this is installed.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc

from . import __version__, tracing
from ._proto import compute_driver_pb2
from .config import Settings
from .decoding import Wrapping
from .libpod import PodmanClient

log = logging.getLogger("podmand")
SERVICE = "openshell.compute.v1.ComputeDriver"
_METHODS = compute_driver_pb2.DESCRIPTOR.services_by_name["ComputeDriver"].methods_by_name


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def operation(path: str) -> str:
    """``driver.<snake_rpc>`` of a ComputeDriver method path, ``driver.unknown`` for another."""
    method = path.rsplit("/", 1)[-1]
    return f"driver.{snake(method)}" if method in _METHODS else "driver.unknown"


def start(settings: Settings) -> tracing.Tracing | None:
    """Tracing on, when an endpoint is set; None otherwise (nothing imported)."""
    if not settings.otlp_endpoint:
        return None
    traces = tracing.start(settings.otlp_endpoint, version=__version__, gateway_name=settings.gateway_name)
    log.info("traces: exporting spans to %s as %s", settings.otlp_endpoint, tracing.SERVICE_NAME)
    return traces


def interceptors() -> tuple[Any, ...]:
    return (RpcSpans(),) if tracing.enabled() else ()


def observe(podman: PodmanClient) -> None:
    if tracing.enabled():
        podman.observe = libpod_call


@contextlib.contextmanager
def libpod_call(method: str, route: str) -> Iterator[Callable[[int], None]]:
    """One libpod call as a client span: ``GET /libpod/containers/{name}/json``."""
    attributes = {"http.request.method": method, "url.template": route, "network.transport": "unix"}
    with tracing.span(f"{method} {route}", attributes, client=True) as current:

        def answered(status: int) -> None:
            if current is not None:
                current.set_attribute("http.response.status_code", status)
                if status >= 500:
                    tracing.failed(current, str(status))

        yield answered


def _carrier(context: Any) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def _finish(current: Any, context: Any, error: BaseException | None) -> None:
    """The RPC's gRPC status on its span (a failure: its code's name)."""
    code = context.code() if hasattr(context, "code") else None
    if isinstance(code, int):
        code = next((c for c in grpc.StatusCode if c.value[0] == code), None)
    if code is None:
        code = grpc.StatusCode.CANCELLED if error is not None else grpc.StatusCode.OK
    current.set_attribute("rpc.grpc.status_code", code.value[0])
    if code != grpc.StatusCode.OK:
        tracing.failed(current, code.name)


def traced(handler: Any, path: str) -> Any:
    """``handler`` with each call in its span."""
    name = operation(path)
    attributes = {"rpc.system": "grpc", "rpc.service": SERVICE, "rpc.method": name.removeprefix("driver.")}
    if handler.response_streaming:
        behavior = handler.stream_stream if handler.request_streaming else handler.unary_stream

        async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
            current = tracing.server_span(name, _carrier(context), attributes, current=False)
            error: BaseException | None = None
            try:
                async for item in behavior(request, context):
                    yield item
            except BaseException as exc:
                error = exc
                raise
            finally:
                _finish(current, context, error)
                current.end()

        wrapped: Callable[..., Any] = streaming
    else:
        behavior = handler.stream_unary if handler.request_streaming else handler.unary_unary

        async def unary(request: Any, context: Any) -> Any:
            with tracing.server_span(name, _carrier(context), attributes) as current:
                try:
                    result = behavior(request, context)
                    result = await result if inspect.isawaitable(result) else result
                except BaseException as exc:
                    _finish(current, context, exc)
                    raise
                _finish(current, context, None)
                return result

        wrapped = unary
    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return make(wrapped, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)


class RpcSpans(Wrapping):
    """Each ComputeDriver handler in :func:`traced` (health and reflection as they are)."""

    def wrap(self, handler: Any, method: str) -> Any:
        if handler is None or not method.startswith(f"/{SERVICE}/"):
            return handler
        return traced(handler, method)
