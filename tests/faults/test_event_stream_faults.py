"""``podmand serve`` against event streams that say nothing: Podman 5.1.0-5.2.x, which
answers a subscription only with its first event, and a journald event logger the
user cannot read, which never sends one. podmand proves each subscription with an
event it causes itself (a helper container created and removed, which the fake
announces as Podman would); these tests send no event of their own.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.fakes.libpod import INFO, FakeLibpod, Hang
from tests.faults import test_faults as base
from tests.faults.test_faults import Podmand, ready, wait_until
from tests.faults.test_watch_faults import Container, next_change, watch

launch = base.launch

CONTAINER_EVENTS = r'GET .*/events\?.*"type":\["container"\]'  # the hub's subscription, not the image cache's
SILENT_FIX = ('events_logger = "file"', "systemd-journal")


def play_podman(fake: FakeLibpod, version: str, event_logger: str = "file") -> None:
    info = {**INFO, "host": {**INFO["host"], "eventLogger": event_logger},
            "version": {"Version": version, "APIVersion": version}}
    fake.route("GET", "/info", (200, {}, info))
    fake.common_headers["Libpod-Api-Version"] = version


def test_podman_5_2_answers_the_subscription_only_with_an_event(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """On an idle Podman 5.2 nothing happens that the subscription matches, so its answer never
    comes unless podmand makes something happen: podmand must still start and serve watches."""
    play_podman(fake, "5.2.2")
    fake.late_event_head = True
    box = Container()
    box.install(fake, lambda _req: Hang())
    d = launch().wait_ready()
    events = watch(d)
    try:
        cond = ready(next_change(events).sandbox.sandbox)
        assert (cond.status, cond.reason) == ("True", "ContainerRunning")
    finally:
        events.cancel()  # type: ignore[attr-defined]
    assert "did not connect" not in d.log
    assert not any(needle in d.log for needle in SILENT_FIX)  # the proof arrived: no silence reported
    assert fake.count(CONTAINER_EVENTS) == 1


def test_a_silent_event_stream_warns_once_and_exits_come_from_the_shorter_resync(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """The stream opens and never says anything: podmand warns once, naming the cause and the fix,
    and resyncs every resync_interval_silent seconds (resync_interval is an hour here), so an exit
    still reaches the watch; a resubscription that is silent too is not warned about again."""
    play_podman(fake, "4.9.3", event_logger="journald")
    fake.silent_events = True
    box = Container()
    box.install(fake, lambda _req: Hang())  # no /wait answer: only a resync can tell
    d = launch(PODMAND_RESYNC_INTERVAL="3600", PODMAND_RESYNC_INTERVAL_SILENT="0.5",
               OPENSHELL_LOG_LEVEL="debug").wait_ready()
    events = watch(d)
    try:
        assert ready(next_change(events).sandbox.sandbox).reason == "ContainerRunning"
        wait_until(lambda: all(needle in d.log for needle in SILENT_FIX), "the silent-stream warning")
        assert "Podman's event logger: journald" in d.log
        fake.call(lambda: box.exit(3))
        cond = ready(next_change(events, skip_reason="ContainerRunning").sandbox.sandbox)
        assert (cond.status, cond.reason) == ("False", "ContainerExited")
    finally:
        events.cancel()  # type: ignore[attr-defined]
    fake.silent.drop()  # a new subscription, proved (and found silent) again
    wait_until(lambda: fake.count(CONTAINER_EVENTS) == 2 and "still silent" in d.log, "the second proof")
    assert d.log.count('events_logger = "file"') == 1, d.log
    assert d.proc.poll() is None


def test_podman_5_2_with_a_silent_stream_is_served_without_its_answer(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """Podman 5.2 whose event logger sends nothing never answers the subscription at all: once the
    proof gives up, podmand serves without the answer (and says the stream is silent)."""
    play_podman(fake, "5.2.2", event_logger="journald")
    fake.late_event_head = True
    fake.silent_events = True
    box = Container()
    box.install(fake, lambda _req: Hang())
    d = launch().wait_ready()
    events = watch(d)
    try:
        assert ready(next_change(events).sandbox.sandbox).reason == "ContainerRunning"
    finally:
        events.cancel()  # type: ignore[attr-defined]
    assert all(needle in d.log for needle in SILENT_FIX), d.log
    assert fake.count(CONTAINER_EVENTS) == 1  # still waiting for its answer, not resubscribing
