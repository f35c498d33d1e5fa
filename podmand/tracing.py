"""OpenTelemetry traces, exported over OTLP/gRPC when ``otlp_endpoint`` is set.

This module owns the tracer: :func:`start` makes the SDK's provider (one batch
exporter to the endpoint, the resource upstream's dashboards select on:
``service.name`` ``openshell-driver-podman``, ``service.version`` and, when set,
``openshell.gateway.name``) and :class:`Tracing.close` flushes and ends it at exit.
Every other layer makes spans through :func:`span` and :func:`server_span`, which
cost one global read while traces are off: the SDK is imported by :func:`start`
alone, so a podmand without an endpoint never loads it. A leaf (no podmand
imports) so that any layer may make spans; the edge (``rpcspans``) decides where.

A span carries what names an operation (the RPC, the libpod route, the sandbox id,
the image reference), never a request's values: an error is recorded by its type
alone, as a message may quote what the caller sent.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

SERVICE_NAME = "openshell-driver-podman"  # upstream's: dashboards built for its driver keep working
GATEWAY_NAME_ATTRIBUTE = "openshell.gateway.name"
EXPORT_TIMEOUT = 5.0  # seconds one export may take; it also bounds the flush at exit
SCHEMES = ("http", "https", "unix")
Attributes = Mapping[str, str | int | bool]

_tracer: Any = None  # the SDK's tracer while traces are on, else None


def endpoint_problem(endpoint: str) -> str:
    """Why ``endpoint`` is no OTLP/gRPC endpoint ('' when it is one): http://host:port,
    https://host:port (TLS, the system's CAs) or unix:///path/to/socket."""
    try:
        url = urllib.parse.urlsplit(endpoint)
        port = url.port
    except ValueError as exc:
        return f"{endpoint!r} is not a URL ({exc})"
    if url.scheme not in SCHEMES:
        return f"{endpoint!r} must start with http://, https:// or unix:// (OTLP over gRPC)"
    if url.scheme == "unix":
        path = url.path if not url.netloc else ""
        return "" if path.startswith("/") else f"{endpoint!r}: a unix:// endpoint is unix:///absolute/path"
    if not url.hostname:
        return f"{endpoint!r} names no host (http://host:4317)"
    if url.path not in ("", "/") or url.query or url.username or url.password:
        return f"{endpoint!r}: OTLP/gRPC takes host and port only, no path, query or credentials"
    return "" if port is None or port > 0 else f"{endpoint!r}: port 0"


def _channel_target(endpoint: str) -> tuple[str, bool]:
    """(what grpc dials, whether without TLS)."""
    url = urllib.parse.urlsplit(endpoint)
    if url.scheme == "unix":
        return f"unix://{url.path}", True
    return f"{url.hostname if ':' not in (url.hostname or '') else f'[{url.hostname}]'}:{url.port or 4317}", (
        url.scheme == "http"
    )


def resource_attributes(version: str, gateway_name: str) -> dict[str, str]:
    attributes = {"service.name": SERVICE_NAME, "service.version": version}
    if gateway_name.strip():
        attributes[GATEWAY_NAME_ATTRIBUTE] = gateway_name.strip()
    return attributes


class Tracing:
    """Traces on: the SDK's provider, until :meth:`close`."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider

    def close(self) -> None:
        """Export what is left (within EXPORT_TIMEOUT) and stop; spans made after are dropped."""
        global _tracer
        _tracer = None
        self.provider.shutdown()


def start(endpoint: str, *, version: str, gateway_name: str = "") -> Tracing:
    """Turn traces on: spans made from now on are exported in batches to ``endpoint``."""
    global _tracer
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    target, insecure = _channel_target(endpoint)
    exporter = OTLPSpanExporter(endpoint=target, insecure=insecure, timeout=EXPORT_TIMEOUT)
    provider = TracerProvider(resource=Resource.create(resource_attributes(version, gateway_name)))
    provider.add_span_processor(BatchSpanProcessor(exporter, export_timeout_millis=EXPORT_TIMEOUT * 1000))
    _tracer = provider.get_tracer(SERVICE_NAME, version)
    return Tracing(provider)


def enabled() -> bool:
    return _tracer is not None


_OFF: contextlib.nullcontext[None] = contextlib.nullcontext()


def span(name: str, attributes: Attributes | None = None, *, client: bool = False) -> AbstractContextManager[Any]:
    """A span named ``name``, current inside the block (a child of the current one),
    ended with an error status when the block raises; with traces off, nothing. A
    ``client`` span (a call out, to libpod) is made only inside another span: calls
    nothing asked for (the hub's resyncs and event stream) make no traces."""
    if _tracer is None:
        return _OFF
    if client:
        from opentelemetry import trace

        if not trace.get_current_span().get_span_context().is_valid:
            return _OFF
    return _in_span(name, attributes, client)


@contextlib.contextmanager
def _in_span(name: str, attributes: Attributes | None, client: bool) -> Iterator[Any]:
    from opentelemetry.trace import SpanKind

    kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
    with _tracer.start_as_current_span(name, kind=kind, attributes=attributes, record_exception=False,
                                       set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as exc:
            failed(current, type(exc).__name__)
            raise


def failed(current: Any, why: str) -> None:
    """Mark ``current`` (a span :func:`span` gave) as failed, saying ``why`` (never a value)."""
    from opentelemetry.trace import Status, StatusCode

    current.set_attribute("error.type", why)
    current.set_status(Status(StatusCode.ERROR, why))


def server_span(name: str, carrier: Mapping[str, str], attributes: Attributes, *, current: bool = True) -> Any:
    """A server span (one RPC) whose parent is the W3C ``traceparent`` in ``carrier``
    (the call's metadata), or a new trace without one. ``current``: a context manager
    making it the current span; otherwise the span itself, for a stream to end."""
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = TraceContextTextMapPropagator().extract(carrier)
    if current:
        return _tracer.start_as_current_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes,
                                             record_exception=False, set_status_on_exception=False)
    return _tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes,
                              record_exception=False, set_status_on_exception=False)


def probe(endpoint: str) -> str:
    """Whether the collector at ``endpoint`` takes an (empty) OTLP export: '' when it
    does, else why not. For ``podmand doctor``; imports the SDK's protobufs and grpc."""
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    target, insecure = _channel_target(endpoint)
    channel = grpc.insecure_channel(target) if insecure else grpc.secure_channel(target, grpc.ssl_channel_credentials())
    try:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        stub.Export(trace_service_pb2.ExportTraceServiceRequest(), timeout=EXPORT_TIMEOUT)
    except grpc.RpcError as exc:
        return f"{exc.code().name}: {exc.details()}"
    finally:
        channel.close()
    return ""


def current_failed(why: str) -> None:
    """Mark the current span failed (a failure that is reported, not raised)."""
    if _tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    if current.get_span_context().is_valid:
        failed(current, why)
