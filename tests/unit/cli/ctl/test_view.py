"""ctl's rendering: nothing cut in wide/JSON, ages, the pull progress bar, describe."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.cli.ctl import view
from podmand.cli.ctl.commands import Steps
from podmand.cli.ctl.podmanfacts import Facts, PastEvent
from podmand.libpod import times
from podmand.sandbox import pullprogress

LONG = "image pull failed: " + "x" * 150 + " END-OF-MESSAGE"
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def box(sandbox_id: str = "sb-1", message: str = LONG, status: str = "False", reason: str = "ImagePullFailed"):
    sandbox = pb.DriverSandbox(id=sandbox_id, name="web", workspace="ops")
    sandbox.status.name = f"openshell-ops--web-{sandbox_id}"
    sandbox.status.conditions.add(type="Ready", status=status, reason=reason, message=message)
    return sandbox


def test_list_cuts_messages_only_in_the_narrow_table() -> None:
    facts = {"sb-1": Facts("sb-1", image="localhost/img:1", created=NOW - timedelta(seconds=75))}
    narrow = view.table_text(view.list_rows([box()], facts, wide=False, now=NOW))
    wide = view.table_text(view.list_rows([box()], facts, wide=True, now=NOW))
    assert "END-OF-MESSAGE" not in narrow and "…" in narrow
    assert LONG in wide
    header, row = wide.splitlines()
    assert header.split() == ["ID", "NAME", "WORKSPACE", "READY", "IMAGE", "AGE", "INSTANCE", "MESSAGE"]
    assert row.split()[:6] == ["sb-1", "web", "ops", "False/ImagePullFailed", "localhost/img:1", "1m15s"]


def test_list_without_podman_facts_shows_dashes() -> None:
    [_, row] = view.list_rows([box(message="m")], {}, wide=False, now=NOW)
    assert row[4:6] == ["-", "-"]


def test_watch_lines_cut_only_when_not_wide() -> None:
    event = pb.WatchSandboxesEvent(sandbox=pb.WatchSandboxesSandboxEvent(sandbox=box()))
    assert "END-OF-MESSAGE" not in view.event_line(event)
    assert view.event_line(event, wide=True).endswith(LONG)
    platform = pb.WatchSandboxesEvent(
        platform_event=pb.WatchSandboxesPlatformEvent(
            sandbox_id="sb-1", event=pb.DriverPlatformEvent(type="Warning", reason="ImagePullFailed", message=LONG)
        )
    )
    assert view.event_line(platform, wide=True).endswith(LONG)
    as_json = json.dumps(view.event_dict(event, lambda b: b))
    assert LONG in as_json


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59, "59s"), (60, "1m0s"), (192, "3m12s"), (600, "10m"), (3600, "1h0m"), (7500, "2h5m"),
     (36000, "10h"), (86400 * 3 + 3600 * 4, "3d4h"), (86400 * 40, "40d"), (-5, "0s")],
)
def test_age(seconds: int, text: str) -> None:
    assert view.age(seconds) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01T11:59:00.123456789Z", datetime(2026, 12, 1, 11, 59, 0, 123456, tzinfo=UTC)),
        ("2026-12-01T12:59:00.5+01:00", datetime(2026, 12, 1, 11, 59, 0, 500000, tzinfo=UTC)),
        ("2026-12-01T11:59:00Z", datetime(2026, 12, 1, 11, 59, 0, tzinfo=UTC)),
        ("0001-01-01T00:00:00Z", None),
        ("", None),
        ("yesterday", None),
    ],
)
def test_parse_podman_times(text: str, expected: datetime | None) -> None:
    assert times.parse_time(text) == expected


def pulling(meta: dict[str, str]) -> pb.WatchSandboxesEvent:
    return pb.WatchSandboxesEvent(
        platform_event=pb.WatchSandboxesPlatformEvent(
            sandbox_id="sb-1",
            event=pb.DriverPlatformEvent(type="Normal", reason=pullprogress.REASON, message="Pulling", metadata=meta),
        )
    )


def test_progress_bar_from_layer_counts_and_from_bytes() -> None:
    progress = pullprogress.PullProgress("reg/img:1", started=0.0)
    progress.feed("Copying blob sha256:" + "a" * 64 + "\n", 1.0)
    progress.feed("Copying blob sha256:" + "b" * 64 + " done\n", 2.0)
    bar = view.progress_bar(progress.heartbeat(12.0), width=10)
    assert bar == "Pulling [#####-----] 1/2 layers 12s reg/img:1"
    meta = {pullprogress.KEY_BLOBS_DONE: "0", pullprogress.KEY_BLOBS_SEEN: "1",
            pullprogress.KEY_BYTES_DONE: str(3 * 2**20), pullprogress.KEY_BYTES_TOTAL: str(4 * 2**20)}
    assert view.progress_bar(meta, width=4) == "Pulling [###-] 3.0MiB/4.0MiB"


def test_steps_redraw_the_bar_on_a_tty_and_list_lines_elsewhere() -> None:
    meta = {pullprogress.KEY_BLOBS_DONE: "1", pullprogress.KEY_BLOBS_SEEN: "2", pullprogress.KEY_IMAGE: "img"}
    ready = pb.WatchSandboxesEvent(sandbox=pb.WatchSandboxesSandboxEvent(sandbox=box(status="True", reason="Up",
                                                                                     message="running")))
    tty, plain = io.StringIO(), io.StringIO()
    for out, is_tty in ((tty, True), (plain, False)):
        steps = Steps(out, is_tty)
        for event in (pulling(meta), pulling(meta), ready, ready):
            steps.show(event)
        steps.end()
    assert tty.getvalue().count("\r\x1b[KPulling [") == 2
    assert tty.getvalue().count("\n") == 2  # the bar's line ends once, then the Ready line (shown once)
    lines = plain.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["Pulling", "Pulling", "Ready=True"]
    assert "Up: running" in lines[-1]


def test_step_line_names_the_step() -> None:
    event = pb.WatchSandboxesEvent(
        platform_event=pb.WatchSandboxesPlatformEvent(
            sandbox_id="sb-1",
            event=pb.DriverPlatformEvent(reason="Pulled", message="Image x is ready",
                                         metadata={names.PROGRESS_COMPLETE_LABEL: "Image x pulled"}),
        )
    )
    line = view.step_line(event)
    assert line is not None and line.split()[1:] == ["Pulled", "Image", "x", "is", "ready"]
    event.platform_event.event.message = ""
    assert (view.step_line(event) or "").split()[1:] == ["Pulled", "Image", "x", "pulled"]


def test_describe_shows_everything_whole() -> None:
    sandbox = box()
    sandbox.status.fence_evidence.generation = "gen-2"
    fact = Facts("sb-1", image="localhost/img:1", command=["sleep", "600"], created=NOW - timedelta(minutes=3),
                 instance="abc", container_id="f" * 64, container_name="/openshell-ops--web-sb-1",
                 state="exited", exit_code=137)
    events = [PastEvent(NOW - timedelta(minutes=2), "start"), PastEvent(NOW - timedelta(minutes=1), "died", "137")]
    text = view.describe_text(view.describe_sections(sandbox, fact, events, "", now=NOW))
    fields = dict(line.split(":", 1) for line in text.splitlines() if not line.startswith(" ") and ":" in line)
    assert fields["Image"].strip() == "localhost/img:1"
    assert fields["Command"].strip() == "sleep 600"
    assert fields["Created"].strip() == "2026-12-01T11:57:00+00:00 (3m0s ago)"
    assert fields["State"].strip() == "exited (exit code 137)"
    assert fields["Runtime identity"].strip() == names.runtime_identity("abc", "gen-2")
    assert fields["Container ID"].strip() == "f" * 12
    assert LONG in text
    assert "died" in text and "137" in text.split("died", 1)[1].splitlines()[0]
    as_json = view.describe_dict(sandbox, fact, events, "")
    assert as_json["podman"]["exit_code"] == 137 and as_json["events"][1] == {
        "time": (NOW - timedelta(minutes=1)).isoformat(), "action": "died", "exit_code": "137"}
    assert LONG in json.dumps(as_json)


def test_describe_without_podman_says_why() -> None:
    text = view.describe_text(view.describe_sections(box(), None, [], "no responsive Podman API socket"))
    assert "Podman:" in text and "no responsive Podman API socket" in text
    assert "State:" in text and "no container yet" in text
