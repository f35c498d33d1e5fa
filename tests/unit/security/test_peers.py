"""Unit tests for podmand.security.peers: the uid decision, and the gate splicing real connections."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from podmand.security import peers
from podmand.security.peers import Peer, PeerGate
from tests.wait import wait_until

DEADLINE = 30.0


@pytest.mark.parametrize(
    ("uid", "allowed_uids", "expected"),
    [
        (1001, [], True),  # podmand's own uid
        (0, [], True),  # root
        (1002, [], False),
        (65534, [], False),
        (1002, [1002, 1003], True),
        (1004, [1002, 1003], False),
    ],
)
def test_is_allowed(uid: int, allowed_uids: list[int], expected: bool) -> None:
    """Own uid and root always; anyone else only when listed."""
    assert peers.is_allowed(uid, 1001, allowed_uids) is expected


def test_route_logs_refused_uid_and_pid(caplog: pytest.LogCaptureFixture) -> None:
    gate = PeerGate("/x/public", "/x/grpc", "/x/deny", own_uid=1001, allowed_uids=[1003])
    with caplog.at_level(logging.INFO, "podmand.security.peers"):
        assert gate.route(Peer(pid=10, uid=1001, gid=1001)) == "/x/grpc"
        assert gate.route(Peer(pid=11, uid=0, gid=0)) == "/x/grpc"
        assert gate.route(Peer(pid=12, uid=1003, gid=1003)) == "/x/grpc"
        assert [r for r in caplog.records if r.name == "podmand.security.peers"] == []  # allowed peers are not logged
        assert gate.route(Peer(pid=4242, uid=65534, gid=65534)) == "/x/deny"
    [record] = [r for r in caplog.records if r.name == "podmand.security.peers"]
    assert record.levelno == logging.WARNING
    assert "uid 65534 (pid 4242)" in record.getMessage()


def test_peer_of_reads_the_connecting_process() -> None:
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert peers.peer_of(a) == Peer(os.getpid(), os.geteuid(), os.getegid())


def test_private_dir_is_this_process_own(tmp_path: Path) -> None:
    """Beside the socket, 0700, and never shared by name: a second podmand (one
    draining while another starts) gets its own, so neither removes the other's."""
    public = str(tmp_path / "d.sock")
    first, second = peers.private_dir(public), peers.private_dir(public)
    assert first != second and first.parent == second.parent == tmp_path
    assert first.name.startswith(".d.sock.") and stat.S_IMODE(os.stat(first).st_mode) == 0o700
    (second / "grpc.sock").write_text("")
    peers.remove_private_dir(first)
    assert not first.exists() and (second / "grpc.sock").exists()


def test_private_dir_falls_back_when_the_path_would_be_too_long(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * (100 - len(str(tmp_path))))
    deep.mkdir()
    public = str(deep / "s")
    assert len(os.fsencode(public)) <= peers.MAX_UNIX_PATH
    where = peers.private_dir(public)
    try:
        assert where.parent != deep
        assert len(os.fsencode(where / "grpc.sock")) <= peers.MAX_UNIX_PATH
        assert stat.S_IMODE(os.stat(where).st_mode) == 0o700
    finally:
        peers.remove_private_dir(where)


@contextlib.asynccontextmanager
async def _gated(tmp: Path, **limits: Any) -> AsyncIterator[tuple[str, PeerGate, health.aio.HealthServicer]]:
    internal = peers.private_dir(str(tmp / "d.sock"))
    allowed, denied = str(internal / "grpc.sock"), str(internal / "deny.sock")
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{allowed}")
    deny = peers.deny_server(denied)
    await server.start()
    await deny.start()
    gate = PeerGate(str(tmp / "d.sock"), allowed, denied, own_uid=os.geteuid(), allowed_uids=[], **limits)
    await gate.start()
    try:
        yield str(tmp / "d.sock"), gate, servicer
    finally:
        gate.stop_accepting()
        await server.stop(None)
        await deny.stop(None)
        gate.close()
        peers.remove_private_dir(internal)


def test_allowed_peer_is_spliced_through(tmp_path: Path) -> None:
    """Calls (including large ones, past flow control) reach the real server; the socket is 0600."""
    asyncio.run(_allowed(tmp_path))


async def _allowed(tmp_path: Path) -> None:
    async with _gated(tmp_path) as (path, _gate, servicer):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        name = "s" * (3 * 1024 * 1024)  # a 3 MiB request and response through the splice
        await servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        async with grpc.aio.insecure_channel(f"unix://{path}", options=[
            ("grpc.max_send_message_length", 8 << 20), ("grpc.max_receive_message_length", 8 << 20)
        ]) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for _ in range(3):
                got = await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
                assert got.status == health_pb2.HealthCheckResponse.SERVING
            err = None
            try:
                await stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
            except grpc.aio.AioRpcError as exc:
                err = exc
            assert err is not None and err.code() == grpc.StatusCode.NOT_FOUND


def test_refused_peer_gets_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """Every method, unary or streaming, of any service: PERMISSION_DENIED; one log line per connection."""
    monkeypatch.setattr(peers, "is_allowed", lambda uid, own, extra: False)
    asyncio.run(_refused(tmp_path, caplog))


async def _refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with _gated(tmp_path) as (path, _gate, _servicer):
        with caplog.at_level(logging.WARNING, "podmand.security.peers"):
            async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                codes = []
                for call in (stub.Check(health_pb2.HealthCheckRequest(), timeout=10),
                             stub.Check(health_pb2.HealthCheckRequest(), timeout=10)):
                    try:
                        await call
                    except grpc.aio.AioRpcError as exc:
                        codes.append((exc.code(), exc.details()))
                watch = stub.Watch(health_pb2.HealthCheckRequest(), timeout=10)
                try:
                    await watch.read()
                except grpc.aio.AioRpcError as exc:
                    codes.append((exc.code(), exc.details()))
        assert [c for c, _ in codes] == [grpc.StatusCode.PERMISSION_DENIED] * 3
        assert "PODMAND_ALLOWED_PEER_UIDS" in (codes[0][1] or "")
        refusals = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
        assert refusals == [f"driver socket: refused a connection from uid {os.geteuid()} (pid {os.getpid()}): "
                            f"not podmand's uid {os.geteuid()}, root, or in allowed_peer_uids "
                            "(PODMAND_ALLOWED_PEER_UIDS)"]


def test_stop_accepting_removes_only_its_own_socket(tmp_path: Path) -> None:
    gate = PeerGate(str(tmp_path / "other.sock"), "a", "b", own_uid=0, allowed_uids=[])
    (tmp_path / "other.sock").write_text("not ours")
    gate.stop_accepting()  # never bound: must not unlink
    assert (tmp_path / "other.sock").exists()

    async def bound() -> None:
        async with _gated(tmp_path) as (path, gate, _):
            assert os.path.exists(path)
            gate.stop_accepting()
            assert not os.path.exists(path)

    asyncio.run(bound())


# ---------------------------------------------------------------- what one peer may hold


async def until(predicate: Callable[[], Any], what: str) -> None:
    """tests/wait.py's deadline-bound poll, off the loop (the gate runs on it)."""
    await asyncio.to_thread(wait_until, predicate, DEADLINE, what)


async def closed_at_once(path: str) -> bool:
    """Connect and read: True when the gate ends the connection without a byte spliced
    through (a spliced one hears the server's SETTINGS first)."""
    reader, writer = await asyncio.open_unix_connection(path)
    try:
        return await asyncio.wait_for(reader.read(), DEADLINE) == b""
    finally:
        writer.close()


async def healthy(path: str) -> bool:
    async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
        got = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        return bool(got.status == health_pb2.HealthCheckResponse.SERVING)


def lines(caplog: pytest.LogCaptureFixture, needle: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "podmand.security.peers" and needle in r.getMessage()]


def test_connections_over_the_cap_are_closed_at_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """With the cap held, a new connection is closed at once, one warning line for all of
    them (the rest counted in one more, here when the gate closes); once the held ones go,
    a real client is served again."""
    with caplog.at_level(logging.WARNING, "podmand.security.peers"):
        asyncio.run(_over_the_cap(tmp_path))
    pid, uid = os.getpid(), os.geteuid()
    assert lines(caplog, "driver socket: closed") == [
        f"driver socket: closed a new connection from uid {uid} (pid {pid}) at once: 3 connections are open, "
        "the most podmand keeps",
        "driver socket: closed 3 more new connection(s) over the cap at once (not logged one by one: at most one "
        "line per 3600 s)",
    ]


async def _over_the_cap(tmp_path: Path) -> None:
    async with _gated(tmp_path, max_connections=3, idle_timeout=3600, warn_every=3600) as (path, gate, _):
        held = [await asyncio.open_unix_connection(path) for _ in range(3)]
        await until(lambda: len(gate.open_allowed) == 3, "three connections held")
        assert [await closed_at_once(path) for _ in range(4)] == [True] * 4
        assert len(gate.open_allowed) == 3 and not any(reader.at_eof() for reader, _ in held)
        for _, writer in held:
            writer.close()
        await until(lambda: not gate.open_allowed, "the held connections gone")
        assert await healthy(path)


def test_refused_peers_never_take_the_allowed_peers_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Refused peers' connections have a cap of their own: holding it neither lets one more
    refused peer in nor keeps an allowed one out."""
    refuse = [True]
    monkeypatch.setattr(peers, "is_allowed", lambda uid, own, extra: not refuse[0])
    with caplog.at_level(logging.WARNING, "podmand.security.peers"):
        asyncio.run(_refused_cap(tmp_path, refuse))
    assert len(lines(caplog, "connections of refused peers are open")) == 1


async def _refused_cap(tmp_path: Path, refuse: list[bool]) -> None:
    async with _gated(tmp_path, max_connections=2, max_refused=2, idle_timeout=3600, warn_every=3600) as (
        path, gate, _
    ):
        held = [await asyncio.open_unix_connection(path) for _ in range(2)]
        await until(lambda: len(gate.open_refused) == 2, "two refused connections held")
        assert await closed_at_once(path)
        refuse[0] = False
        assert await healthy(path)
        assert len(gate.open_refused) == 2
        for _, writer in held:
            writer.close()


def test_a_silent_connection_is_closed_after_the_idle_timeout(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """A connection that sends nothing is closed after idle_timeout; one that has spoken
    stays open however long it is quiet (it was opened first: its limit would have come first)."""
    with caplog.at_level(logging.WARNING, "podmand.security.peers"):
        asyncio.run(_idle(tmp_path))
    assert lines(caplog, "sent nothing") == [
        f"driver socket: closed a connection from uid {os.geteuid()} (pid {os.getpid()}) that sent nothing in 0.2 s"
    ]


async def _idle(tmp_path: Path) -> None:
    async with (_gated(tmp_path, idle_timeout=0.2) as (path, gate, _),
                grpc.aio.insecure_channel(f"unix://{path}") as channel):
        stub = health_pb2_grpc.HealthStub(channel)
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
        [spoken] = gate.open_allowed
        reader, writer = await asyncio.open_unix_connection(path)
        await asyncio.wait_for(reader.read(), DEADLINE)  # the server's SETTINGS, then the end
        assert reader.at_eof()
        writer.close()
        assert gate.open_allowed == {spoken} and not spoken.lost
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert gate.open_allowed == {spoken}


def test_refusals_are_logged_once_per_quiet_period_with_a_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """A flood of refused connections: the first is logged with its uid and pid, the others
    counted; their number is logged in one line (here when the gate closes)."""
    monkeypatch.setattr(peers, "is_allowed", lambda uid, own, extra: False)
    with caplog.at_level(logging.WARNING, "podmand.security.peers"):
        asyncio.run(_flood(tmp_path))
    assert lines(caplog, "refused") == [
        f"driver socket: refused a connection from uid {os.geteuid()} (pid {os.getpid()}): not podmand's uid "
        f"{os.geteuid()}, root, or in allowed_peer_uids (PODMAND_ALLOWED_PEER_UIDS)",
        "driver socket: refused 4 more connection(s) of uids not allowed (not logged one by one: at most one line "
        "per 3600 s)",
    ]


async def _flood(tmp_path: Path) -> None:
    async with _gated(tmp_path, warn_every=3600) as (path, gate, _):
        held = [await asyncio.open_unix_connection(path) for _ in range(5)]
        await until(lambda: len(gate.open_refused) == 5, "five refused connections")
        for _, writer in held:
            writer.close()


def test_the_count_is_logged_when_the_quiet_period_ends(caplog: pytest.LogCaptureFixture) -> None:
    """Without waiting for a next refusal or for the gate to close: at the end of the quiet
    period; after it, the next warning is logged whole again."""
    now = [100.0]
    throttled = peers._Throttled(0.05, "%d more in %g s", clock=lambda: now[0])

    async def main() -> None:
        for n in range(3):
            throttled.warn("refused %d", n)
        await until(lambda: "2 more in 0.05 s" in caplog.text, "the count")
        now[0] += 1  # the quiet period the count started is over
        throttled.warn("refused %d", 3)

    with caplog.at_level(logging.WARNING, "podmand.security.peers"):
        asyncio.run(main())
    assert [r.getMessage() for r in caplog.records] == ["refused 0", "2 more in 0.05 s", "refused 3"]


def test_a_refused_uid_outside_podmands_user_namespace_is_named_so(caplog: pytest.LogCaptureFixture) -> None:
    """In a rootless container (the sidecar, the Quadlet form) the host's root connects as the
    overflow uid: the refusal says so and what to do; another refused uid gets no such hint."""
    gate = PeerGate("/x/public", "/x/grpc", "/x/deny", own_uid=0, allowed_uids=[], unmapped=65534, warn_every=0)
    with caplog.at_level(logging.WARNING, "podmand.security.peers"):
        assert gate.route(Peer(pid=7, uid=65534, gid=65534)) == "/x/deny"
        assert gate.route(Peer(pid=8, uid=1002, gid=1002)) == "/x/deny"
    outside, other = [r.getMessage() for r in caplog.records if r.name == "podmand.security.peers"]
    assert "outside it (the host's root too): connect as the user whose Podman runs podmand" in outside
    assert "outside" not in other


@pytest.mark.parametrize(
    ("uid_map", "expected"),
    [
        ("         0          0 4294967295\n", None),  # the host's own namespace
        ("         0       1000          1\n         1     100000      65536\n", 65534),  # rootless container
        (None, None),  # unreadable
    ],
)
def test_unmapped_uid(tmp_path: Path, uid_map: str | None, expected: int | None) -> None:
    (tmp_path / "self").mkdir()
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "overflowuid").write_text("65534\n")
    if uid_map is not None:
        (tmp_path / "self" / "uid_map").write_text(uid_map)
    assert peers.unmapped_uid(tmp_path) == expected
