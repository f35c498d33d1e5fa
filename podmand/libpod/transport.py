"""Transports: how a request reaches libpod and its answer comes back.

The client builds requests and reads answers; a transport only moves them.
:class:`UnixTransport` speaks HTTP/1.1 over Podman's Unix socket (a keep-alive
pool for buffered requests and streams, a dedicated connection per upload);
:class:`MockTransport` answers in memory through a handler, for tests.  A
transport raises :class:`PodmanUnavailable` whenever the exchange cannot
complete, and ``TimeoutError`` only when an :class:`Upload`'s inactivity
deadline passes (the client says what did not answer).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

import msgspec

from .errors import PodmanUnavailable

_READ_LIMIT = 4 * 1024 * 1024  # StreamReader buffer: a header block or a chunk-size line


@dataclass(frozen=True)
class Upload:
    """A request body sent as it is produced (a rootfs tar read from disk), never
    held in memory whole. ``inactivity``: seconds Podman may stop reading it (or,
    once it is sent, answering) before the request is abandoned; None: no limit."""

    chunks: AsyncIterable[bytes]
    size: int
    inactivity: float | None


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # path and query, as sent on the request line
    # Never in a repr: headers carry X-Registry-Auth, bodies sandbox environments.
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    body: bytes | Upload | None = field(default=None, repr=False)


@dataclass
class Response:
    """A buffered answer; header names are lower case."""

    status: int
    headers: dict[str, str]
    body: bytes

    def error_message(self) -> str:
        """What Podman says went wrong: its JSON ``message`` (or ``cause``), else the text."""
        try:
            data = msgspec.json.decode(self.body)
        except msgspec.DecodeError:
            return self.body.decode("utf-8", "replace").strip()
        if isinstance(data, dict):
            return str(data.get("message") or data.get("cause") or data)
        return str(data)


@dataclass
class Streamed:
    """An answer whose body is read as it arrives (events, pulls, logs, waits)."""

    status: int
    headers: dict[str, str]
    chunks: AsyncIterator[bytes]

    async def read(self) -> Response:
        return Response(self.status, self.headers, b"".join([chunk async for chunk in self.chunks]))


class Transport(abc.ABC):
    """Moves one request to libpod and its answer back."""

    @abc.abstractmethod
    async def send(self, request: Request) -> Response:
        """The whole answer (no deadline of its own: the client sets it)."""

    @abc.abstractmethod
    def stream(self, request: Request) -> AbstractAsyncContextManager[Streamed]:
        """The answer's head at once and its body as it arrives, until the context exits."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release what the transport holds (idle connections)."""


# ---------------------------------------------------------------- HTTP/1.1 over a Unix socket


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


def _head(request: Request) -> bytes:
    lines = [f"{request.method} {request.target} HTTP/1.1", "Host: d", "User-Agent: podmand"]
    lines += [f"{key}: {value}" for key, value in request.headers.items()]
    body = request.body
    if isinstance(body, Upload):
        lines.append(f"Content-Length: {body.size}")
    elif body is not None:
        lines.append(f"Content-Length: {len(body)}")
    elif request.method in ("POST", "PUT"):
        lines.append("Content-Length: 0")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise PodmanUnavailable("connection closed by Podman") from exc
    except asyncio.LimitOverrunError as exc:
        raise PodmanUnavailable("response header too large") from exc
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise PodmanUnavailable(f"malformed status line from Podman: {lines[0]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _iter_body(reader: asyncio.StreamReader, status: int, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
    """Body chunks; a connection that breaks while they are read (perhaps in another
    task than the one that opened the stream) is PodmanUnavailable here."""
    try:
        async for chunk in _body(reader, status, headers):
            yield chunk
    except OSError as exc:
        raise PodmanUnavailable(f"connection to Podman failed: {exc}") from exc


async def _body(reader: asyncio.StreamReader, status: int, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
    """Body chunks: chunked, Content-Length or read-to-close."""
    if status in (204, 304) or status < 200:
        return
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            try:
                size_line = await reader.readline()
                size = int(size_line.split(b";", 1)[0].strip() or b"-1", 16)
                if size < 0:
                    raise PodmanUnavailable("connection closed inside a chunked body")
                if size == 0:
                    await reader.readline()  # trailing CRLF (Podman sends no trailers)
                    return
                data = await reader.readexactly(size)
                await reader.readexactly(2)
            except asyncio.IncompleteReadError as exc:
                raise PodmanUnavailable("connection closed inside a chunk") from exc
            except ValueError as exc:  # LimitOverrunError included: a size line with no end
                raise PodmanUnavailable(f"malformed chunk size from Podman: {exc}") from exc
            yield data
    elif "content-length" in headers:
        try:
            remaining = int(headers["content-length"])
        except ValueError as exc:
            raise PodmanUnavailable(f"malformed Content-Length from Podman: {exc}") from exc
        while remaining > 0:
            data = await reader.read(min(remaining, 65536))
            if not data:
                raise PodmanUnavailable("connection closed inside a response body")
            remaining -= len(data)
            yield data
    else:
        while data := await reader.read(65536):
            yield data


def _reusable(status: int, headers: Mapping[str, str]) -> bool:
    """Whether a connection can carry another request once this answer's body is read:
    not when Podman closes it, nor when only the close marked the body's end."""
    if headers.get("connection", "").lower() == "close":
        return False
    framed = headers.get("transfer-encoding", "").lower() == "chunked" or "content-length" in headers
    return framed or status in (204, 304) or status < 200


class _Tracked:
    """Body chunks that remember whether they were read to the end."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self.finished = False

    def __aiter__(self) -> _Tracked:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await anext(self._chunks)
        except StopAsyncIteration:
            self.finished = True
            raise


class UnixTransport(Transport):
    """HTTP/1.1 over a Unix socket: one keep-alive pool; an upload has a connection of its own."""

    def __init__(self, socket_path: str, *, connect_timeout: float, pool_size: int = 8) -> None:
        self.socket_path = socket_path
        self.connect_timeout = connect_timeout
        self._idle: list[_Conn] = []
        self._pool_size = pool_size
        self._closed = False

    async def _connect(self) -> _Conn:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(self.socket_path, limit=_READ_LIMIT), self.connect_timeout
            )
        except (TimeoutError, OSError) as exc:
            raise PodmanUnavailable(f"cannot connect to Podman at {self.socket_path}: {exc}") from exc
        return _Conn(reader, writer)

    def _release(self, conn: _Conn, status: int, headers: Mapping[str, str]) -> None:
        """Pool ``conn`` after an answer read to its end, unless it cannot carry another."""
        if _reusable(status, headers) and not self._closed and len(self._idle) < self._pool_size:
            self._idle.append(conn)
        else:
            conn.close()

    async def send(self, request: Request) -> Response:
        if isinstance(request.body, Upload):
            return await self._upload(request, request.body)
        conn, status, headers = await self._open(request)
        try:
            body = b"".join([chunk async for chunk in _iter_body(conn.reader, status, headers)])
        except BaseException:
            conn.close()
            raise
        self._release(conn, status, headers)
        return Response(status, headers, body)

    async def _open(self, request: Request) -> tuple[_Conn, int, dict[str, str]]:
        """Send ``request`` and read the answer's head, on a pooled connection when one is idle.
        A pooled connection may have been closed by the server while idle: retry once on a
        fresh connection when the reused one breaks before the head, and drop the other idle
        ones, as old (after a Podman restart every one of them is dead)."""
        raw = _head(request) + (request.body if isinstance(request.body, bytes) else b"")
        for attempt in range(2):
            reused = attempt == 0 and bool(self._idle)
            conn = self._idle.pop() if reused else await self._connect()
            try:
                conn.writer.write(raw)
                await conn.writer.drain()
                status, headers = await _read_head(conn.reader)
            except (OSError, PodmanUnavailable, asyncio.IncompleteReadError) as exc:
                conn.close()
                if reused:
                    self._drop_idle()
                    continue
                raise PodmanUnavailable(f"connection to Podman failed: {exc}") from exc
            except BaseException:
                conn.close()
                raise
            return conn, status, headers
        raise AssertionError("unreachable")

    def _drop_idle(self) -> None:
        while self._idle:
            self._idle.pop().close()

    async def _upload(self, request: Request, upload: Upload) -> Response:
        """Send the body as it is produced on a connection of its own; when Podman
        stops reading (it refused the body), its answer says why."""
        conn = await self._connect()
        try:
            try:
                conn.writer.write(_head(request))
                async for chunk in upload.chunks:
                    conn.writer.write(chunk)
                    await asyncio.wait_for(conn.writer.drain(), upload.inactivity)
            except (OSError, TimeoutError):
                pass
            status, headers = await asyncio.wait_for(_read_head(conn.reader), upload.inactivity)
            body = b"".join([c async for c in _iter_body(conn.reader, status, headers)])
        except TimeoutError:
            raise  # Podman went quiet: the client says what did not answer
        except OSError as exc:
            raise PodmanUnavailable(f"connection to Podman failed: {exc}") from exc
        finally:
            conn.close()
        return Response(status, headers, body)

    @contextlib.asynccontextmanager
    async def stream(self, request: Request) -> AsyncIterator[Streamed]:
        """On a pooled connection, which goes back to the pool only when the body was
        read to its end before the context exits (a finished pull); any other ending
        (abandoned, broken, read-to-close) closes it, which also tells Podman to stop."""
        conn, status, headers = await self._open(request)
        body = _Tracked(_iter_body(conn.reader, status, headers))
        try:
            yield Streamed(status, headers, body)
        except OSError as exc:
            raise PodmanUnavailable(f"connection to Podman failed: {exc}") from exc
        finally:
            if body.finished:
                self._release(conn, status, headers)
            else:
                conn.close()

    async def close(self) -> None:
        self._closed = True
        self._drop_idle()


# ---------------------------------------------------------------- in memory

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
