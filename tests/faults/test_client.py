"""PodmanClient over UnixTransport against a misbehaving libpod: the HTTP layer's fault paths.

Each test runs one coroutine on a fresh loop with the fake on the same loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from podmand.libpod import PodmanClient, PodmanError, PodmanUnavailable, Timeouts, UnixTransport
from podmand.libpod.http1 import reusable
from tests.fakes.libpod import FakeLibpod, Feed, Hang, Stream

DEADLINE = 10.0


@pytest.fixture
def sock(tmp: Path) -> str:
    return str(tmp / "p.sock")  # tmp (tests/conftest.py) is short: AF_UNIX paths are too


def run(coro: Awaitable[Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, DEADLINE)

    return asyncio.run(bounded())


@contextlib.asynccontextmanager
async def serving(path: str, setup: Callable[[FakeLibpod], None] | None = None,
                  timeout: float = 30.0) -> AsyncIterator[tuple[FakeLibpod, PodmanClient]]:
    fake = FakeLibpod()
    if setup is not None:
        setup(fake)
    await fake.start(path)
    client = PodmanClient(path, timeouts=Timeouts(request=timeout))
    try:
        yield fake, client
    finally:
        await client.close()
        await fake.close()


def idle(client: PodmanClient) -> list[Any]:
    """The socket transport's pool of idle keep-alive connections."""
    assert isinstance(client.transport, UnixTransport)
    return client.transport._idle


async def until(predicate: Callable[[], Any], what: str, timeout: float = 5.0) -> None:
    """Wait on a condition with a deadline, yielding to the loop between checks."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def test_keep_alive_reuses_one_connection(sock: str) -> None:
    """Two sequential calls share one pooled connection (no connect per call)."""
    async def main() -> None:
        async with serving(sock) as (fake, client):
            await client.info()
            await client.list_containers(["a=b"])
            assert fake.connections == 1
            assert fake.requests[-2].startswith("GET /v4.0.0/libpod/info")
            assert fake.requests[-1].startswith("GET /v4.0.0/libpod/containers/json?")

    run(main())


def test_idle_connection_closed_by_server_is_retried(sock: str) -> None:
    """Podman may drop an idle keep-alive connection: the next call retries on a new one."""
    async def main() -> None:
        async with serving(sock) as (fake, client):
            await client.info()
            for writer in list(fake._writers):
                writer.close()  # server-side idle close, no Connection: close header
            await until(lambda: fake.disconnects == 1, "the server to drop the idle connection")
            info = await client.info()
            assert info.version.version == "4.3.1"
            assert fake.connections == 2

    run(main())


def test_a_pool_of_dead_connections_costs_one_retry(sock: str) -> None:
    """After a Podman restart every pooled connection is dead: the next call retries on
    a fresh connection (not on another dead one) and the rest of the pool is dropped."""
    async def main() -> None:
        async with serving(sock) as (fake, client):
            await asyncio.gather(*(client.info() for _ in range(3)))  # three pooled connections
            assert len(idle(client)) == 3
            for writer in list(fake._writers):
                writer.close()
            await until(lambda: fake.disconnects == 3, "the server to drop every idle connection")
            info = await client.info()
            assert info.version.version == "4.3.1"
            assert fake.connections == 4 and len(idle(client)) == 1

    run(main())


def test_chunked_body_is_reassembled(sock: str) -> None:
    """A chunked response body (split into 7-byte chunks) decodes as one JSON document."""
    containers = [{"Id": f"c{i}", "Names": [f"n{i}"], "State": "running", "Labels": {"k": "v" * 50}}
                  for i in range(20)]

    def setup(fake: FakeLibpod) -> None:
        fake.route("GET", "/containers/json", (200, {"Transfer-Encoding": "chunked"}, containers))

    async def main() -> None:
        async with serving(sock, setup) as (fake, client):
            entries = await client.list_containers([])
            assert [e.id for e in entries] == [f"c{i}" for i in range(20)]
            assert entries[19].labels == {"k": "v" * 50}
            # The connection is reusable after the terminating chunk.
            await client.info()
            assert fake.connections == 1

    run(main())


def test_204_without_body_does_not_hang(sock: str) -> None:
    """204 has no body and no Content-Length: the client must not wait for one."""
    def setup(fake: FakeLibpod) -> None:
        fake.route("POST", "/containers/[^/]+/start", (204, {}, b""))

    async def main() -> None:
        async with serving(sock, setup, timeout=2.0) as (fake, client):
            await client.start_container("x")  # start_container has its own 120 s timeout
            resp = await client.request("POST", "/containers/x/start", timeout=2.0)
            assert resp.status == 204 and resp.body == b""
            await client.info()  # and the connection is still in sync
            assert fake.connections == 1

    run(main())



def test_an_answer_to_head_has_no_body_whatever_its_head_says(sock: str) -> None:
    """Go's server answers HEAD with the GET's head and no body: Podman 4.3.1's 404 to a stat
    says Content-Length 91 (the error it did not send), its 200 says no length at all (a GET's
    would end at the close). Neither waits for a body, and the connection carries the next
    request (podmand's stats of the workspace's path: sandbox/imagefiles.py)."""
    def setup(fake: FakeLibpod) -> None:
        fake.route("HEAD", "/containers/[^/]+/archive", (404, {}, {"message": "no such file or directory"}))

    async def main() -> None:
        async with serving(sock, setup, timeout=2.0) as (fake, client):
            for _ in range(2):
                resp = await client.request("HEAD", "/containers/x/archive", query={"path": "/a"})
                assert resp.status == 404 and int(resp.headers["content-length"]) > 0 and resp.body == b""
            await client.info()  # and the connection is still in sync
            assert fake.connections == 1

    run(main())


def test_head_answers_are_pooled_even_unframed() -> None:
    assert reusable(200, {}, head=True) and not reusable(200, {})  # a GET's would end at the close
    assert not reusable(200, {"connection": "close"}, head=True)

def test_non_2xx_becomes_podman_error_with_message(sock: str) -> None:
    """Podman's JSON ``message`` is what reaches logs and gRPC statuses."""
    def setup(fake: FakeLibpod) -> None:
        fake.route("POST", "/containers/create",
                   (500, {}, {"cause": "something", "message": "boom: disk full", "response": 500}))
        fake.route("GET", "/info", (503, {}, b"plain text failure\n"))

    async def main() -> None:
        async with serving(sock, setup) as (_fake, client):
            with pytest.raises(PodmanError) as err:
                await client.create_container({"name": "x"})
            assert err.value.status == 500
            assert err.value.message == "boom: disk full"
            with pytest.raises(PodmanError) as err:
                await client.info()
            assert (err.value.status, err.value.message) == (503, "plain text failure")

    run(main())


def test_missing_socket_is_unavailable(sock: str) -> None:
    """No socket file at all: PodmanUnavailable naming the path, not a bare OSError."""
    async def main() -> None:
        client = PodmanClient(sock, timeouts=Timeouts(request=2.0))
        with pytest.raises(PodmanUnavailable, match="cannot connect to Podman at " + sock):
            await client.info()
        with pytest.raises(PodmanUnavailable):
            async with client.events(["x=y"]):
                pass

    run(main())


def test_connection_refused_is_unavailable(sock: str) -> None:
    """A socket file nobody listens on (Podman died): ECONNREFUSED becomes PodmanUnavailable."""
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(sock)  # bound, never listening
    try:
        async def main() -> None:
            client = PodmanClient(sock, timeouts=Timeouts(request=2.0))
            with pytest.raises(PodmanUnavailable) as err:
                await client.ping()
            assert isinstance(err.value.__cause__, ConnectionRefusedError)

        run(main())
    finally:
        dead.close()


def test_server_that_never_answers_times_out(sock: str) -> None:
    """A wedged Podman (accepts, never answers) is PodmanUnavailable after the client timeout."""
    def setup(fake: FakeLibpod) -> None:
        fake.route("GET", "/info", lambda _req: Hang())

    async def main() -> None:
        async with serving(sock, setup, timeout=0.5) as (fake, client):
            started = time.monotonic()
            with pytest.raises(PodmanUnavailable, match="did not answer"):
                await client.info()
            assert time.monotonic() - started < 3.0
            # The wedged connection is not returned to the pool.
            assert idle(client) == []
            await until(lambda: fake.disconnects == 1, "the client to drop the wedged connection")

    run(main())


def test_events_stream_that_ends_ends_the_iterator(sock: str) -> None:
    """A clean end of Podman's event stream finishes the iterator (no hang, no error)."""
    async def main() -> None:
        async with serving(sock) as (fake, client):
            got = []
            async with client.events(["io.podmand.owner=podmand"]) as events:
                fake.events.send({"Type": "container", "Action": "start", "Actor": {"ID": "abc"}})
                fake.events.send({"Type": "container", "Action": "died", "Actor": {"ID": "abc"}})
                fake.events.end()
                async for event in events:
                    got.append((event.Action, event.Actor.id))
            assert got == [("start", "abc"), ("died", "abc")]
            assert fake.requests[-1].startswith("GET /v4.0.0/libpod/events?")
            assert '"type":["container"]' in fake.requests[-1]

    run(main())


def test_events_stream_dropped_between_chunks_is_unavailable(sock: str) -> None:
    """A connection closed without the terminating chunk is a broken stream, not an end."""
    async def main() -> None:
        async with serving(sock) as (fake, client):
            with pytest.raises(PodmanUnavailable):
                async with client.events([]) as events:
                    fake.events.send({"Type": "container", "Action": "start"})
                    fake.events.drop()
                    async for _ in events:
                        pass

    run(main())


def test_events_stream_cut_inside_a_chunk_is_unavailable(sock: str) -> None:
    """A connection that breaks mid-chunk must also surface as PodmanUnavailable: the
    watcher's pump and provisioning only catch PodmanUnavailable/PodmanError/OSError."""
    async def main() -> None:
        async with serving(sock) as (fake, client):
            with pytest.raises(PodmanUnavailable):
                async with client.events([]) as events:
                    fake.events.cut()
                    async for _ in events:
                        pass

    run(main())


def test_events_stream_task_can_be_cancelled(sock: str) -> None:
    """Cancelling a consumer blocked on the event stream closes its dedicated connection."""
    async def main() -> None:
        async with serving(sock) as (fake, client):
            first = asyncio.Event()

            async def consume() -> None:
                async with client.events([]) as events:
                    async for _ in events:
                        first.set()

            task = asyncio.create_task(consume())
            fake.events.send({"Type": "container", "Action": "start"}, sticky=True)
            await asyncio.wait_for(first.wait(), 5.0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await until(lambda: fake.disconnects == 1, "the stream connection to close")
            assert idle(client) == []  # a stream connection never enters the pool

    run(main())


def test_pull_error_line_is_podman_error(sock: str) -> None:
    """A pull that fails reports it in-band (HTTP 200, an ``error`` line)."""
    def setup(fake: FakeLibpod) -> None:
        fake.route("POST", "/images/pull", (200, {"Transfer-Encoding": "chunked"},
                                            b'{"stream":"Trying to pull"}\n{"error":"manifest unknown"}\n'))

    async def main() -> None:
        async with serving(sock, setup) as (_fake, client):
            lines = []
            with pytest.raises(PodmanError, match="manifest unknown"):
                async for line in client.pull_image("img:1", "missing"):
                    lines.append(line.stream)
            assert lines == ["Trying to pull"]

    run(main())


def test_import_that_podman_never_answers_gives_up_after_the_inactivity(sock: str) -> None:
    """The rootfs upload has no overall deadline, only Podman's silence ends it, and the
    error names the import (the socket transport hands the timeout to the client)."""
    def setup(fake: FakeLibpod) -> None:
        fake.route("POST", "/images/import", lambda _req: Hang())

    async def main() -> None:
        async with serving(sock, setup) as (fake, client):
            with pytest.raises(PodmanUnavailable, match="did not answer the import of r:1 in time"):
                await client.import_image(io.BytesIO(b"tar bytes"), 9, "r:1", 0.2)
            assert fake.bodies[-1] == ("POST /v4.0.0/libpod/images/import", b"tar bytes")

    run(main())


def test_a_reset_while_another_task_reads_events_is_unavailable(sock: str) -> None:
    """The hub reads Podman's events in a pump task, outside the stream's context: a
    connection reset there (ECONNRESET: Podman closed with our request unread) must be
    PodmanUnavailable too, never a bare OSError."""
    async def rude(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        line = b'{"Action":"start"}\n'
        writer.write(b"%x\r\n%s\r\n" % (len(line), line))
        await writer.drain()
        writer.transport.abort()  # the request never read: the client's next read is ECONNRESET

    async def main() -> None:
        server = await asyncio.start_unix_server(rude, sock)
        client = PodmanClient(sock)
        try:
            async with client.events([]) as events:
                async def pump() -> list[str]:
                    return [e.Action async for e in events]  # type: ignore[union-attr]

                with pytest.raises(PodmanUnavailable) as err:
                    await asyncio.create_task(pump())
                assert isinstance(err.value.__cause__, OSError)
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    run(main())


# ---------------------------------------------------------------- streams on pooled connections


def test_a_pull_read_to_its_end_returns_its_connection_to_the_pool(sock: str) -> None:
    """A finished pull's connection carries the next request: pull, inspect, pull again,
    one connection in all."""
    async def main() -> None:
        async with serving(sock) as (fake, client):
            assert [line.stream async for line in client.pull_image("img:1", "missing")] == ["pulling", ""]
            assert len(idle(client)) == 1
            await client.inspect_image("img:1")
            assert [line.id async for line in client.pull_image("img:1", "missing")][-1] == "sha256:abc"
            assert fake.connections == 1 and len(idle(client)) == 1

    run(main())


def test_a_stream_left_before_its_end_closes_its_connection(sock: str) -> None:
    """An abandoned pull (a stall, a cancelled create) closes its connection, which is how
    Podman learns to stop; it is never pooled with an answer half read."""
    feed: list[Feed] = []

    def setup(fake: FakeLibpod) -> None:
        feed.append(Feed(fake))
        fake.route("POST", "/images/pull", lambda _req: Stream(feed[0]))

    async def main() -> None:
        async with serving(sock, setup) as (fake, client):
            async with contextlib.aclosing(client.pull_image("img:1", "missing")) as lines:
                feed[0].send({"stream": "Trying to pull img:1"}, sticky=True)  # then nothing
                assert (await anext(lines)).stream == "Trying to pull img:1"
            await until(lambda: fake.disconnects == 1, "the server to see the pull's connection closed")
            assert idle(client) == []
            await client.inspect_image("img:1")
            assert fake.connections == 2

    run(main())


def test_a_pooled_connection_dead_before_a_stream_is_retried(sock: str) -> None:
    """A stream takes an idle connection like any request, and Podman may have dropped it:
    the pull is sent again on a fresh one."""
    async def main() -> None:
        async with serving(sock) as (fake, client):
            await client.info()
            for writer in list(fake._writers):
                writer.close()
            await until(lambda: fake.disconnects == 1, "the server to drop the idle connection")
            assert [line.id async for line in client.pull_image("img:1", "missing")][-1] == "sha256:abc"
            assert fake.connections == 2 and fake.count(r"POST .*/images/pull") == 1

    run(main())


def test_an_answer_ended_by_closing_is_not_pooled(sock: str) -> None:
    """A body with neither length nor chunks ends where the server closed: that connection
    carries nothing more, so it is not put back in the pool."""
    connections = []

    async def close_delimited(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"Id": "sha256:img"}')
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_unix_server(close_delimited, sock)
        client = PodmanClient(sock)
        try:
            assert (await client.inspect_image("img:1")).id == "sha256:img"
            assert idle(client) == []
            assert (await client.inspect_image("img:1")).id == "sha256:img"
            assert len(connections) == 2
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    run(main())
