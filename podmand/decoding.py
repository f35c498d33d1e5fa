"""Request decoding that answers bad bytes with INVALID_ARGUMENT, quietly.

grpc's own deserializer turns an undecodable request into UNKNOWN and logs an
ERROR traceback per request, so anyone who can reach the socket could flood
the log. This interceptor decodes requests itself (for every service on the
server: driver, health, reflection) and refuses bad ones with one WARNING line.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

log = logging.getLogger("podmand.rpc")


class BadRequest(Exception):
    pass


def _decoder(method: str, deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(raw: bytes) -> Any:
        try:
            return deserialize(raw)
        except Exception:  # DecodeError, or anything a deserializer raises on bad bytes
            raise BadRequest(f"the request of {method} is not a valid protobuf message") from None

    return decode


async def _refuse(context: Any, method: str, exc: BadRequest) -> None:
    log.warning("rpc=%s code=INVALID_ARGUMENT error=%r", method.rsplit("/", 1)[-1], str(exc))
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))


def _unary_request(method: str, decode: Callable[[bytes], Any], behavior: Callable[..., Any], streaming: bool) -> Any:
    if streaming and inspect.isasyncgenfunction(behavior):

        async def unary_stream(raw: bytes, context: Any) -> AsyncIterator[Any]:
            try:
                request = decode(raw)
            except BadRequest as exc:
                await _refuse(context, method, exc)
                return
            async for item in behavior(request, context):
                yield item

        return unary_stream

    async def unary(raw: bytes, context: Any) -> Any:  # a response, or a streaming coroutine's None
        try:
            request = decode(raw)
        except BadRequest as exc:
            await _refuse(context, method, exc)
            return None
        result = behavior(request, context)
        return await result if isinstance(result, Awaitable) else result

    return unary


def _stream_request(method: str, decode: Callable[[bytes], Any], behavior: Callable[..., Any]) -> Any:
    def requests(raw_iterator: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
        async def decoded() -> AsyncIterator[Any]:
            async for raw in raw_iterator:
                try:
                    yield decode(raw)
                except BadRequest as exc:
                    await _refuse(context, method, exc)

        return decoded()

    if inspect.isasyncgenfunction(behavior):

        async def stream_out(raw_iterator: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
            async for item in behavior(requests(raw_iterator, context), context):
                yield item

        return stream_out

    async def unary_out(raw_iterator: AsyncIterator[bytes], context: Any) -> Any:
        return await behavior(requests(raw_iterator, context), context)

    return unary_out


def decoding(handler: Any, method: str) -> Any:
    """The same handler, taking raw bytes and decoding them itself."""
    if handler is None or handler.request_deserializer is None:
        return handler
    decode = _decoder(method, handler.request_deserializer)
    out = handler.response_serializer
    if handler.request_streaming:
        behavior = handler.stream_stream if handler.response_streaming else handler.stream_unary
        wrapped = _stream_request(method, decode, behavior)
        make = grpc.stream_stream_rpc_method_handler if handler.response_streaming else (
            grpc.stream_unary_rpc_method_handler
        )
    else:
        behavior = handler.unary_stream if handler.response_streaming else handler.unary_unary
        wrapped = _unary_request(method, decode, behavior, handler.response_streaming)
        make = grpc.unary_stream_rpc_method_handler if handler.response_streaming else (
            grpc.unary_unary_rpc_method_handler
        )
    return make(wrapped, request_deserializer=None, response_serializer=out)


class Wrapping(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """An interceptor that wraps each method's handler once (cached per method) in :meth:`wrap`."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[Any, Any]] = {}

    def wrap(self, handler: Any, method: str) -> Any:
        raise NotImplementedError

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        cached = self._cache.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self.wrap(handler, method)
        if handler is not None:
            self._cache[method] = (handler, wrapped)
        return wrapped


class DecodeRequests(Wrapping):
    """Every handler decodes its requests itself, so bad bytes never reach grpc's deserializer."""

    def wrap(self, handler: Any, method: str) -> Any:
        return decoding(handler, method)
