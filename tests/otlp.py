"""A real OTLP/gRPC trace receiver for tests: opentelemetry-proto's generated
``TraceService`` on a loopback port the test starts, keeping every export it is sent.

It answers as a collector does and holds what arrived: each span with its resource's
attributes, and the bytes of every request (to search for what must never be sent).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from tests import wait


def value(any_value: common_pb2.AnyValue) -> Any:
    return getattr(any_value, any_value.WhichOneof("value") or "string_value")


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs}


@dataclass(frozen=True)
class Received:
    """One span as it arrived, with the attributes of the resource it came with."""

    span: trace_pb2.Span
    resource: dict[str, Any]

    @property
    def name(self) -> str:
        return self.span.name

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_id(self) -> str:
        return self.span.parent_span_id.hex()

    @property
    def attributes(self) -> dict[str, Any]:
        return attributes(self.span.attributes)


class _Service(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver

    def Export(self, request: Any, context: Any) -> Any:
        self.receiver._add(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class Receiver:
    """Listening on 127.0.0.1 (or the Unix socket ``unix``) from construction until
    :meth:`close`; ``endpoint`` is what podmand's ``--otlp-endpoint`` takes."""

    def __init__(self, unix: str = "") -> None:
        self._lock = threading.Lock()
        self._spans: list[Received] = []
        self._raw: list[bytes] = []
        self.exports = 0
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Service(self), self._server)
        if unix:  # a Unix socket at that path instead
            self._server.add_insecure_port(f"unix:{unix}")
            self.endpoint = f"unix://{unix}"
        else:
            self.endpoint = f"http://127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def _add(self, request: Any) -> None:
        with self._lock:
            self.exports += 1
            self._raw.append(request.SerializeToString())
            for resource_spans in request.resource_spans:
                resource = attributes(resource_spans.resource.attributes)
                for scope in resource_spans.scope_spans:
                    self._spans += [Received(s, resource) for s in scope.spans]

    @property
    def spans(self) -> list[Received]:
        with self._lock:
            return list(self._spans)

    @property
    def raw(self) -> bytes:
        with self._lock:
            return b"".join(self._raw)

    def named(self, name: str) -> list[Received]:
        return [s for s in self.spans if s.name == name]

    def wait_for(self, predicate: Callable[[list[Received]], Any], deadline: float, what: str) -> list[Received]:
        """The spans received, once ``predicate(spans)`` holds (within ``deadline`` seconds)."""
        wait.wait_until(lambda: predicate(self.spans), deadline, what,
                        detail=lambda: sorted({s.name for s in self.spans}))
        return self.spans

    def close(self) -> None:
        self._server.stop(None).wait()


def children(spans: list[Received], parent: Received) -> Iterator[Received]:
    return (s for s in spans if s.parent_id == parent.span_id and s.trace_id == parent.trace_id)
