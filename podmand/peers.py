"""Peer credentials on the driver socket: only trusted uids reach the driver.

File modes alone protect a socket only as long as nobody loosens them, so, like
upstream, podmand checks the connecting process's uid (``SO_PEERCRED``). grpc
python cannot tell a handler who is on the other end of a Unix socket, so
podmand accepts on the public socket itself, reads the peer's credentials once
per connection, and splices the connection to one of two grpc servers on
private sockets: the driver for an allowed peer, a deny server answering every
call ``PERMISSION_DENIED`` for anyone else. The splice forwards whole reads
(up to 256 KiB) between two asyncio transports and parses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

log = logging.getLogger("podmand.peers")
MAX_UNIX_PATH = 107  # sun_path is 108 bytes, one of them the terminating NUL
_UCRED = struct.Struct("3i")
DENIED = (
    "permission denied: this driver socket serves only podmand's own uid, root, and the uids in "
    "PODMAND_ALLOWED_PEER_UIDS (--allowed-peer-uid)"
)


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int


def peer_of(sock: Any) -> Peer:
    """The credentials the kernel recorded when ``sock``'s peer connected."""
    pid, uid, gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return Peer(pid, uid, gid)


def is_allowed(uid: int, own_uid: int, allowed_uids: Collection[int]) -> bool:
    """podmand's own uid and root always; others only when the operator listed them."""
    return uid == own_uid or uid == 0 or uid in allowed_uids


def private_dir(public_socket: str) -> Path:
    """A fresh 0700 directory of this process for the internal sockets: next to the
    public one when the paths fit (``.<name>.XXXXXXXX``), else in the temporary
    directory. Never shared by name, so no other podmand (one draining, one starting)
    can replace or remove what this one listens on."""
    public = Path(public_socket)
    prefix = f".{public.name}."
    if len(os.fsencode(public.parent / f"{prefix}XXXXXXXX" / "grpc.sock")) <= MAX_UNIX_PATH:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=public.parent))
    return Path(tempfile.mkdtemp(prefix="podmand-"))


def remove_private_dir(path: Path) -> None:
    for name in ("grpc.sock", "deny.sock"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path / name)
    with contextlib.suppress(OSError):
        path.rmdir()


class _DenyAll(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every method of every service: PERMISSION_DENIED, without reading the request."""

    def service(self, handler_call_details: Any) -> Any:
        return grpc.stream_stream_rpc_method_handler(_deny)


async def _deny(request_iterator: Any, context: Any) -> None:
    await context.abort(grpc.StatusCode.PERMISSION_DENIED, DENIED)


def deny_server(path: str) -> Any:
    """The grpc server refused peers are spliced to."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_DenyAll(),))
    server.add_insecure_port(f"unix://{path}")
    return server


class _Half(asyncio.Protocol):
    """One side of a spliced connection: what it reads, the other side's transport writes."""

    def __init__(self, gate: PeerGate) -> None:
        self.gate = gate
        self.transport: asyncio.Transport | None = None
        self.other: _Half | None = None
        self.eof = False
        self.lost = False
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.gate.halves.add(self)

    def data_received(self, data: bytes) -> None:
        other = self.other
        if other is None or other.transport is None:  # not linked yet (pausing is only advisory)
            self.pending.append(data)
            return
        other.transport.write(data)

    # Flow control: when our write buffer is full, stop reading the side that fills it.
    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()

    def eof_received(self) -> bool:
        self.eof = True
        other = self.other
        if other is None:
            return True  # not linked yet: the link passes the EOF on
        if other is None or other.transport is None or other.eof or not other.transport.can_write_eof():
            if other is not None and other.transport is not None:
                other.transport.close()
            return False
        other.transport.write_eof()  # half-close through; stay open for the other direction
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.gate.halves.discard(self)
        if self.other is not None and self.other.transport is not None:
            self.other.transport.close()


class _Accepted(_Half):
    """A connection to the public socket: check its peer, then connect it through."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.pause_reading()  # until the far side is connected; the kernel buffers meanwhile
        target = self.gate.route(peer_of(transport.get_extra_info("socket")))
        task = asyncio.get_running_loop().create_task(self._connect(target))
        self.gate.tasks.add(task)
        task.add_done_callback(self.gate.tasks.discard)

    async def _connect(self, target: str) -> None:
        assert self.transport is not None
        try:
            _, far = await asyncio.get_running_loop().create_unix_connection(lambda: _Half(self.gate), target)
        except OSError as exc:
            log.warning("driver socket: cannot reach the internal server %s: %s", target, exc)
            self.transport.close()
            return
        far.other, self.other = self, far
        assert far.transport is not None
        if self.lost:
            far.transport.close()
            return
        # Either side may have spoken before the link (the server sends its
        # SETTINGS at once): pass on what each side buffered meanwhile.
        far.transport.write(b"".join(self.pending))
        self.pending.clear()
        self.transport.write(b"".join(far.pending))
        far.pending.clear()
        if far.lost:
            self.transport.close()
            return
        if far.eof:
            self.transport.write_eof()
        if self.eof:
            far.transport.write_eof()
        else:
            self.transport.resume_reading()


class PeerGate:
    """The public driver socket: accepts, checks each peer's uid, splices it through."""

    def __init__(self, path: str, allowed: str, denied: str, *, own_uid: int, allowed_uids: Collection[int]) -> None:
        self.path, self.allowed, self.denied = path, allowed, denied
        self.own_uid, self.allowed_uids = own_uid, frozenset(allowed_uids)
        self.halves: set[_Half] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.AbstractServer | None = None
        self._bound = False

    def route(self, peer: Peer) -> str:
        if is_allowed(peer.uid, self.own_uid, self.allowed_uids):
            return self.allowed
        log.warning(
            "driver socket: refused a connection from uid %d (pid %d): not podmand's uid %d, root, "
            "or in allowed_peer_uids (PODMAND_ALLOWED_PEER_UIDS)",
            peer.uid,
            peer.pid,
            self.own_uid,
        )
        return self.denied

    async def start(self) -> None:
        """Bind the public socket 0600 (the caller has made its parent safe) and accept."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            sock.bind(self.path)
        except OSError:
            sock.close()
            raise
        finally:
            os.umask(old_umask)
        self._bound = True
        os.chmod(self.path, 0o600)
        self._server = await asyncio.get_running_loop().create_unix_server(lambda: _Accepted(self), sock=sock,
                                                                          backlog=512)

    def stop_accepting(self) -> None:
        """No new connections; the socket file goes. Open connections keep flowing."""
        if self._server is not None:
            self._server.close()
        if self._bound:  # never someone else's socket
            self._bound = False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def close(self) -> None:
        """Cut every spliced connection (after the servers behind them have stopped)."""
        for task in list(self.tasks):
            task.cancel()
        for half in list(self.halves):
            if half.transport is not None:
                half.transport.abort()
