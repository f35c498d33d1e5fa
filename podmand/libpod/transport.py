"""Transports: how a request reaches libpod and its answer comes back.

This module owns the contract between the client and a transport: the request,
the answer (buffered, or streamed as it arrives), a body sent as it is produced,
and what every transport does. The client builds requests and reads answers; a
transport only moves them: :class:`~podmand.libpod.unixsocket.UnixTransport`
over Podman's Unix socket, :class:`~podmand.libpod.memory.MockTransport` in
memory for tests. A transport raises :class:`PodmanUnavailable` whenever the
exchange cannot complete, and ``TimeoutError`` only when an :class:`Upload`'s
inactivity deadline passes (the client says what did not answer).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

import msgspec


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
