"""Pinned image references (podmand.driver.images) on the fake libpod: known while
Podman's image events say nothing moved them, forgotten when they may have."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from podmand.driver.images import OWN_PULL_WINDOW, Images, name_key
from podmand.driver.tasks import Tasks
from podmand.libpod import ImageInspect
from tests.fakes.harness import eventually, libpod
from tests.fakes.libpod import FakeLibpod

REF = "registry.example/team/app:1"
ID = "a" * 64
DEADLINE = 10.0


@pytest.mark.parametrize(("ref", "key"), [
    ("alpine", "alpine:latest"),
    ("docker.io/library/alpine:latest", "alpine:latest"),
    ("localhost:5000/app", "app:latest"),
    ("localhost:5000/team/app:1", "app:1"),
    ("quay.io/app@sha256:" + "0" * 64, "app@sha256:" + "0" * 64),
])
def test_every_spelling_of_a_name_has_one_key(ref: str, key: str) -> None:
    assert name_key(ref) == key


@asynccontextmanager
async def pinned_images() -> AsyncIterator[tuple[FakeLibpod, Images]]:
    async with libpod() as (fake, client):
        fake.route("GET", "/images/.+/json", (200, {}, {"Id": ID, "Config": {"User": "app"}}))
        tasks = Tasks()
        images = Images(client, tasks, retry=0.01)
        try:
            yield fake, images
        finally:
            await tasks.close()


def run(body: Callable[[FakeLibpod, Images], Awaitable[None]]) -> None:
    async def main() -> None:
        async with pinned_images() as (fake, images):
            await body(fake, images)

    asyncio.run(asyncio.wait_for(main(), DEADLINE))


async def learn(fake: FakeLibpod, images: Images, ref: str = REF) -> ImageInspect:
    """``ref`` as Images gives it, once the subscription is up (looked up when not known)."""
    images.known(ref)  # subscribes
    await eventually(lambda: images.live, "the image event subscription")
    return await images.pinned(ref, lambda: fake_inspect(images, ref))


async def fake_inspect(images: Images, ref: str) -> ImageInspect:
    return await images.podman.inspect_image(ref)


def inspects(fake: FakeLibpod) -> int:
    return fake.count(r"GET .*/images/.+/json")


def event(action: str, name: str = "", image_id: str = "") -> dict[str, Any]:
    return {"Type": "image", "Action": action, "Actor": {"ID": image_id, "Attributes": {"name": name}}}


def test_a_reference_looked_up_once_is_known_without_a_call() -> None:
    async def body(fake: FakeLibpod, images: Images) -> None:
        first = await learn(fake, images)
        again = await images.pinned(REF, lambda: fake_inspect(images, REF))
        assert (first.id, again, inspects(fake)) == (ID, first, 1)
        assert fake.count(r"GET .*/events\?.*image") == 1  # one subscription, whatever the lookups

    run(body)


def test_reuse_false_looks_up_each_time_and_keeps_the_answer() -> None:
    """'always' and 'newer' pull each time; what they find is what later lookups reuse."""
    async def body(fake: FakeLibpod, images: Images) -> None:
        await learn(fake, images)
        await images.pinned(REF, lambda: fake_inspect(images, REF), reuse=False)
        assert inspects(fake) == 2 and images.known(REF) is not None

    run(body)


@pytest.mark.parametrize("moved", [
    event("pull", "registry.example/team/app:1"),
    event("tag", "app:1", "b" * 64),  # another spelling of the name, now on another image
    event("untag", "registry.example/team/app:1", ID),
    event("remove", "", ID),  # the image went (named by ID only)
    event("prune"),  # names nothing: anything may have moved
])
def test_an_image_event_that_may_move_the_reference_forgets_it(moved: dict[str, Any]) -> None:
    async def body(fake: FakeLibpod, images: Images) -> None:
        await learn(fake, images)
        fake.image_events.send(moved)
        await eventually(lambda: images.known(REF) is None, "the event to be read")
        await images.pinned(REF, lambda: fake_inspect(images, REF))
        assert inspects(fake) == 2 and images.known(REF) is not None  # looked up and pinned again

    run(body)


def test_events_about_other_images_leave_it_known() -> None:
    async def body(fake: FakeLibpod, images: Images) -> None:
        await learn(fake, images)
        await learn(fake, images, "other:2")
        # Podman 5's "pull-error" (a pull that failed) moves no tag: the pin stays.
        for unrelated in (event("pull-error", REF), event("pull", "other:2"), event("mount", REF, ID),
                          event("remove", "", "c" * 64)):
            fake.image_events.send(unrelated)
        await eventually(lambda: images.known("other:2") is None, "the events to be read")
        assert images.known(REF) is not None and len(images) == 1

    run(body)


def test_a_lookup_that_raced_an_event_for_its_name_is_not_remembered() -> None:
    """Podman answered the inspect, then the tag moved before podmand kept the answer."""
    async def body(fake: FakeLibpod, images: Images) -> None:
        await learn(fake, images, "probe:1")

        async def inspect_then_tag_moves() -> ImageInspect:
            info = await fake_inspect(images, REF)
            fake.image_events.send(event("tag", REF, "b" * 64))
            fake.image_events.send(event("pull", "probe:1"))  # read after the tag event
            await eventually(lambda: images.known("probe:1") is None, "the events to be read")
            return info

        assert (await images.pinned(REF, inspect_then_tag_moves)).id == ID
        assert images.known(REF) is None

    run(body)


def test_nothing_is_known_while_the_subscription_is_down() -> None:
    async def body(fake: FakeLibpod, images: Images) -> None:
        await learn(fake, images)
        fake.image_events.drop()
        await eventually(lambda: not images.live, "the subscription to drop")
        assert images.known(REF) is None and len(images) == 0
        await eventually(lambda: images.live, "the subscription to come back")
        assert fake.count(r"GET .*/events\?.*image") == 2
        await images.pinned(REF, lambda: fake_inspect(images, REF))
        assert inspects(fake) == 2 and images.known(REF) is not None

    run(body)


def test_an_unreadable_event_forgets_everything() -> None:
    async def body(fake: FakeLibpod, images: Images) -> None:
        await learn(fake, images)
        fake.image_events.send(b"{not json")
        await eventually(lambda: images.known(REF) is None, "the event to be read")
        assert images.live  # skipped, not a reason to resubscribe
        assert fake.count(r"GET .*/events\?.*image") == 1

    run(body)


def test_no_subscription_no_pins() -> None:
    """Podman refuses the image event stream: every lookup is made, none is kept."""
    async def body(fake: FakeLibpod, images: Images) -> None:
        fake.route("GET", "/events", (500, {}, {"message": "events backend broken"}))
        for _ in range(3):
            await images.pinned(REF, lambda: fake_inspect(images, REF))
            await eventually(lambda: fake.count(r"GET .*/events") >= 1, "a subscription attempt")
        assert inspects(fake) == 3 and len(images) == 0 and not images.live

    run(body)


def test_references_remembered_are_bounded_least_recently_used_first() -> None:
    """Callers choose references: only the last ``kept`` used are remembered."""
    async def body(fake: FakeLibpod, images: Images) -> None:
        images.kept = 3
        for i in range(5):
            await learn(fake, images, f"img{i}:1")
        assert len(images) == 3 and images.known("img0:1") is None and images.known("img1:1") is None
        assert images.known("img2:1") is not None  # used: kept over img3
        await learn(fake, images, "img5:1")
        assert images.known("img3:1") is None and images.known("img2:1") is not None and len(images) == 3

    run(body)


# Podman's event of a pull the 'missing' policy made a no-op: 4.3.1 names the reference
# only, 5.4.2 the image's ID too (both seen on these machines).
OWN_PULL_EVENTS = [event("pull", REF), event("pull", REF, ID)]


async def repinned_by_own_pull(fake: FakeLibpod, images: Images) -> None:
    """REF learnt, then pulled by podmand (its lookup made under :meth:`Images.own_pull`)."""
    await learn(fake, images)
    with images.own_pull(REF):
        await images.pinned(REF, lambda: fake_inspect(images, REF), reuse=False)


async def read(fake: FakeLibpod, images: Images) -> None:
    """Every event sent so far has been read: one more, about another image, has."""
    await learn(fake, images, "marker:1")
    fake.image_events.send(event("untag", "marker:1"))
    await eventually(lambda: images.known("marker:1") is None, "the events to be read")


@pytest.mark.parametrize("own", OWN_PULL_EVENTS)
def test_the_event_of_podmands_own_pull_keeps_the_pin_and_the_next_pull_forgets(own: dict[str, Any]) -> None:
    async def body(fake: FakeLibpod, images: Images) -> None:
        await repinned_by_own_pull(fake, images)
        fake.image_events.send(own)
        await read(fake, images)
        assert images.known(REF) is not None  # no call for the next create
        fake.image_events.send(own)  # a pull nobody here expected: the tag may have moved
        await eventually(lambda: images.known(REF) is None, "the other pull to be read")

    run(body)


def test_a_failed_own_pull_expects_no_event() -> None:
    async def body(fake: FakeLibpod, images: Images) -> None:
        await learn(fake, images)
        with pytest.raises(RuntimeError), images.own_pull(REF):
            raise RuntimeError("the pull failed")
        fake.image_events.send(event("pull", REF))  # so this one is another's
        await eventually(lambda: images.known(REF) is None, "the pull to be read")

    run(body)


def test_an_own_pull_event_that_never_came_is_expected_only_for_a_while() -> None:
    now = [0.0]

    async def main() -> None:
        async with libpod() as (fake, client):
            fake.route("GET", "/images/.+/json", (200, {}, {"Id": ID, "Config": {"User": "app"}}))
            tasks = Tasks()
            images = Images(client, tasks, retry=0.01, clock=lambda: now[0])
            try:
                await repinned_by_own_pull(fake, images)  # Podman wrote no event for it
                now[0] = OWN_PULL_WINDOW + 1
                fake.image_events.send(event("pull", REF))
                await eventually(lambda: images.known(REF) is None, "the later pull to be read")
            finally:
                await tasks.close()

    asyncio.run(asyncio.wait_for(main(), DEADLINE))
