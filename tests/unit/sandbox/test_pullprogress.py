"""Pull progress from libpod's text stream: blobs counted, events rate-limited; the
driver publishes them as Pulling platform events, with a heartbeat while Podman is
silent (so a client's inactivity timeout never cuts a live pull)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

import pytest

from podmand import names
from podmand.driver import pulls
from podmand.libpod import PodmanError, PullLine
from podmand.sandbox import pullprogress

# What Podman 4.3.1's /libpod/images/pull sent for a one-layer image from a local registry.
RECORDED = [
    "Trying to pull 127.0.0.1:5053/h3/sandbox:1...\n",
    "Getting image source signatures\n",
    "Copying blob sha256:d471cac09c733670b9ca4ff56230499dd5d37124f58842bcea007c7d8020aee6\n",
    "Copying config sha256:bff10e1abb7f654057890e32b1d90675a328b363d124f146782724929ba799ac\n",
    "Writing manifest to image destination\n",
    "Storing signatures\n",
]


def test_recorded_pull_reports_start_and_completion() -> None:
    progress = pullprogress.PullProgress("127.0.0.1:5053/h3/sandbox:1", started=0.0)
    emitted = [m for i, line in enumerate(RECORDED) if (m := progress.feed(line, 0.1 * i)) is not None]
    assert [(m[pullprogress.KEY_BLOBS_DONE], m[pullprogress.KEY_BLOBS_SEEN]) for m in emitted] == [("0", "1"),
                                                                                                   ("1", "1")]
    last = emitted[-1]
    assert last[names.PROGRESS_ACTIVE_STEP] == names.STEP_PULLING
    assert last[names.PROGRESS_ACTIVE_DETAIL] == "127.0.0.1:5053/h3/sandbox:1: 1 of 1 layers"
    assert pullprogress.KEY_BYTES_TOTAL not in last  # 4.3.1 reports no sizes


def test_rate_limited_except_completed_blobs() -> None:
    progress = pullprogress.PullProgress("img", started=0.0, interval=0.5)
    blobs = [f"Copying blob sha256:{str(i) * 64}\n" for i in range(1, 6)]
    sent = [progress.feed(line, 0.01 * n) for n, line in enumerate(blobs)]
    assert sum(m is not None for m in sent) == 1  # five starts within 50 ms: one event
    assert progress.feed("Copying blob " + "1" * 64 + " done\n", 0.06) is not None  # a completion always
    assert progress.feed("Copying blob sha256:" + "f" * 64 + "\n", 0.07) is None
    later = progress.feed("Copying blob sha256:" + "e" * 64 + "\n", 0.6)
    assert later is not None and later[pullprogress.KEY_BLOBS_SEEN] == "7"


def test_sizes_become_bytes_when_podman_states_them() -> None:
    progress = pullprogress.PullProgress("img", started=0.0)
    progress.feed("Copying blob 0123456789ab [=====>----] 1.5MiB / 3.0MiB\n", 0.0)
    meta = progress.heartbeat(1.0)
    assert (meta[pullprogress.KEY_BYTES_DONE], meta[pullprogress.KEY_BYTES_TOTAL]) == (str(3 * 2**19), str(3 * 2**20))


def test_heartbeat_before_any_layer() -> None:
    progress = pullprogress.PullProgress("img", started=5.0)
    meta = progress.heartbeat(25.0)
    assert meta[pullprogress.KEY_ELAPSED] == "20" and meta[names.PROGRESS_ACTIVE_DETAIL] == "img: starting"
    assert progress.feed("Trying to pull img...\n", 26.0) is None  # nothing counted yet: no event



class FakePodman:
    def __init__(self, lines: list[str], stall_after: int | None = None, error: str = "",
                 clock: FakeClock | None = None, step: float = 0.0) -> None:
        self.lines, self.stall_after, self.error = lines, stall_after, error
        self.clock, self.step = clock, step
        self.resume = asyncio.Event()
        self.auth: list[str] = []
        self.closed = False

    async def pull_image(self, ref: str, policy: str, auth: str = "") -> AsyncGenerator[PullLine, None]:
        self.auth.append(auth)
        try:
            for i, line in enumerate(self.lines):
                if i == self.stall_after:
                    await self.resume.wait()
                if self.clock is not None:  # the line takes `step` (fake) seconds to come
                    self.clock.now += self.step
                    await asyncio.sleep(0.001)  # and arrives after the driver's wait began
                yield PullLine(stream=line)
            if self.error:
                raise PodmanError(500, self.error)
        finally:
            self.closed = True


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fake_driver(podman: FakePodman, inactivity: float = 600.0) -> tuple[Any, list[Any]]:
    published: list[Any] = []
    settings = SimpleNamespace(pull_inactivity_timeout=inactivity)
    sink = SimpleNamespace(publish=published.append)
    return pulls.Puller(podman, settings, sink), published  # type: ignore[arg-type]


def pulling(published: list[Any]) -> list[dict[str, str]]:
    return [dict(e.platform_event.event.metadata) for e in published
            if e.platform_event.event.reason == pullprogress.REASON]


def test_pull_lines_become_rate_limited_events() -> None:
    fake, published = fake_driver(FakePodman(RECORDED))
    asyncio.run(fake.pull_reporting("img", "always", "sb-1"))
    metas = pulling(published)
    assert [(m[pullprogress.KEY_BLOBS_DONE], m[pullprogress.KEY_BLOBS_SEEN]) for m in metas] == [("0", "1"), ("1", "1")]
    assert all(e.platform_event.sandbox_id == "sb-1" for e in published)


def test_silent_pull_publishes_heartbeats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pulls, "PULL_HEARTBEAT", 0.01)
    podman = FakePodman(RECORDED, stall_after=3)
    fake, published = fake_driver(podman)

    async def main() -> None:
        task = asyncio.ensure_future(fake.pull_reporting("img", "always", "sb-1"))
        deadline = asyncio.get_running_loop().time() + 10
        while len(pulling(published)) < 3:  # the first blob's event, then heartbeats while stalled
            await asyncio.sleep(0.001)
            assert not task.done() and asyncio.get_running_loop().time() < deadline, "no heartbeat"
        podman.resume.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(main())
    metas = pulling(published)
    assert metas[-1][pullprogress.KEY_BLOBS_DONE] == "1"
    assert len(metas) >= 4


def test_failed_pull_raises_after_its_progress() -> None:
    fake, published = fake_driver(FakePodman(RECORDED[:3], error="manifest unknown"))
    with pytest.raises(PodmanError, match="manifest unknown"):
        asyncio.run(fake.pull_reporting("img", "always", "sb-1"))
    assert len(pulling(published)) == 1


# ---------------------------------------------------------------- inactivity deadline


def test_inactivity_counts_from_the_last_line() -> None:
    quiet = pullprogress.Inactivity(30.0, now=100.0)
    assert quiet.remaining(120.0) == 10.0 and not quiet.expired(129.9)
    quiet.touch(125.0)
    assert not quiet.expired(150.0) and quiet.expired(155.0)
    assert quiet.message("img:1") == "no progress from Podman for 30 s pulling 'img:1' (pull_inactivity_timeout)"


def test_inactivity_zero_never_expires() -> None:
    quiet = pullprogress.Inactivity(0.0, now=0.0)
    assert quiet.remaining(1e9) is None and not quiet.expired(1e9)


def test_slow_but_steady_pull_is_never_cut() -> None:
    """Lines 0.9 timeouts apart, for nine timeouts in all (fake clock): the deadline is
    about silence, not about how long a pull takes."""
    clock = FakeClock()
    blobs = [f"Copying blob sha256:{str(i) * 64}\n" for i in range(1, 5)]
    podman = FakePodman(RECORDED[:3] + blobs + RECORDED[3:], clock=clock, step=9.0)
    fake, published = fake_driver(podman, inactivity=10.0)
    asyncio.run(fake.pull_reporting("img", "always", "sb-1", clock=clock))
    assert clock.now - 1000.0 == 90.0 and podman.closed
    last = pulling(published)[-1]
    assert (last[pullprogress.KEY_BLOBS_DONE], last[pullprogress.KEY_BLOBS_SEEN]) == ("5", "5")


def test_silent_pull_is_abandoned_and_its_stream_closed() -> None:
    podman = FakePodman(RECORDED, stall_after=3)
    fake, published = fake_driver(podman, inactivity=0.05)
    with pytest.raises(pullprogress.PullStalled, match=r"no progress from Podman for 0.05 s pulling 'img'"):
        asyncio.run(fake.pull_reporting("img", "always", "sb-1"))
    assert podman.closed  # the connection is gone: libpod cancels the pull
    assert len(pulling(published)) == 1  # the first blob's event, nothing after the stall


def test_zero_inactivity_timeout_waits_as_long_as_it_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pulls, "PULL_HEARTBEAT", 0.01)
    podman = FakePodman(RECORDED, stall_after=3)
    fake, published = fake_driver(podman, inactivity=0.0)

    async def main() -> None:
        task = asyncio.ensure_future(fake.pull_reporting("img", "always", "sb-1"))
        deadline = asyncio.get_running_loop().time() + 10
        while len(pulling(published)) < 6:  # five heartbeats of silence, still pulling
            await asyncio.sleep(0.001)
            assert not task.done() and asyncio.get_running_loop().time() < deadline, "pull was cut"
        podman.resume.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(main())
    assert pulling(published)[-1][pullprogress.KEY_BLOBS_DONE] == "1"


def test_settings_check_refuses_negative_and_infinite() -> None:
    """The range the schema declares for the deadline, checked as every setting's is."""
    from podmand.config import Settings
    from podmand.config.checks import validate
    from podmand.errors import ConfigError

    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match=r"pull_inactivity_timeout \(--pull-inactivity-timeout"):
            validate(Settings(pull_inactivity_timeout=bad))
    validate(Settings(pull_inactivity_timeout=0.0))


@pytest.mark.parametrize("line", ["Copying blob sha256:abcdef123456 1.2.3MB / 4MB",
                                  "Copying blob sha256:abcdef123456 . B / 5 B",
                                  "Copying blob sha256:abcdef123456 ٣ MB / ٤ MB"])
def test_odd_size_text_never_raises(line: str) -> None:
    """A line the size pattern half-matches (newer Podman prints progress bars) is read
    as far as it goes; it must never end the provisioning task with an exception."""
    progress = pullprogress.PullProgress("img", started=0.0)
    progress.feed(line, 1.0)
    assert progress.heartbeat(2.0)[pullprogress.KEY_BLOBS_SEEN] == "1"
