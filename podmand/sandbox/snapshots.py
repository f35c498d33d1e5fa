"""Mapping Podman's view of a sandbox to contract snapshots (pure functions)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..libpod import ContainerInspect, ContainerListEntry
from ..libpod.times import parse_time, unix_seconds

# Seconds of 0001-01-01 and 9999-12-31T23:59:59: the gateway rejects anything outside.
_MIN_SECONDS = -62135596800
_MAX_SECONDS = 253402300799


# Podman states in which a container marked stopped reads as stopped (Suspended): one
# never started ("created", "configured": a stop during its create) counts as well.
STOPPED_STATES = ("exited", "stopped", "stopping", "created", "configured")


def timestamp(seconds: int, nanos: int = 0) -> Timestamp | None:
    """A canonical Timestamp, or None for Go's zero time and other junk."""
    if seconds <= 0 or not _MIN_SECONDS <= seconds <= _MAX_SECONDS or not 0 <= nanos < 10**9:
        return None
    return Timestamp(seconds=seconds, nanos=nanos)


def time_of(text: str) -> Timestamp | None:
    """A Podman time as a Timestamp of whole seconds: the list endpoint reports only
    seconds, and a condition's transition_time must not differ between List, Get and Watch."""
    when = parse_time(text)
    return None if when is None else timestamp(unix_seconds(when))


@dataclass(frozen=True)
class Condition:
    status: str
    reason: str
    message: str
    time: Timestamp | None = None


def _condition(type_: str, c: Condition) -> pb.DriverCondition:
    out = pb.DriverCondition(type=type_, status=c.status, reason=c.reason, message=c.message)
    if c.time is not None:
        out.transition_time.CopyFrom(c.time)
    return out


RUNTIME_RESTART_CODES = (137, 143)
NOT_STARTED = ("created", "configured", "initialized")  # Podman's states of a container made, never run

# Podman 5.5 and later: a health check cut short because its container was being stopped
# leaves the status "stopped" (libpod/define/healthchecks.go:23-25, healthcheck.go:160-161,
# 387-388 at v6.0.0-rc1). No verdict, so neither passed nor starting: a passing state, as a
# stopping container is (Unknown). Podman sets "starting" again at the next start.
CHECK_STOPPED = Condition("Unknown", "HealthCheckStopped",
                          "Supervisor health check was cut short: its container was being stopped")


def oom_of_this_run(flagged: bool, finished_at: str, exit_code: int, first_flagged_at: str) -> bool:
    """Whether the run that ended at ``finished_at`` was OOM-killed. Podman's ``State.OOMKilled``
    is set when it handles an exit with conmon's oom file, and nothing clears it: a start resets
    the exit code, not the flag (libpod/container_internal.go ``handleExitFile``, ``init``, at
    v4.3.1 and today), so every later end of that container reads as an OOM kill.
    ``first_flagged_at``: the ``FinishedAt`` the flag was first seen with on this container
    (podmand keeps it, :meth:`SandboxFiles.first_oom`; "" when unknown). An end after that one
    is an OOM kill only when its code is a SIGKILL's, which is what the OOM killer sends."""
    if not flagged:
        return False
    if not first_flagged_at or first_flagged_at == finished_at:
        return True
    return exit_code == 137


def exited_condition(exit_code: int, oom: bool, time: Timestamp | None, *, unwatched: bool = False) -> Condition:
    """As the upstream V2 driver: a SIGKILL/SIGTERM end that StopSandbox did not ask
    for is a runtime restart (the gateway keeps a Stopping sandbox in Stopping on
    it). ``unwatched``: the container ended before this podmand was watching it."""
    if oom:
        return Condition("False", "OOMKilled", "Container was killed by the OOM killer", time)
    if exit_code in RUNTIME_RESTART_CODES:
        why = "; podmand was not running: the host or container runtime restarted" if unwatched else ""
        return Condition(
            "False", "ContainerRuntimeRestart", f"Container terminated by signal (exit code {exit_code}){why}", time
        )
    if exit_code == 78:
        return Condition(
            "False",
            "WorkspaceValidationFailed",
            "Supervisor exited with code 78: the workspace is not usable by the sandbox identity",
            time,
        )
    return Condition("False", "ContainerExited", f"Container exited with code {exit_code}", time)


def ready_from_state(
    status: str,
    *,
    exit_code: int = 0,
    oom: bool = False,
    health: str = "",
    stopped: bool = False,
    unwatched: bool = False,
    started: Timestamp | None = None,
    finished: Timestamp | None = None,
    created: Timestamp | None = None,
) -> Condition:
    """The Ready condition for a container state.

    ``health`` is the last probe result ("" when no healthcheck is configured);
    ``stopped`` says StopSandbox stopped this run of the container.
    """
    if status == "running":
        if health in ("", "none"):
            return Condition("True", "ContainerRunning", "Container is running", started)
        if health == "healthy":
            return Condition("True", "HealthCheckPassed", "Supervisor health check passed", started)
        if health == "unhealthy":
            return Condition("False", "HealthCheckFailed", "Supervisor health check failed", started)
        if health == "stopped":
            return Condition(CHECK_STOPPED.status, CHECK_STOPPED.reason, CHECK_STOPPED.message, started)
        return Condition("False", "HealthCheckStarting", "Waiting for the supervisor health check", started)
    if status in ("exited", "stopped"):
        if stopped:
            return Condition("False", "ContainerStopped", "Sandbox was stopped", finished)
        return exited_condition(exit_code, oom, finished, unwatched=unwatched)
    if status in NOT_STARTED:
        return Condition("False", "ContainerCreated", "Container created; starting", created)
    # Paused and stopping are passing states, not failures: status Unknown keeps
    # the gateway in Provisioning instead of a sticky Error.
    if status == "paused":
        return Condition("Unknown", "ContainerPaused", "Container is paused", None)
    if status == "stopping":
        if stopped:
            return Condition("False", "ContainerStopped", "Container is stopping", None)
        return Condition("Unknown", "ContainerStopping", "Container is stopping", None)
    if status == "removing":
        return Condition("False", "ContainerRemoving", "Container is being removed", None)
    return Condition("Unknown", "Unknown", f"Unknown container state: {status}", None)


def resolved_identity(label: str) -> pb.ResolvedWorkloadIdentity | None:
    """The identity podmand resolved at create, from the container's label."""
    try:
        doc = json.loads(label) if label else None
        if not isinstance(doc, dict):
            return None
        return pb.ResolvedWorkloadIdentity(
            uid=doc["uid"],
            gid=doc["gid"],
            supplementary_gids=doc["groups"],
            source=doc["source"],
            resource_digest=doc["digest"],
        )
    except (ValueError, KeyError, TypeError):
        return None


def snapshot(
    labels: dict[str, str],
    *,
    container_name: str,
    container_id: str,
    ready: Condition,
    stopped: bool = False,
    deleting: bool = False,
    fence: pb.DriverFenceEvidence | None = None,
) -> pb.DriverSandbox:
    status = pb.DriverSandboxStatus(
        name=container_name,
        instance_id=container_id[:12],
        deleting=deleting,
        conditions=[_condition(names.READY, ready)],
    )
    identity = resolved_identity(labels.get(names.IDENTITY, ""))
    if identity is not None:
        status.resolved_identity.CopyFrom(identity)
    if fence is not None:
        status.fence_evidence.CopyFrom(fence)
    if stopped:
        status.conditions.append(
            _condition(names.SUSPENDED, Condition("True", "ContainerStopped", "Sandbox was stopped", ready.time))
        )
    return pb.DriverSandbox(
        id=labels.get(names.SANDBOX_ID, ""),
        name=labels.get(names.SANDBOX_NAME, ""),
        workspace=labels.get(names.SANDBOX_WORKSPACE, ""),
        status=status,
    )


def from_inspect(
    info: ContainerInspect,
    *,
    health: str = "",
    oom: bool | None = None,
    stopped: bool = False,
    unwatched: bool = False,
    fence: pb.DriverFenceEvidence | None = None,
) -> pb.DriverSandbox:
    """``unwatched``: the container ended before podmand was watching; ``oom``: whether its
    last run was OOM-killed (:func:`oom_of_this_run`), else Podman's flag as it stands (the
    observer knows both)."""
    state = info.state
    stopped = stopped and state.status in STOPPED_STATES
    ready = ready_from_state(
        state.status,
        exit_code=state.exit_code,
        oom=state.oom_killed if oom is None else oom,
        health=health if info.config.checked else "",
        stopped=stopped,
        unwatched=unwatched,
        started=time_of(state.started_at),
        finished=time_of(state.finished_at),
        created=time_of(info.created),
    )
    return snapshot(
        info.labels,
        container_name=info.name.lstrip("/"),
        container_id=info.id,
        ready=ready,
        stopped=stopped,
        deleting=state.status == "removing",
        fence=fence,
    )


# Health statuses libpod's list reports in ``Status`` (anything else is not one): the
# healthcheck log's (pkg/ps/ps.go:230,305; libpod/healthcheck.go:466-481 at v6.0.0-rc1). Not
# "reset" (5.3 on) nor "stopped" (5.5 on): a list entry does not say whether the container
# has a check at all, and Podman 5.4.2 lists "reset" for one whose check is NONE (measured:
# a running supervisor without a check read HealthCheckStarting). An inspect, which has the
# check, reads both (pairs.fold, ready_from_state).
LISTED_HEALTH = ("healthy", "unhealthy", "starting")


def listed_health(status: str) -> str:
    """The healthcheck status of a list entry's ``Status``; "" when it is none."""
    return status if status in LISTED_HEALTH else ""


def from_list_entry(
    entry: ContainerListEntry,
    *,
    health: str = "",
    oom: bool = False,
    stopped: bool = False,
    unwatched: bool = False,
    fence: pb.DriverFenceEvidence | None = None,
) -> pb.DriverSandbox:
    """``health``, ``oom``, ``unwatched`` and ``fence`` come from the observer: the list
    endpoint has no OOM flag and no configuration (so no fence), exit times in whole
    seconds only, and a health status only in ``Status`` (:func:`listed_health`)."""
    stopped = stopped and entry.state in STOPPED_STATES
    ready = ready_from_state(
        entry.state,
        exit_code=entry.exit_code,
        oom=oom,
        health=health,
        stopped=stopped,
        unwatched=unwatched,
        started=timestamp(entry.started_at),
        finished=timestamp(entry.exited_at),
        created=time_of(entry.created),
    )
    labels = entry.labels or {}
    return snapshot(
        labels,
        container_name=(entry.names or [""])[0],
        container_id=entry.id,
        ready=ready,
        stopped=stopped,
        deleting=entry.state == "removing",
        fence=fence,
    )


def pending(
    sandbox_id: str, name: str, workspace: str, container_name: str, ready: Condition, *, stopped: bool = False
) -> pb.DriverSandbox:
    """A sandbox that has no container yet (provisioning, failed or stopped early)."""
    labels = {names.SANDBOX_ID: sandbox_id, names.SANDBOX_NAME: name, names.SANDBOX_WORKSPACE: workspace}
    return snapshot(labels, container_name=container_name, container_id="", ready=ready, stopped=stopped)


def now() -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(datetime.now(UTC))
    return ts
