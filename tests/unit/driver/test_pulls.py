"""Podman 6's held pull head (issue 32): from 6.0 libpod answers ``POST /images/pull`` only
once the first blob moves or 5 s have passed (pkg/api/handlers/libpod/images_pull.go:27,
181-241 at v6.0.0-rc1), where 5.8 sent its 200 and a first line at once (:156 at v5.8.3).
The fake holds its answer the same way (``FakeLibpod.pull_head_hold``, its own timer), over
the Unix socket, so that every deadline podmand sets on a pull is in play: the client's
(connect, request: none applies to a stream) and ``pull_inactivity_timeout``. The times are
scaled down: Podman's 5 s hold is 0.5 s here, podmand's allowance before the first line
(``Puller.head_hold``, 6 s) 1 s, and the inactivity timeout 0.1 s, shorter than the hold."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from podmand.config import Settings
from podmand.driver import pulls
from podmand.driver.pending import ProvisionFailed
from podmand.libpod import PodmanClient
from podmand.libpod.timeouts import Timeouts
from podmand.sandbox import pullprogress
from tests.fakes.harness import Sink, eventually
from tests.fakes.libpod import FakeLibpod, Hang

IMAGE = "registry.example/app:1"
TINY = Timeouts(connect=0.05, request=0.05, ping=0.05, create=0.05, start=0.05, stop_grace=0.05, remove_grace=0.05,
                healthcheck=0.05, past_events=0.05)


def on_socket(body: Callable[[FakeLibpod, pulls.Puller, Sink], Awaitable[None]]) -> None:
    """``body`` with a fake libpod on a Unix socket and a Puller whose client has TINY deadlines."""
    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="pdp-", dir="/tmp") as tmp:
            fake = FakeLibpod()
            await fake.start(str(Path(tmp) / "podman.sock"))
            client = PodmanClient(fake.path, timeouts=TINY)
            sink = Sink()
            puller = pulls.Puller(client, Settings(pull_inactivity_timeout=0.1), sink)
            puller.head_hold = 1.0
            try:
                await body(fake, puller, sink)
            finally:
                await client.close()
                await fake.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_held_pull_head_neither_fails_the_pull_nor_trips_a_deadline() -> None:
    """Without the allowance the pull was abandoned at 0.1 s ("no progress from Podman"),
    a sandbox on Podman 6 failing ImagePullFailed whenever its first blob took longer than
    a pull_inactivity_timeout under 5 s to move."""
    async def body(fake: FakeLibpod, puller: pulls.Puller, sink: Sink) -> None:
        fake.pull_head_hold = 0.5
        loop = asyncio.get_running_loop()
        began = loop.time()
        info = await puller.pull(IMAGE, "always", "ImagePullFailed", "sb-1")
        assert loop.time() - began >= 0.5  # the head was held that long, and nothing gave up
        assert info.id == "sha256:img"
        assert fake.count(r"POST .*/images/pull\?") == 1  # not retried
        # Every line, sent at once after the hold, was read: the blob and its completion.
        last = [dict(e.platform_event.event.metadata) for e in sink.events][-1]
        assert (last[pullprogress.KEY_BLOBS_DONE], last[pullprogress.KEY_BLOBS_SEEN]) == ("1", "1")

    on_socket(body)


def test_a_head_that_never_comes_is_still_abandoned_after_the_allowance() -> None:
    """The allowance bounds the wait for the first line: a Podman that accepts a pull and
    never answers is given up on at ``head_hold`` (then the stream is closed)."""
    async def body(fake: FakeLibpod, puller: pulls.Puller, sink: Sink) -> None:
        fake.route("POST", "/images/pull", lambda _req: Hang())
        puller.head_hold = 0.3
        with pytest.raises(ProvisionFailed) as failed:
            await puller.pull(IMAGE, "always", "ImagePullFailed", "sb-1")
        assert (failed.value.reason, failed.value.message) == (
            "ImagePullFailed", f"no progress from Podman for 0.3 s pulling {IMAGE!r} (pull_inactivity_timeout)")
        await eventually(lambda: fake.disconnects == fake.connections == 1, "the pull connection closed (Podman stops)")

    on_socket(body)


def test_after_the_first_line_the_setting_alone_counts() -> None:
    """The allowance is for the head only: a pull that spoke and then went silent is cut at
    ``pull_inactivity_timeout`` as before (fake clock)."""
    quiet = pullprogress.Inactivity(30.0, now=100.0, first=pullprogress.HEAD_HOLD)
    assert quiet.remaining(100.0) == 30.0  # a timeout longer than the hold: unchanged
    short = pullprogress.Inactivity(2.0, now=100.0, first=pullprogress.HEAD_HOLD)
    assert not short.expired(105.9) and short.expired(106.0)
    assert short.message("img:1") == "no progress from Podman for 6 s pulling 'img:1' (pull_inactivity_timeout)"
    short.touch(106.5)
    assert not short.expired(108.4) and short.expired(108.5)
    assert short.message("img:1") == "no progress from Podman for 2 s pulling 'img:1' (pull_inactivity_timeout)"
    never = pullprogress.Inactivity(0.0, now=0.0, first=pullprogress.HEAD_HOLD)
    assert never.remaining(1e9) is None
