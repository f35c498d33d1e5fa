"""What podmand knows of each sandbox container, and every way it learns that one ended.

Two ways to look at a container.  :meth:`Observer.read` (GetSandbox) only reads:
inspect plus the facts cached so far.  :meth:`Observer.observe` is the event
path (the hub's Podman events, refreshes, its lists): it caches what inspect
knows and the list endpoint does not (the fence evidence on disk too, so that a
restarted podmand's list-built first snapshots carry it), keeps the index of
sandbox containers, and announces each abnormal end once.

Exit detection is all here, and none of it polls Podman.  Podman's event stream
says ``died`` (the hub observes it); on the same host conmon's exit files say so
about a quarter of a second earlier (exitfiles.py), and an inspect then already
reads the exit.  ``exit_watch = "wait"`` adds Podman's ``/wait`` per running
container, for hosts whose event stream cannot be trusted: Podman 4.x answers
each by polling the container every 250 ms.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..config import Settings
from ..libpod import (
    ContainerInspect,
    ContainerListEntry,
    Event,
    PodmanClient,
    PodmanError,
    PodmanUnavailable,
    PodmanUnreadable,
    times,
)
from ..sandbox import snapshots
from ..sandbox.files import SandboxFiles, StateDirUnwritable
from ..security import fence
from . import exitfiles, pairs
from .events import EventSink, platform_event
from .exitmarker import ExitMarkers
from .index import Index, known_from_inspect
from .tasks import Tasks

log = logging.getLogger("podmand.driver")

# libpod says "died" for a natural exit ("die" only on the Docker-compat API).
STATE_ACTIONS = frozenset(
    {
        "create",
        "init",
        "start",
        "restart",
        "died",
        "die",
        "cleanup",
        "kill",
        "stop",
        "pause",
        "unpause",
        "health_status",
        "remove",
        "oom",
    }
)

# Ready reasons of a run that ended without StopSandbox asking: each is announced once.
ABNORMAL_ENDS = frozenset({"OOMKilled", "ContainerRuntimeRestart", "ContainerExited", "WorkspaceValidationFailed"})


def changes_state(event: Event) -> bool:
    """Whether a Podman event may change what a podmand sandbox's snapshot says."""
    attrs = event.Actor.attributes or {}
    return event.Action in STATE_ACTIONS and bool(names.sandbox_of(attrs.get("name", ""), attrs))


def supervisor_change(event: Event) -> str:
    """The sandbox whose supervisor container this event changed (its workload's snapshot
    folds the supervisor in: contract §4.6), else ""."""
    attrs = event.Actor.attributes or {}
    return names.supervisor_of(attrs.get("name", ""), attrs) if event.Action in STATE_ACTIONS else ""


def ended_before(finished_at: str, since: float) -> bool:
    """Whether Podman's ``FinishedAt`` (sub-second precision kept) lies before ``since``."""
    seconds = times.epoch(finished_at)
    return seconds is not None and seconds >= 1 and seconds < since


def listed_before(exited_at: int, since: float) -> bool:
    """The list endpoint's guess (whole seconds): only an exit in an earlier second
    is known to lie before ``since``; an inspect's verdict, once cached, wins."""
    return 0 < exited_at < int(since)


@dataclass(frozen=True)
class Facts:
    """What one inspect of a container said that the list endpoint does not."""

    health: str
    oom: bool
    unwatched: bool  # it ended before this podmand was watching
    fence: pb.DriverFenceEvidence
    announced: str = ""  # FinishedAt of the last end announced


# Tries at finding Podman's exit directory before podmand gives up on it (another PID namespace).
EXIT_DIR_TRIES = 8


class Observer:
    def __init__(
        self,
        podman: PodmanClient,
        settings: Settings,
        files: SandboxFiles,
        sink: EventSink,
        tasks: Tasks,
        index: Index,
        busy: Callable[[str], bool] = lambda sandbox_id: False,
    ) -> None:
        self.podman = podman
        self.busy = busy  # whether to leave the sandbox's pair as it is (core.Driver._hands_off)
        self.settings = settings
        self.files = files
        self.sink = sink
        self.tasks = tasks
        self.index = index
        # Exits before this moment happened while no podmand was watching.
        self.watching_since = time.time()
        self._facts: dict[str, Facts] = {}  # per container ID
        self.markers = ExitMarkers(podman)  # an exited workload's early-SIGTERM line (contract §4.6)
        self.exit_files: exitfiles.ExitWatch | None = None
        self._exit_dir_tries = 0

    # ------------------------------------------------------------ reading (no side effects)

    async def read(self, container_id: str) -> pb.DriverSandbox | None:
        """A fresh snapshot of one container, or None when it is gone."""
        info = await self.podman.inspect_container_or_none(container_id)
        if info is None:
            return None
        snap = self._snapshot(info, self._facts_of(info))
        await self._fold(info, snap)
        return snap

    async def _fold(
        self, info: ContainerInspect, snap: pb.DriverSandbox, *, observing: bool = False
    ) -> tuple[str, str, str] | None:
        """A split sandbox's workload: its supervisor's state folded into the Ready condition
        (pairs.fold); what it said, if anything. ``observing`` (the event path): run a running
        supervisor's health check as for any container (:meth:`_probe`), reporting the
        workload, and stop a supervisor whose workload ended (no supervisor runs without it)."""
        if info.labels.get(names.ISOLATION_ROLE) != names.ROLE_WORKLOAD:
            return None
        await self.markers.annotate(info, snap)
        supervisor = await pairs.supervisor_of(self.podman, info)
        folded = pairs.fold(info, supervisor)
        pairs.fold_into(snap, folded)
        sandbox_id = info.labels.get(names.SANDBOX_ID, "")
        pairs.unfinished(snap, self.files.making(sandbox_id))
        if (observing and supervisor is not None and supervisor.state.status == "created" and info.state.running
                and not self.busy(sandbox_id)):  # a start cut short between the two (a podmand killed there)
            self.tasks.ensure(("finish", supervisor.id),
                              lambda: pairs.finish_start(self.podman, self.sink, supervisor.id, sandbox_id, info.id))
        if not observing or supervisor is None or not supervisor.state.running:
            return folded
        if self.settings.health_check_interval and supervisor.config.checked:
            self.tasks.ensure(("probe", supervisor.id), lambda: self._probe(supervisor.id, sandbox_id, report=info.id))
        if not info.state.running and info.state.status != "created" and not self.busy(sandbox_id):
            why = f"its workload is {info.state.status}"
            self.tasks.ensure(("orphan", supervisor.id),
                              lambda: self._stop_orphan(supervisor.id, sandbox_id, why, workload=False))
        return folded

    def from_list(
        self, entry: ContainerListEntry, sandbox_id: str, supervisors: Mapping[str, ContainerListEntry] | None = None
    ) -> pb.DriverSandbox:
        """A snapshot from a list entry and what earlier inspects cached. A container not
        inspected by this podmand yet (just after a restart) has its health from the list's
        ``Status``, its fence evidence as kept on disk when last observed, and no OOM flag:
        an OOM-killed one reads as the exit (code) it was until an inspect says otherwise."""
        facts = self._facts.get(entry.id)
        snap = snapshots.from_list_entry(
            entry,
            health=facts.health if facts else snapshots.listed_health(entry.status),
            oom=facts.oom if facts else False,
            stopped=self._stopped(sandbox_id, entry.id),
            unwatched=facts.unwatched if facts else listed_before(entry.exited_at, self.watching_since),
            fence=facts.fence if facts else self._kept_fence(sandbox_id, entry.id),
        )
        # a split sandbox's supervisor, as the same list shows it (``supervisors``: by sandbox id)
        if supervisors is not None and (entry.labels or {}).get(names.ISOLATION_ROLE) == names.ROLE_WORKLOAD:
            pairs.fold_into(snap, pairs.fold_listed(entry, supervisors.get(sandbox_id)))
            pairs.unfinished(snap, self.files.making(sandbox_id))
        return snap

    def _kept_fence(self, sandbox_id: str, container_id: str) -> pb.DriverFenceEvidence | None:
        """The fence evidence kept for this very container and the sandbox's generation, if any."""
        data = self.files.kept_fence(sandbox_id)
        if not data:
            return None
        try:
            kept = pb.DriverFenceEvidence.FromString(data)
        except DecodeError:
            return None
        if kept.resource_claims.get("podman.container_id") != container_id:
            return None
        return kept if kept.generation == self.files.generation(sandbox_id) else None

    def _keep_fence(self, sandbox_id: str, evidence: pb.DriverFenceEvidence) -> None:
        """Kept on disk for the next podmand's first snapshot; written only when it changed."""
        data = evidence.SerializeToString(deterministic=True)
        if self.files.kept_fence(sandbox_id) == data:
            return
        try:
            self.files.keep_fence(sandbox_id, data)
        except (StateDirUnwritable, ValueError) as exc:  # a cache: the next inspect tells it anyway
            log.debug("sandbox %s: fence evidence not kept: %s", sandbox_id, exc)

    def _facts_of(self, info: ContainerInspect, *, observing: bool = False) -> Facts:
        sandbox_id = info.labels.get(names.SANDBOX_ID, "")
        state = info.state
        return Facts(
            health=state.health.status if state.health else "",
            oom=snapshots.oom_of_this_run(state.oom_killed, state.finished_at, state.exit_code,
                                          self._first_oom(sandbox_id, info, keep=observing)),
            unwatched=ended_before(state.finished_at, self.watching_since),
            fence=fence.evidence(fence.facts(info), self.files.generation(sandbox_id)),
        )

    def _first_oom(self, sandbox_id: str, info: ContainerInspect, *, keep: bool) -> str:
        """When Podman's sticky OOM flag was first seen on this container; ``keep`` (the event
        path) records this look's when none is. Unwritable, the flag is taken as it stands."""
        if not info.state.oom_killed:
            return ""
        try:
            return self.files.first_oom(sandbox_id, info.id, info.state.finished_at if keep else "")
        except (StateDirUnwritable, ValueError) as exc:
            log.debug("sandbox %s: OOM flag's first end not kept: %s", sandbox_id, exc)
            return ""

    def _snapshot(self, info: ContainerInspect, facts: Facts) -> pb.DriverSandbox:
        sandbox_id = info.labels.get(names.SANDBOX_ID, "")
        return snapshots.from_inspect(
            info,
            health=facts.health,
            oom=facts.oom,
            stopped=self._stopped(sandbox_id, info.id),
            unwatched=facts.unwatched,
            fence=facts.fence,
        )

    def _stopped(self, sandbox_id: str, container_id: str) -> bool:
        return self.files.stopped_container(sandbox_id) == container_id

    # ------------------------------------------------------------ observing (the event path)

    async def observe(self, container_id: str) -> pb.DriverSandbox | None:
        """Like :meth:`read`, and remember the facts, watch a running container
        for its end, and announce an abnormal end once."""
        info = await self.podman.inspect_container_or_none(container_id)
        if info is None:  # the index keeps it: forgetting the sandbox is the driver's call
            self._facts.pop(container_id, None)
            self.markers.drop(container_id)
            return None
        sandbox_id = info.labels.get(names.SANDBOX_ID, "")
        known = known_from_inspect(info)
        if known is not None:
            self.index.put(known)
        before = self._facts.get(info.id)
        facts = self._facts[info.id] = dataclasses.replace(
            self._facts_of(info, observing=True), announced=before.announced if before else ""
        )
        if known is not None and (before is None or before.fence != facts.fence):
            self._keep_fence(sandbox_id, facts.fence)
        if info.state.running:
            self._watch_exit_files(info)
            if self.settings.exit_watch == "wait":
                self.tasks.ensure(("exit", info.id), lambda: self._wait_exit(info.id, sandbox_id))
            if self.settings.health_check_interval and info.config.checked:
                self.tasks.ensure(("probe", info.id), lambda: self._probe(info.id, sandbox_id))
        snap = self._snapshot(info, facts)
        folded = await self._fold(info, snap, observing=True)
        if folded is not None and folded[1] == pairs.SUPERVISOR_GONE and not self.busy(sandbox_id):
            self.tasks.ensure(("orphan", info.id),
                              lambda: self._stop_orphan(info.id, sandbox_id, folded[2], workload=True))
        self._announce_exit(sandbox_id, info, snap)
        return snap

    async def _stop_orphan(self, container_id: str, sandbox_id: str, why: str, *, workload: bool) -> None:
        """No workload runs without its supervisor (contract §4.6): stopped at once, and the
        watch stream is told why (the exit that follows is reported as ever); nor a supervisor
        without its workload (``workload`` false: the supervisor's, stopped as a stop would)."""
        if workload:
            log.warning("sandbox %s: %s; stopping its workload", sandbox_id, why)
            self.sink.publish(platform_event(sandbox_id, pairs.SUPERVISOR_GONE, f"{why}; the workload is stopped",
                                             warning=True))
        else:
            log.info("sandbox %s: %s; stopping its supervisor", sandbox_id, why)
        try:
            await self.podman.stop_container(container_id, 0 if workload else self.settings.stop_timeout)
        except (PodmanError, PodmanUnavailable) as exc:
            log.warning("sandbox %s: could not stop %s: %s", sandbox_id, container_id[:12], exc)
        if workload:
            self.sink.refresh(container_id, sandbox_id)

    def drop(self, container_id: str) -> None:
        """Forget a container that no longer exists."""
        self._facts.pop(container_id, None)
        self.markers.drop(container_id)
        self.index.drop(container_id)

    def _watch_exit_files(self, info: ContainerInspect) -> None:
        """Start the exit-file watch, from the first running container whose conmon
        podmand can see (a few tries, then exits come from Podman's events alone)."""
        if self.exit_files is not None or self._exit_dir_tries >= EXIT_DIR_TRIES:
            return
        self._exit_dir_tries += 1
        directory = exitfiles.exit_dir_of(info.state.conmon_pid, info.id)
        if directory is None:
            if self._exit_dir_tries == EXIT_DIR_TRIES:
                log.info("conmon's exit files are out of sight (another PID namespace?); exits come from events")
            return
        watch = exitfiles.ExitWatch(directory, self._exited, self._missed_exits)
        if watch.start():
            self.exit_files = watch
        else:
            self._exit_dir_tries = EXIT_DIR_TRIES

    def _exited(self, container_id: str) -> None:
        known = self.index.get(container_id)
        if known is not None:  # another container of this Podman: none of podmand's business
            self.sink.refresh(container_id, known.sandbox_id)

    def _missed_exits(self) -> None:
        """The exit-file queue overflowed: look again at every container last seen running."""
        for container_id, state in self.index.states().items():
            if state == "running":
                self._exited(container_id)

    def close(self) -> None:
        if self.exit_files is not None:
            self.exit_files.close()
            self.exit_files = None

    def __len__(self) -> int:
        return len(self._facts)

    def _announce_exit(self, sandbox_id: str, info: ContainerInspect, snap: pb.DriverSandbox) -> None:
        """One platform event per abnormal end of a container run (OOM, runtime restart, exit)."""
        cond = snap.status.conditions[0]
        facts = self._facts.get(info.id)  # dropped meanwhile (a split sandbox's look awaits its supervisor)
        if facts is None or cond.reason not in ABNORMAL_ENDS or facts.announced == info.state.finished_at:
            return
        self._facts[info.id] = dataclasses.replace(facts, announced=info.state.finished_at)
        self.sink.publish(platform_event(sandbox_id, cond.reason, cond.message, warning=True))

    async def _wait_exit(self, container_id: str, sandbox_id: str) -> None:
        """Podman's /wait answers as soon as Podman knows a container stopped."""
        try:
            await self.podman.wait_container(container_id)
        except (PodmanError, PodmanUnavailable):
            return  # gone, or Podman away: the hub's resubscription covers it
        except PodmanUnreadable as exc:  # it answered: something changed; inspect says what
            log.warning("container %s: unreadable /wait answer (%s)", container_id[:12], exc)
        self.sink.refresh(container_id, sandbox_id)

    async def _probe(self, container_id: str, sandbox_id: str, report: str = "") -> None:
        """Run the container's healthcheck ourselves: no systemd timers here. Each change is
        a look at ``report`` (a pair's workload, for its supervisor), else the container."""
        facts = self._facts.get(container_id)
        last = facts.health if facts else ""
        while True:
            try:
                status = await self.podman.healthcheck(container_id)
            except PodmanError as exc:  # 409: stopped (or no check); gone: the hub reports either
                if exc.gone or exc.status == 409:
                    return
                status = "unknown"  # the check could not run this once (a 500 under load): probe again
                log.debug("container %s: healthcheck failed: %s", container_id[:12], exc)
            except PodmanUnavailable:
                return  # the hub's resubscription looks again, and so probes again
            except PodmanUnreadable as exc:
                log.warning("container %s: unreadable healthcheck answer; probing ends (%s)", container_id[:12], exc)
                return
            if status != last and status != "unknown":
                last = status
                self.sink.refresh(report or container_id, sandbox_id)
            await asyncio.sleep(self.settings.health_check_interval if status == "healthy" else 1.0)

