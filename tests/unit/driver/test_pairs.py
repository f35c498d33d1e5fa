"""Unit tests for podmand.driver.pairs's fold: what a split sandbox's supervisor makes of its
workload's Ready, from an inspect (GetSandbox, the event path) and from a list entry
(ListSandboxes, a watch stream's first snapshot): the same verdicts either way."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.driver import pairs
from podmand.libpod import ContainerInspect, ContainerListEntry

GONE = pairs.SUPERVISOR_GONE


def inspect(status: str, *, health: str = "", checked: bool = False, code: int = 0) -> ContainerInspect:
    doc: dict[str, Any] = {
        "Id": "c" * 64, "Name": "x", "Created": "", "Image": "",
        "State": {"Status": status, "Running": status == "running", "ExitCode": code,
                  **({"Health": {"Status": health}} if health else {})},
        "Config": {"Labels": {names.INSTANCE: "i1"}, **({"Healthcheck": {"Test": ["CMD", "x"]}} if checked else {})},
    }
    return msgspec.convert(doc, ContainerInspect)


def entry(state: str, *, status: str = "", code: int = 0, instance: str = "i1") -> ContainerListEntry:
    """``status``: libpod's list field, which holds a container's health status (snapshots.listed_health)."""
    return ContainerListEntry(id="c" * 64, names=["x"], state=state, status=status, exit_code=code,
                              labels={names.INSTANCE: instance})


@pytest.mark.parametrize(("supervisor", "listed", "expected"), [
    (inspect("running"), entry("running"), None),
    (inspect("running", health="healthy", checked=True), entry("running", status="healthy"),
     ("True", "HealthCheckPassed")),
    (inspect("running", health="unhealthy", checked=True), entry("running", status="unhealthy"),
     ("False", "HealthCheckFailed")),
    (inspect("running", health="starting", checked=True), entry("running", status="starting"),
     ("False", "HealthCheckStarting")),
    (inspect("created"), entry("created"), ("False", "HealthCheckStarting")),
    (inspect("exited", code=137), entry("exited", code=137), ("False", GONE)),
    (None, None, ("False", GONE)),
], ids=["running", "healthy", "unhealthy", "starting", "created", "exited", "missing"])
def test_a_running_workload_takes_its_supervisors_state(
        supervisor: ContainerInspect | None, listed: ContainerListEntry | None, expected: tuple[str, str] | None
) -> None:
    inspected = pairs.fold(inspect("running"), supervisor)
    from_list = pairs.fold_listed(entry("running"), listed)
    assert (inspected[:2] if inspected else None) == expected
    assert (from_list[:2] if from_list else None) == expected
    if expected is not None and expected[1] == GONE and supervisor is not None:
        assert inspected is not None and "has exited (exit code 137)" in inspected[2]


@pytest.mark.parametrize(("health", "expected"), [("reset", ("False", "HealthCheckStarting")),
                                                ("stopped", ("Unknown", "HealthCheckStopped"))])
def test_reset_and_stopped_are_read_from_an_inspect_never_from_a_list(health: str, expected: tuple[str, str]) -> None:
    """An inspect shows the check (5.3's reset, 5.5's stopped mean no verdict); a list entry does
    not, and Podman 5.4.2 lists "reset" for a container whose check is NONE: from a list, a
    running supervisor stays ContainerRunning (the look's inspect refines it)."""
    folded = pairs.fold(inspect("running"), inspect("running", health=health, checked=True))
    assert folded is not None and folded[:2] == expected
    assert pairs.fold_listed(entry("running"), entry("running", status=health)) is None


def test_a_check_of_none_is_no_check() -> None:
    unchecked = inspect("running", health="reset")
    unchecked.config.healthcheck = msgspec.convert({"Test": ["NONE"]}, type(inspect("running", checked=True)
                                                                               .config.healthcheck))
    assert pairs.fold(inspect("running"), unchecked) is None


def test_an_ended_workload_is_its_own_and_another_instances_supervisor_is_none() -> None:
    assert pairs.fold(inspect("exited", code=3), None) is None
    assert pairs.fold_listed(entry("exited", code=3), None) is None
    # a supervisor left by another create under this sandbox's id is not this workload's
    assert pairs.fold_listed(entry("running"), entry("running", instance="other"))[1] == GONE  # type: ignore[index]


def test_a_stopped_supervisor_is_said_to_have_exited() -> None:
    """Podman 4.3.1 and 6.1.1 also call an ended container ``stopped``: the same words."""
    for status in ("exited", "stopped"):
        assert pairs._fold(True, (status, "", 2)) == (
            "False", GONE, "The sandbox's supervisor container has exited (exit code 2)")
    assert pairs._fold(True, ("paused", "", 0)) == (
        "False", GONE, "The sandbox's supervisor container is paused (exit code 0)")


@pytest.mark.parametrize(("workload", "supervisor", "odds"), [
    (entry("running"), entry("running"), False),
    (entry("running"), entry("created"), True),  # a start cut short (in flight, it is hands off): the look starts it
    (entry("running"), entry("exited", code=137), True),  # its end's event missed: a resync's look stops the workload
    (entry("running"), None, True),  # removed out of band
    (entry("running"), entry("running", instance="other"), True),  # another create's, not this workload's
    (entry("exited"), entry("running"), True),  # a supervisor outliving its workload is stopped too
    (entry("stopped"), entry("running"), True),
    (entry("created"), entry("running"), False),  # made, its start next
    (entry("exited"), entry("exited"), False),  # a stopped pair
    (entry("exited"), None, False),
], ids=["both-running", "supervisor-starting", "supervisor-exited", "supervisor-missing", "other-instance",
        "workload-exited", "workload-stopped", "workload-created", "both-ended", "ended-alone"])
def test_a_resync_finds_a_pair_whose_halves_are_at_odds(
        workload: ContainerListEntry, supervisor: ContainerListEntry | None, odds: bool) -> None:
    assert pairs.at_odds(workload, supervisor) is odds



@pytest.mark.parametrize(("reason", "status", "after"), [
    ("SupervisorExited", "False", "ContainerStarting"),  # a leftover whose supervisor was cleared first
    ("ContainerRuntimeRestart", "False", "ContainerStarting"),  # a leftover workload force-removed
    ("ContainerStopping", "Unknown", "ContainerStarting"),
    ("HealthCheckStarting", "False", "HealthCheckStarting"),  # transient already
    ("ContainerRunning", "True", "ContainerRunning"),
])
def test_while_its_create_is_unfinished_no_leftover_says_the_sandbox_ended(reason: str, status: str,
                                                                          after: str) -> None:
    """A restarted podmand's resume clears what the killed one left and makes the pair again: a
    read meanwhile says it is starting, never a terminal reason a gateway would act on."""
    snap = pb.DriverSandbox(id="sb-1", status=pb.DriverSandboxStatus(
        conditions=[pb.DriverCondition(type="Ready", status=status, reason=reason, message="m")]))
    pairs.unfinished(snap, making=False)
    assert snap.status.conditions[0].reason == reason  # a finished create's pair says what it is
    pairs.unfinished(snap, making=True)
    assert snap.status.conditions[0].reason == after
    assert snap.status.conditions[0].reason.lower() in names.TRANSIENT_REASONS or status == "True"
