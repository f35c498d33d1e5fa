"""Unit tests for podmand.sandbox.snapshots: Podman container state to contract snapshots."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from podmand import names
from podmand.libpod import ContainerInspect, ContainerListEntry
from podmand.sandbox import snapshots

STARTED = 1795980045  # 2026-11-29T19:20:45Z
FINISHED = STARTED + 600
CREATED = STARTED - 5
CID = "4f2a9c0d1e3b5a7c9e1f3a5b7c9d1e3f5a7b9c1d3e5f7a9b1c3d5e7f9a1b3c5d"
LABELS = {
    names.MANAGED: "true",
    names.OWNER: names.OWNER_VALUE,
    names.SANDBOX_ID: "abc123",
    names.SANDBOX_NAME: "demo",
    names.SANDBOX_WORKSPACE: "ws",
}
NAME = "openshell-ws--demo-abc123"


def inspect(
    status: str,
    *,
    exit_code: int = 0,
    oom: bool = False,
    healthcheck: bool = False,
    finished: str = "2026-11-29T19:30:45.000000001Z",
) -> ContainerInspect:
    doc: dict[str, Any] = {
        "Id": CID,
        "Name": "/" + NAME,
        "Created": "2026-11-29T19:20:40.123456789Z",
        "State": {
            "Status": status,
            "Running": status == "running",
            "ExitCode": exit_code,
            "OOMKilled": oom,
            "StartedAt": "2026-11-29T19:20:45.512333122Z",
            "FinishedAt": finished,
        },
        "Config": {"Labels": LABELS, "Healthcheck": {"Test": ["CMD-SHELL", "true"]} if healthcheck else None},
        "Image": "sha256:feed",
    }
    return msgspec.json.decode(json.dumps(doc), type=ContainerInspect)


def list_entry(status: str, *, exit_code: int = 0, exited_at: int = FINISHED) -> ContainerListEntry:
    doc = {
        "Id": CID,
        "Names": [NAME],
        "State": status,
        "Labels": LABELS,
        "ExitCode": exit_code,
        "Exited": status == "exited",
        "ExitedAt": exited_at,
        "StartedAt": STARTED,
        "Created": "2026-11-29T19:20:40.123456789Z",
    }
    return msgspec.json.decode(json.dumps(doc), type=ContainerListEntry)


def ready(sandbox: Any) -> Any:
    (cond,) = [c for c in sandbox.status.conditions if c.type == names.READY]
    return cond


# ---------------------------------------------------------------- parse_time


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-11-29T19:20:45.512333122Z", STARTED),
        ("2026-11-29T19:20:45Z", STARTED),
        ("2026-11-29T20:20:45.999999999+01:00", STARTED),
        ("2026-11-29T14:50:45-04:30", STARTED),
        (" 2026-11-29T19:20:45Z\n", STARTED),
    ],
)
def test_parse_time(text: str, seconds: int) -> None:
    """RFC 3339 with any offset becomes whole UTC seconds (fractions dropped, not rounded)."""
    ts = snapshots.time_of(text)
    assert ts is not None
    assert (ts.seconds, ts.nanos) == (seconds, 0)


@pytest.mark.parametrize(
    "text",
    ["0001-01-01T00:00:00Z", "", "garbage", "2026-11-29 19:20:45Z", "2026-13-40T19:20:45Z", "2026-11-29T19:20:45"],
)
def test_parse_time_rejects(text: str) -> None:
    """Go's zero time, unparseable and offset-less strings yield no timestamp."""
    assert snapshots.time_of(text) is None


@pytest.mark.parametrize(
    ("seconds", "ok"), [(-62135596800, False), (0, False), (STARTED, True), (253402300799, True), (253402300800, False)]
)
def test_timestamp_range(seconds: int, ok: bool) -> None:
    """Only times the gateway accepts are emitted."""
    assert (snapshots.timestamp(seconds) is not None) is ok


# ---------------------------------------------------------------- ready_from_state


@pytest.mark.parametrize(
    ("status", "kwargs", "expected"),
    [
        ("running", {}, ("True", "ContainerRunning")),
        ("running", {"health": "none"}, ("True", "ContainerRunning")),
        ("running", {"health": "healthy"}, ("True", "HealthCheckPassed")),
        ("running", {"health": "starting"}, ("False", "HealthCheckStarting")),
        ("running", {"health": "unhealthy"}, ("False", "HealthCheckFailed")),
        # Podman 5.3+: "reset", no result since an init or unpause; 5.5+: "stopped", the last
        # check cut short by a stop: neither passed, and "stopped" not starting either
        ("running", {"health": "reset"}, ("False", "HealthCheckStarting")),
        ("running", {"health": "stopped"}, ("Unknown", "HealthCheckStopped")),
        ("exited", {"health": "stopped", "exit_code": 143}, ("False", "ContainerRuntimeRestart")),
        ("exited", {"exit_code": 3}, ("False", "ContainerExited")),
        ("exited", {"exit_code": 137, "oom": True}, ("False", "OOMKilled")),
        ("exited", {"exit_code": 78}, ("False", "WorkspaceValidationFailed")),
        ("exited", {"exit_code": 0, "stopped": True}, ("False", "ContainerStopped")),
        ("stopped", {"exit_code": 137, "oom": True, "stopped": True}, ("False", "ContainerStopped")),
        ("created", {}, ("False", "ContainerCreated")),
        ("initialized", {}, ("False", "ContainerCreated")),
        # as the upstream V2 driver: a signal end nobody asked for is a runtime restart
        ("exited", {"exit_code": 137}, ("False", "ContainerRuntimeRestart")),
        ("exited", {"exit_code": 143}, ("False", "ContainerRuntimeRestart")),
        ("exited", {"exit_code": 143, "stopped": True}, ("False", "ContainerStopped")),
        # passing states are not failures: Unknown keeps the gateway out of sticky Error
        ("paused", {}, ("Unknown", "ContainerPaused")),
        ("stopping", {}, ("Unknown", "ContainerStopping")),
        ("stopping", {"stopped": True}, ("False", "ContainerStopped")),
        ("removing", {}, ("False", "ContainerRemoving")),
        ("weird", {}, ("Unknown", "Unknown")),
    ],
)
def test_ready_from_state(status: str, kwargs: dict[str, Any], expected: tuple[str, str]) -> None:
    """Each Podman state maps to one Ready status and reason."""
    cond = snapshots.ready_from_state(status, **kwargs)
    assert (cond.status, cond.reason) == expected


def test_exit_code_in_message_and_times_chosen_by_state() -> None:
    """The exit code is reported, and each state carries the timestamp that matches it."""
    started, finished, created = (
        snapshots.timestamp(STARTED),
        snapshots.timestamp(FINISHED),
        snapshots.timestamp(CREATED),
    )
    times = {"started": started, "finished": finished, "created": created}
    exited = snapshots.ready_from_state("exited", exit_code=3, **times)
    assert "3" in exited.message
    assert exited.time == finished
    assert snapshots.ready_from_state("running", **times).time == started
    assert snapshots.ready_from_state("created", **times).time == created


def test_transient_reasons() -> None:
    """Provisioning-like reasons are transient to the gateway; terminal ones are not."""
    transient = [
        snapshots.ready_from_state("created"),
        snapshots.ready_from_state("configured"),
        snapshots.ready_from_state("running", health="starting"),
    ]
    for cond in transient:
        assert cond.status == "False"
        assert cond.reason.lower() in names.TRANSIENT_REASONS, cond.reason
    terminal = [
        snapshots.ready_from_state("exited", exit_code=1),
        snapshots.ready_from_state("exited", stopped=True),
        snapshots.ready_from_state("exited", oom=True),
        snapshots.ready_from_state("exited", exit_code=78),
        snapshots.ready_from_state("running", health="unhealthy"),
        snapshots.ready_from_state("stopping"),  # stopping by itself: it is about to exit
    ]
    for cond in terminal:
        assert cond.reason.lower() not in names.TRANSIENT_REASONS, cond.reason


# ---------------------------------------------------------------- snapshots


def test_from_inspect_running() -> None:
    """Identity comes from labels, the status name from the container name without '/'."""
    snap = snapshots.from_inspect(inspect("running"))
    assert (snap.id, snap.name, snap.workspace) == ("abc123", "demo", "ws")
    assert snap.status.name == NAME
    assert snap.status.instance_id == CID[:12]
    assert snap.status.deleting is False
    cond = ready(snap)
    assert (cond.status, cond.reason) == ("True", "ContainerRunning")
    assert cond.transition_time.seconds == STARTED and cond.transition_time.nanos == 0
    assert [c.type for c in snap.status.conditions] == [names.READY]


def test_from_inspect_health_needs_a_healthcheck() -> None:
    """A health status only counts when the container has a healthcheck configured."""
    assert ready(snapshots.from_inspect(inspect("running"), health="starting")).reason == "ContainerRunning"
    assert (
        ready(snapshots.from_inspect(inspect("running", healthcheck=True), health="starting")).reason
        == "HealthCheckStarting"
    )


def test_from_inspect_oom_and_exit() -> None:
    """Inspect knows about OOM kills and exit codes."""
    assert ready(snapshots.from_inspect(inspect("exited", exit_code=137, oom=True))).reason == "OOMKilled"
    cond = ready(snapshots.from_inspect(inspect("exited", exit_code=3)))
    assert cond.reason == "ContainerExited" and "3" in cond.message
    assert cond.transition_time.seconds == FINISHED


@pytest.mark.parametrize("build", ["inspect", "list"])
def test_suspended_only_when_stopped(build: str) -> None:
    """Suspended=True marks a StopSandbox'd container; an exit on its own is not a suspension."""

    def snap(stopped: bool, status: str = "exited") -> Any:
        if build == "inspect":
            return snapshots.from_inspect(inspect(status), stopped=stopped)
        return snapshots.from_list_entry(list_entry(status), stopped=stopped)

    stopped = snap(True)
    suspended = [c for c in stopped.status.conditions if c.type == names.SUSPENDED]
    assert len(suspended) == 1 and suspended[0].status == "True" and suspended[0].reason == "ContainerStopped"
    assert ready(stopped).reason == "ContainerStopped"
    assert [c.type for c in snap(False).status.conditions] == [names.READY]
    # A container that runs again is not suspended, even if the stop record still names it.
    running = snap(True, "running")
    assert [c.type for c in running.status.conditions] == [names.READY]
    assert ready(running).status == "True"


def test_from_list_entry_running() -> None:
    """The list path yields the same identity fields as inspect."""
    snap = snapshots.from_list_entry(list_entry("running"))
    assert (snap.id, snap.name, snap.workspace) == ("abc123", "demo", "ws")
    assert snap.status.name == NAME
    assert snap.status.instance_id == CID[:12]
    assert (ready(snap).status, ready(snap).reason) == ("True", "ContainerRunning")


def test_list_entry_zero_exit_time_has_no_timestamp() -> None:
    """ExitedAt = Go's zero time as unix seconds must not become a transition time."""
    cond = ready(snapshots.from_list_entry(list_entry("exited", exit_code=1, exited_at=-62135596800)))
    assert cond.reason == "ContainerExited"
    assert not cond.HasField("transition_time")


def test_from_list_entry_tolerates_missing_names_and_labels() -> None:
    """A sparse list entry yields an empty identity rather than an exception."""
    entry = msgspec.json.decode(b'{"Id": "0123456789abcdef", "State": "created"}', type=ContainerListEntry)
    snap = snapshots.from_list_entry(entry)
    assert (snap.id, snap.status.name, snap.status.instance_id) == ("", "", "0123456789ab")
    assert ready(snap).reason == "ContainerCreated"


@pytest.mark.parametrize(
    ("status", "exit_code"),
    [("running", 0), ("exited", 3), ("created", 0)],
)
def test_transition_time_same_for_inspect_and_list(status: str, exit_code: int) -> None:
    """List and Get must report the same transition_time for one container (whole seconds)."""
    a = ready(snapshots.from_inspect(inspect(status, exit_code=exit_code)))
    b = ready(snapshots.from_list_entry(list_entry(status, exit_code=exit_code)))
    assert a.HasField("transition_time")
    assert a.transition_time == b.transition_time
    assert (a.status, a.reason) == (b.status, b.reason)


def test_removing_is_deleting() -> None:
    """A container being removed is reported as deleting on both paths."""
    assert snapshots.from_inspect(inspect("removing")).status.deleting is True
    assert snapshots.from_list_entry(list_entry("removing")).status.deleting is True


def test_pending_snapshot() -> None:
    """A sandbox without a container still carries its identity and the given condition."""
    cond = snapshots.Condition("False", "DependenciesNotReady", "pulling", snapshots.timestamp(STARTED))
    snap = snapshots.pending("abc123", "demo", "ws", NAME, cond, stopped=True)
    assert (snap.id, snap.name, snap.workspace, snap.status.name, snap.status.instance_id) == (
        "abc123",
        "demo",
        "ws",
        NAME,
        "",
    )
    assert [(c.type, c.status) for c in snap.status.conditions] == [(names.READY, "False"), (names.SUSPENDED, "True")]
    assert snap.status.conditions[1].transition_time.seconds == STARTED


def test_list_entry_says_when_an_exit_was_unwatched() -> None:
    """Whether podmand was watching is the observer's verdict (observer.listed_before)."""
    entry = msgspec.json.decode(
        b'{"Id":"c1","Names":["n"],"State":"exited","ExitCode":143,"ExitedAt":1795972800,'
        b'"Labels":{"openshell.ai/sandbox-id":"s"}}',
        type=ContainerListEntry,
    )
    watched = snapshots.from_list_entry(entry)
    told = snapshots.from_list_entry(entry, unwatched=True)
    assert watched.status.conditions[0].reason == told.status.conditions[0].reason == "ContainerRuntimeRestart"
    assert "podmand was not running" not in watched.status.conditions[0].message
    assert "podmand was not running" in told.status.conditions[0].message


@pytest.mark.parametrize("status", ["healthy", "unhealthy", "starting"])
def test_every_health_verdict_podman_lists_is_read_from_the_list(status: str) -> None:
    """libpod's list ``Status`` is the health check log's status (pkg/ps/ps.go:230,305 at
    v6.0.0-rc1): a list-built snapshot reads what an inspect-built one does."""
    assert snapshots.listed_health(status) == status
    assert snapshots.listed_health("Up 5 minutes") == ""


@pytest.mark.parametrize("status", ["reset", "stopped"])
def test_a_listed_reset_or_stopped_is_no_health(status: str) -> None:
    """Podman 5.4.2 lists "reset" for a container whose check is NONE: a list entry cannot say
    whether there is a check, so these no-verdict statuses are read from inspects only."""
    assert snapshots.listed_health(status) == ""
