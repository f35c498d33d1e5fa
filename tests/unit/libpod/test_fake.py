"""FakeLibpod's two doors answer alike: the in-memory one (``fake.transport()``) that
driver and hub tests use in-process, and the Unix socket the fault tests use.

Each scenario runs through both doors; the in-memory one must also need no socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from podmand import names
from podmand.libpod import Event, MockTransport, PodmanClient, PodmanError, PodmanUnavailable, Timeouts
from tests.fakes.libpod import FakeLibpod, Feed, Hang, Stream

DEADLINE = 10.0
DOORS = ["memory", "socket"]


@contextlib.asynccontextmanager
async def door(kind: str, fake: FakeLibpod, request: float = 30.0) -> AsyncIterator[PodmanClient]:
    timeouts = Timeouts(request=request)
    if kind == "memory":
        client = PodmanClient(transport=fake.transport(), timeouts=timeouts)
        try:
            yield client
        finally:
            await client.close()
            await fake.close()
        return
    tmp = tempfile.mkdtemp(prefix="pdl-", dir="/tmp")  # AF_UNIX paths are short
    try:
        await fake.start(f"{tmp}/p.sock")
        client = PodmanClient(fake.path, timeouts=timeouts)
        try:
            yield client
        finally:
            await client.close()
            await fake.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def until(predicate: Callable[[], Any], what: str) -> None:
    """Wait on a condition with a deadline, yielding to the loop between checks."""
    end = time.monotonic() + DEADLINE / 2
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def run(coro: Awaitable[Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, DEADLINE)

    return asyncio.run(bounded())


def test_the_memory_door_is_a_mock_transport_with_no_socket() -> None:
    fake = FakeLibpod()

    async def main() -> None:
        async with door("memory", fake) as client:
            assert isinstance(client.transport, MockTransport)
            await client.info()

    run(main())
    assert fake.path == "" and fake.connections == 0 and fake.requests == ["GET /v4.0.0/libpod/info"]


@pytest.mark.parametrize("kind", DOORS)
def test_default_routes_and_recorded_requests(kind: str) -> None:
    fake = FakeLibpod()

    async def main() -> None:
        async with door(kind, fake) as client:
            info = await client.info()
            assert (info.version.version, info.host.security.rootless) == ("4.3.1", True)
            ping = await client.ping()
            assert ping.status == 200 and ping.headers["libpod-api-version"] == "4.3.1"
            await client.create_volume("v1", {"k": "v"})
            volume = await client.inspect_volume("v1")
            assert volume is not None and volume.labels == {"k": "v"}
            assert await client.remove_volume("v1") is True
            assert await client.inspect_volume("v1") is None
            assert await client.inspect_network("n") is None
            with pytest.raises(PodmanError, match=r"no route for GET /v4\.0\.0/libpod/containers/x/json") as err:
                await client.inspect_container("x")
            assert err.value.gone

    run(main())
    assert fake.requests[0] == "GET /v4.0.0/libpod/info"
    assert fake.bodies[2] == ("POST /v4.0.0/libpod/volumes/create", b'{"Name":"v1","Label":{"k":"v"}}')


@pytest.mark.parametrize("kind", DOORS)
def test_chunked_replies_and_pulls(kind: str) -> None:
    fake = FakeLibpod()
    containers = [{"Id": f"c{i}", "Labels": {"k": "v" * 30}} for i in range(5)]
    fake.route("GET", "/containers/json", (200, {"Transfer-Encoding": "chunked"}, containers))

    async def main() -> None:
        async with door(kind, fake) as client:
            assert [c.id for c in await client.list_containers([])] == [f"c{i}" for i in range(5)]
            lines = [line async for line in client.pull_image("img:1", "missing", auth="secret")]
            assert [(line.stream, line.id) for line in lines] == [("pulling", ""), ("", "sha256:abc")]

    run(main())
    assert fake.count(r"POST .*/images/pull\?reference=img:1&policy=missing") == 1


@pytest.mark.parametrize("kind", DOORS)
def test_event_streams_end_and_break_as_on_a_socket(kind: str) -> None:
    fake = FakeLibpod()

    async def main() -> None:
        async with door(kind, fake) as client:
            async with client.events(["a=b"]) as events:
                fake.events.send({"Type": "container", "Action": "start", "Actor": {"ID": "c1"}})
                fake.events.end()
                assert [e.Action async for e in events] == ["start"]  # type: ignore[union-attr]
            for breaks in (fake.events.drop, fake.events.cut):
                with pytest.raises(PodmanUnavailable):
                    async with client.events([]) as events:
                        breaks()
                        async for _ in events:
                            pass
            assert fake.events.opened == 3 and not fake.events._queues  # every stream let go of its feed

    run(main())


@pytest.mark.parametrize("kind", DOORS)
def test_a_stream_the_client_leaves_is_let_go(kind: str) -> None:
    fake = FakeLibpod()
    feed = Feed(fake)
    fake.route("POST", "/containers/[^/]+/wait", lambda _req: Stream(feed))

    async def main() -> None:
        async with door(kind, fake) as client:
            waiting = asyncio.create_task(client.wait_container("c1"))
            await until(lambda: feed.opened, "the wait stream")
            feed.send(0)
            assert await waiting == 0
            await until(lambda: not feed._queues, "the fake to see the client leave")

    run(main())


@pytest.mark.parametrize("kind", DOORS)
def test_a_hang_ends_at_the_client_deadline(kind: str) -> None:
    fake = FakeLibpod()
    fake.route("GET", "/info", lambda _req: Hang())

    async def main() -> None:
        async with door(kind, fake, request=0.05) as client:
            with pytest.raises(PodmanUnavailable, match="did not answer GET /info in time"):
                await client.info()
            assert await client.list_containers([]) == []  # the next call is answered

    run(main())


def test_closing_the_fake_breaks_what_the_memory_door_holds_open() -> None:
    """As a socket fake's close drops its connections: a hang and a stream end in PodmanUnavailable."""
    fake = FakeLibpod()
    fake.route("GET", "/info", lambda _req: Hang())

    async def main() -> None:
        client = PodmanClient(transport=fake.transport())

        async def consume() -> None:
            async with client.events([]) as events:
                async for _ in events:
                    pass

        hung = asyncio.create_task(client.info())
        streaming = asyncio.create_task(consume())
        await until(lambda: fake._hangs and fake.events.opened, "a hang and a stream")
        await fake.close()
        for task in (hung, streaming):
            with pytest.raises(PodmanUnavailable):
                await task

    run(main())


def test_block_pulls_works_through_the_memory_door() -> None:
    fake = FakeLibpod()

    async def main() -> None:
        async with door("memory", fake) as client:
            fake.block_pulls()
            lines = client.pull_image("img:1", "always")
            pulling = asyncio.create_task(anext(lines))
            await until(lambda: fake.count("images/pull"), "the pull request")
            assert not pulling.done()
            fake.release_pulls()
            assert (await pulling).stream == "pulling"
            await lines.aclose()

    run(main())


@pytest.mark.parametrize("kind", DOORS)
def test_helper_containers_are_announced_on_the_event_feed(kind: str) -> None:
    """As Podman logs them: create and remove of a container with no sandbox id, with its name
    and labels; a sandbox container's events are left to the test."""
    fake = FakeLibpod()

    async def main() -> None:
        async with door(kind, fake) as client, client.events([f"{names.OWNER}={names.OWNER_VALUE}"]) as events:
            await client.create_container({"name": "podmand-read-x", "labels": names.own_labels("/s")})
            await client.create_container({"name": "box", "labels": {names.SANDBOX_ID: "sb1"}})
            assert await client.remove_container("podmand-read-x", 0)
            assert await client.remove_container("box", 0)
            fake.events.end()
            seen = [(e.Action, (e.Actor.attributes or {}).get("name"), (e.Actor.attributes or {}).get(names.STATE_DIR))
                    async for e in events if isinstance(e, Event)]
        assert seen == [("create", "podmand-read-x", "/s"), ("remove", "podmand-read-x", "/s")]

    run(main())


@pytest.mark.parametrize("kind", DOORS)
def test_a_late_event_head_comes_with_the_first_line(kind: str) -> None:
    """Podman 5.1-5.2: the subscription is not answered until there is an event to send."""
    fake = FakeLibpod()
    fake.late_event_head = True

    async def main() -> None:
        async with door(kind, fake) as client:
            async def first() -> str:
                async with client.events([]) as events:
                    async for event in events:
                        assert isinstance(event, Event)
                        return event.Action
                return ""

            opening = asyncio.create_task(first())
            await until(lambda: fake.events.opened, "the subscription to reach the fake")
            assert not opening.done()  # no line, no head: the client is still waiting for an answer
            fake.events.send({"Type": "container", "Action": "start", "Actor": {"ID": "c1"}})
            assert await opening == "start"

    run(main())


@pytest.mark.parametrize("kind", DOORS)
def test_silent_event_streams_open_and_say_nothing(kind: str) -> None:
    """A journald event logger the user cannot read: 200, then no line, whatever happens."""
    fake = FakeLibpod()
    fake.silent_events = True

    async def main() -> None:
        async with door(kind, fake) as client, client.events([]) as events:
            fake.events.send({"Type": "container", "Action": "start", "Actor": {"ID": "c1"}})
            await client.create_container({"name": "podmand-read-x", "labels": names.own_labels()})
            fake.silent.end()
            assert [e async for e in events] == []

    run(main())
