"""Unit tests for podmand.peers: the uid decision, and the gate splicing real connections."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from podmand import peers
from podmand.peers import Peer, PeerGate


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
    with caplog.at_level(logging.INFO, "podmand.peers"):
        assert gate.route(Peer(pid=10, uid=1001, gid=1001)) == "/x/grpc"
        assert gate.route(Peer(pid=11, uid=0, gid=0)) == "/x/grpc"
        assert gate.route(Peer(pid=12, uid=1003, gid=1003)) == "/x/grpc"
        assert [r for r in caplog.records if r.name == "podmand.peers"] == []  # allowed peers are not logged
        assert gate.route(Peer(pid=4242, uid=65534, gid=65534)) == "/x/deny"
    [record] = [r for r in caplog.records if r.name == "podmand.peers"]
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
async def _gated(tmp: Path) -> AsyncIterator[tuple[str, PeerGate, health.aio.HealthServicer]]:
    internal = peers.private_dir(str(tmp / "d.sock"))
    allowed, denied = str(internal / "grpc.sock"), str(internal / "deny.sock")
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{allowed}")
    deny = peers.deny_server(denied)
    await server.start()
    await deny.start()
    gate = PeerGate(str(tmp / "d.sock"), allowed, denied, own_uid=os.geteuid(), allowed_uids=[])
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
        with caplog.at_level(logging.WARNING, "podmand.peers"):
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
