"""HTTP/1.1 over Podman's Unix socket: the connections podmand holds, and which one each
request goes on. Its own module because it is the one place podmand holds sockets to
Podman; how each exchange is framed is http1.py's.

Buffered requests and streams share a keep-alive pool (a pooled connection broken
while idle is retried once on a fresh one, and the rest dropped as old); an upload has
a connection of its own (its body sent as it is produced, and Podman's answer read even
when it stopped reading the body); a stream's connection is pooled again only when its
body was read to the end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping

from .errors import PodmanUnavailable
from .http1 import Tracked, read_body, read_head, request_head, reusable
from .transport import Request, Response, Streamed, Transport, Upload

_READ_LIMIT = 4 * 1024 * 1024  # StreamReader buffer: a header block or a chunk-size line


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


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

    def _release(self, conn: _Conn, status: int, headers: Mapping[str, str], *, head: bool = False) -> None:
        """Pool ``conn`` after an answer read to its end, unless it cannot carry another."""
        if reusable(status, headers, head=head) and not self._closed and len(self._idle) < self._pool_size:
            self._idle.append(conn)
        else:
            conn.close()

    async def send(self, request: Request) -> Response:
        if isinstance(request.body, Upload):
            return await self._upload(request, request.body)
        conn, status, headers = await self._open(request)
        head = request.method == "HEAD"
        try:
            body = b"".join([chunk async for chunk in read_body(conn.reader, status, headers, head=head)])
        except BaseException:
            conn.close()
            raise
        self._release(conn, status, headers, head=head)
        return Response(status, headers, body)

    async def _open(self, request: Request) -> tuple[_Conn, int, dict[str, str]]:
        """Send ``request`` and read the answer's head, on a pooled connection when one is idle.
        A pooled connection may have been closed by the server while idle: retry once on a
        fresh connection when the reused one breaks before the head, and drop the other idle
        ones, as old (after a Podman restart every one of them is dead)."""
        raw = request_head(request) + (request.body if isinstance(request.body, bytes) else b"")
        for attempt in range(2):
            reused = attempt == 0 and bool(self._idle)
            conn = self._idle.pop() if reused else await self._connect()
            try:
                conn.writer.write(raw)
                await conn.writer.drain()
                status, headers = await read_head(conn.reader)
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
                conn.writer.write(request_head(request))
                async for chunk in upload.chunks:
                    conn.writer.write(chunk)
                    await asyncio.wait_for(conn.writer.drain(), upload.inactivity)
            except (OSError, TimeoutError):
                pass
            status, headers = await asyncio.wait_for(read_head(conn.reader), upload.inactivity)
            body = b"".join([c async for c in read_body(conn.reader, status, headers)])
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
        body = Tracked(read_body(conn.reader, status, headers))
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
