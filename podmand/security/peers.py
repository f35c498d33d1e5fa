"""Peer credentials on the driver socket: only trusted uids reach the driver.

File modes alone protect a socket only as long as nobody loosens them, so, like
upstream, podmand checks the connecting process's uid (``SO_PEERCRED``). grpc
python cannot tell a handler who is on the other end of a Unix socket, so
podmand accepts on the public socket itself, reads the peer's credentials once
per connection, and splices the connection to one of two grpc servers on
private sockets: the driver for an allowed peer, a deny server answering every
call ``PERMISSION_DENIED`` for anyone else. The splice forwards whole reads
(up to 256 KiB) between two asyncio transports and parses nothing.

The gate bounds what any process that can reach the socket may hold: connections
open at once (allowed and refused peers each their own cap), a connection that sends
nothing is closed after a while, and each kind of refusal is logged at most once
every few seconds, with a count of the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import tempfile
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

log = logging.getLogger("podmand.security.peers")
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


FULL_MAP = ["0", "0", "4294967295"]  # /proc/self/uid_map of the host's own user namespace


def unmapped_uid(proc: Path = Path("/proc")) -> int | None:
    """The uid this process's user namespace shows for a uid it does not map (the kernel's
    overflowuid, 65534), when podmand runs in one that maps only some uids: a rootless
    container such as the sidecar or the Quadlet form, where the host's root connecting to
    the socket shows as that uid. None in the host's own namespace, or when unreadable."""
    try:
        if (proc / "self" / "uid_map").read_text().split() == FULL_MAP:
            return None
        return int((proc / "sys" / "kernel" / "overflowuid").read_text())
    except (OSError, ValueError):
        return None


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


# A gRPC client writes its connection preface as soon as it connects: one that sends
# nothing for 30 s is no client (a stuck or hostile process holding a slot). 30 s leaves
# a loaded host room; once a connection has spoken there is no limit (a watch stream may
# be silent for hours).
IDLE_TIMEOUT = 30.0


class _Accepted(_Half):
    """A connection to the public socket: check its peer, then connect it through."""

    peer: Peer
    idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.pause_reading()  # until the far side is connected; the kernel buffers meanwhile
        self.peer = peer_of(transport.get_extra_info("socket"))
        target = self.gate.admit(self)
        if target is None:  # its kind of peer is at its cap
            self.transport.abort()
            return
        loop = asyncio.get_running_loop()
        self.idle = loop.call_later(self.gate.idle_timeout, self._idle)
        task = loop.create_task(self._connect(target))
        self.gate.tasks.add(task)
        task.add_done_callback(self.gate.tasks.discard)

    def data_received(self, data: bytes) -> None:
        if self.idle is not None:  # it spoke: no idle limit from now on
            self.idle.cancel()
            self.idle = None
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        self.gate.release(self)
        super().connection_lost(exc)

    def _idle(self) -> None:
        self.idle = None
        self.gate.idle_closes.warn(
            "driver socket: closed a connection from uid %d (pid %d) that sent nothing in %g s",
            self.peer.uid, self.peer.pid, self.gate.idle_timeout,
        )
        assert self.transport is not None
        self.transport.abort()

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


# Each kind of the gate's warnings (a refused uid, a connection over a cap, an idle one
# closed) is logged at most once per 10 s and the others counted: a flood costs a few lines
# a minute, not one per connection, and 10 s still dates an incident closely.
WARN_EVERY = 10.0


class _Throttled:
    """A warning a flood must not repeat line by line: the first of a burst is logged at
    once, the next ones only counted, and their number logged in one line when ``every``
    seconds have passed since the last line (or when the gate closes)."""

    def __init__(self, every: float, summary: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.every, self.summary, self.clock = every, summary, clock
        self.suppressed = 0
        self._quiet_until = -float("inf")
        self._flush: asyncio.TimerHandle | None = None

    def warn(self, message: str, *args: object) -> None:
        now = self.clock()
        if now >= self._quiet_until:
            self._quiet_until = now + self.every
            log.warning(message, *args)
            return
        self.suppressed += 1
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(self._quiet_until - now, self.flush)

    def flush(self) -> None:
        """Log how many went unlogged, if any; that line starts a quiet period of its own."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if self.suppressed:
            log.warning(self.summary, self.suppressed, self.every)
            self.suppressed = 0
            self._quiet_until = self.clock() + self.every


# Connections of allowed peers open at once; a new one past it is closed at once. A gateway
# holds a handful (one channel, one per ctl or health call); each costs three descriptors
# (both sides of the splice, and the grpc server's end), so 256 stay under the usual soft
# limit of 1024 even where raising it failed (limits.py).
MAX_CONNECTIONS = 256
# Refused peers' connections count apart, so a flood from a uid that is not allowed never
# takes the allowed peers' room; reading PERMISSION_DENIED needs one connection for a moment.
MAX_REFUSED_CONNECTIONS = 16


class PeerGate:
    """The public driver socket: accepts, checks each peer's uid, splices it through."""

    def __init__(self, path: str, allowed: str, denied: str, *, own_uid: int, allowed_uids: Collection[int],
                 max_connections: int = MAX_CONNECTIONS, max_refused: int = MAX_REFUSED_CONNECTIONS,
                 idle_timeout: float = IDLE_TIMEOUT, warn_every: float = WARN_EVERY,
                 unmapped: int | None = None) -> None:
        self.path, self.allowed, self.denied = path, allowed, denied
        self.unmapped = unmapped  # unmapped_uid(): a peer of this uid is outside podmand's user namespace
        self.own_uid, self.allowed_uids = own_uid, frozenset(allowed_uids)
        self.max_connections, self.max_refused, self.idle_timeout = max_connections, max_refused, idle_timeout
        self.halves: set[_Half] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.open_allowed: set[_Accepted] = set()
        self.open_refused: set[_Accepted] = set()
        not_one_by_one = "(not logged one by one: at most one line per %g s)"
        self.refusals = _Throttled(
            warn_every, f"driver socket: refused %d more connection(s) of uids not allowed {not_one_by_one}")
        self.over_cap = _Throttled(
            warn_every, f"driver socket: closed %d more new connection(s) over the cap at once {not_one_by_one}")
        self.idle_closes = _Throttled(
            warn_every, f"driver socket: closed %d more connection(s) that sent nothing {not_one_by_one}")
        self._server: asyncio.AbstractServer | None = None
        self._bound = False

    def admit(self, conn: _Accepted) -> str | None:
        """The internal socket ``conn`` is spliced to, or None: its kind of peer is at its cap."""
        peer = conn.peer
        if is_allowed(peer.uid, self.own_uid, self.allowed_uids):
            held, cap, kind = self.open_allowed, self.max_connections, "connections"
        else:
            held, cap, kind = self.open_refused, self.max_refused, "connections of refused peers"
        if len(held) >= cap:
            self.over_cap.warn("driver socket: closed a new connection from uid %d (pid %d) at once: %d %s are "
                               "open, the most podmand keeps", peer.uid, peer.pid, len(held), kind)
            return None
        held.add(conn)
        return self.route(peer)

    def release(self, conn: _Accepted) -> None:
        self.open_allowed.discard(conn)
        self.open_refused.discard(conn)

    def route(self, peer: Peer) -> str:
        if is_allowed(peer.uid, self.own_uid, self.allowed_uids):
            return self.allowed
        outside = ("; that uid is how podmand's user namespace shows a process outside it (the host's root "
                   "too): connect as the user whose Podman runs podmand") if peer.uid == self.unmapped else ""
        self.refusals.warn(
            "driver socket: refused a connection from uid %d (pid %d): not podmand's uid %d, root, "
            "or in allowed_peer_uids (PODMAND_ALLOWED_PEER_UIDS)%s",
            peer.uid,
            peer.pid,
            self.own_uid,
            outside,
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
        """Cut every spliced connection (after the servers behind them have stopped); log
        the refusals not logged yet."""
        for throttled in (self.refusals, self.over_cap, self.idle_closes):
            throttled.flush()
        for task in list(self.tasks):
            task.cancel()
        for half in list(self.halves):
            if half.transport is not None:
                half.transport.abort()
