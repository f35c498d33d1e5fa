"""HTTP/1.1 framing of one exchange with libpod: the request's head, the answer's head and
body. Its own module because framing is only reading and writing on a stream: which
connection carries an exchange, and whether it is pooled again, is unixsocket.py's.

A request's head carries the length of the body that follows; an answer's body is
framed chunked, by Content-Length or by the close (an answer to HEAD has none, whatever
its head says), and the connection can carry another request only when the body did not
end with the close (and Podman did not say it closes). Whatever Podman sends that cannot
be read is :class:`PodmanUnavailable`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

from .errors import PodmanUnavailable
from .transport import Request, Upload


def request_head(request: Request) -> bytes:
    """The request line and headers, with the length of the body that follows."""
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


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
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


async def read_body(
    reader: asyncio.StreamReader, status: int, headers: Mapping[str, str], *, head: bool = False
) -> AsyncIterator[bytes]:
    """Body chunks (none when ``head``: the answer to a HEAD request); a connection that
    breaks while they are read (perhaps in another task than the one that opened the
    stream) is PodmanUnavailable here."""
    if head:  # its Content-Length is the GET's (Podman's 404 says 91), and no body follows
        return
    try:
        async for chunk in _framed(reader, status, headers):
            yield chunk
    except OSError as exc:
        raise PodmanUnavailable(f"connection to Podman failed: {exc}") from exc


async def _framed(reader: asyncio.StreamReader, status: int, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
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


def reusable(status: int, headers: Mapping[str, str], *, head: bool = False) -> bool:
    """Whether a connection can carry another request once this answer's body is read:
    not when Podman closes it, nor when only the close marked the body's end (an answer
    to HEAD, ``head``, has no body to end)."""
    if headers.get("connection", "").lower() == "close":
        return False
    framed = headers.get("transfer-encoding", "").lower() == "chunked" or "content-length" in headers
    return framed or head or status in (204, 304) or status < 200


class Tracked:
    """Body chunks that remember whether they were read to the end."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self.finished = False

    def __aiter__(self) -> Tracked:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await anext(self._chunks)
        except StopAsyncIteration:
            self.finished = True
            raise
