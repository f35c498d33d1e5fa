"""The in-memory transport: libpod's answers from a handler, with no socket, for tests. Its
own module because nothing of the socket transport applies (no connection, no framing)
while the client must not tell the difference.

The fake libpod answers through it: a buffered answer or a streamed one, and a broken
connection is an ``OSError``, turned into :class:`PodmanUnavailable` as on a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from .errors import PodmanUnavailable
from .transport import Request, Response, Streamed, Transport, Upload

Handler = Callable[[Request], "Response | Streamed | Awaitable[Response | Streamed]"]


class MockTransport(Transport):
    """Answers through ``handler`` in memory, with no socket: a :class:`Response`, or a
    :class:`Streamed` whose chunks come from an async iterator; the handler may be a
    coroutine function.  An ``OSError`` from the handler or its chunks is a broken
    connection (:class:`PodmanUnavailable`), as on a socket; an :class:`Upload` body
    reaches the handler read whole."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def close(self) -> None:
        """Nothing is held between requests."""

    async def _answer(self, request: Request) -> Response | Streamed:
        try:
            if isinstance(request.body, Upload):
                upload = request.body
                data = b"".join([chunk async for chunk in upload.chunks])
                request = Request(request.method, request.target, request.headers, data)
                return await asyncio.wait_for(self._call(request), upload.inactivity)
            return await self._call(request)
        except TimeoutError:
            raise  # an Upload's inactivity deadline: the client says what did not answer
        except OSError as exc:
            raise PodmanUnavailable(f"connection to Podman failed: {exc}") from exc

    async def _call(self, request: Request) -> Response | Streamed:
        answer = self.handler(request)
        if inspect.isawaitable(answer):
            answer = await answer
        return _lower(answer)

    async def send(self, request: Request) -> Response:
        answer = await self._answer(request)
        if isinstance(answer, Response):
            return answer
        try:
            return await answer.read()
        except OSError as exc:
            raise PodmanUnavailable(f"connection to Podman failed: {exc}") from exc
        finally:
            await _aclose(answer.chunks)

    @contextlib.asynccontextmanager
    async def stream(self, request: Request) -> AsyncIterator[Streamed]:
        answer = await self._answer(request)
        if isinstance(answer, Response):
            answer = Streamed(answer.status, answer.headers, _once(answer.body))
        chunks = _unbroken(answer.chunks)
        try:
            yield Streamed(answer.status, answer.headers, chunks)
        except OSError as exc:
            raise PodmanUnavailable(f"connection to Podman failed: {exc}") from exc
        finally:
            await chunks.aclose()
            await _aclose(answer.chunks)


def _lower(answer: Response | Streamed) -> Response | Streamed:
    """Header names in lower case, as :class:`UnixTransport` gives them."""
    headers = {key.lower(): value for key, value in answer.headers.items()}
    if isinstance(answer, Response):
        return Response(answer.status, headers, answer.body)
    return Streamed(answer.status, headers, answer.chunks)


async def _once(body: bytes) -> AsyncIterator[bytes]:
    if body:
        yield body


async def _unbroken(chunks: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    try:
        async for chunk in chunks:
            yield chunk
    except OSError as exc:
        raise PodmanUnavailable(f"connection to Podman failed: {exc}") from exc


async def _aclose(chunks: AsyncIterator[bytes]) -> None:
    close = getattr(chunks, "aclose", None)
    if close is not None:
        await close()
