"""Which containers each sandbox has: lookups without asking Podman to filter every container.

Podman's label filter reads every container (O(N) per lookup, O(N²) to delete N
sandboxes).  The hub keeps this index from what it already learns: one list
each time it connects to Podman's event stream and at each resync, and an
inspect per state change.  The driver's own creates and deletes update it too.
It is a cache, never the truth: every hit is followed by an inspect of that
container (which says whether it still exists), and a miss falls back to the
label-filtered list.  Only once a list after the latest (re)connection has
been learnt is it ``ready``: complete enough to count a network's members.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .. import names
from ..libpod import ContainerInspect, ContainerListEntry, times

GONE_KEPT = 4096  # removed container IDs remembered (far more than looks in flight)

# What the list endpoint shows of a run: status, exit code, start and end (whole seconds).
Run = tuple[str, int, int, int]


@dataclass(frozen=True)
class Known:
    """What the index keeps of one container."""

    container_id: str
    sandbox_id: str
    workspace: str
    run: Run | None  # as the hub last observed it (None: only listed so far)

    @property
    def state(self) -> str:
        return self.run[0] if self.run is not None else ""


def listed_run(entry: ContainerListEntry) -> Run:
    return entry.state, entry.exit_code, max(0, entry.started_at), max(0, entry.exited_at)


def inspected_run(info: ContainerInspect) -> Run:
    started, finished = times.epoch(info.state.started_at), times.epoch(info.state.finished_at)
    return (
        info.state.status,
        info.state.exit_code,
        max(0, int(started)) if started is not None else 0,
        max(0, int(finished)) if finished is not None else 0,
    )


def known_from_list(entry: ContainerListEntry) -> Known | None:
    labels = entry.labels or {}
    sandbox_id = names.sandbox_of((entry.names or [""])[0], labels)
    if not sandbox_id:
        return None
    return Known(entry.id, sandbox_id, labels.get(names.SANDBOX_WORKSPACE, ""), None)


def known_from_inspect(info: ContainerInspect) -> Known | None:
    sandbox_id = names.sandbox_of(info.name, info.labels)
    if not sandbox_id:
        return None
    return Known(info.id, sandbox_id, info.labels.get(names.SANDBOX_WORKSPACE, ""), inspected_run(info))


class Index:
    def __init__(self) -> None:
        self._containers: dict[str, Known] = {}  # container ID -> what is known of it
        self._of_sandbox: dict[str, set[str]] = {}  # sandbox ID -> its container IDs
        # Containers found or made gone, newest last: a look that inspected one just
        # before its removal must not put it back (container IDs are never reused).
        self._gone: dict[str, None] = {}
        self.ready = False

    # ------------------------------------------------------------ the hub's side

    def learn(self, entries: Iterable[ContainerListEntry]) -> None:
        """Learn the containers of a list that are not known yet.  A list changes no
        entry (the state kept is the one the hub last observed, so that a resync can
        tell what it missed) and removes none: a container missing from it may have
        been made since, so only an inspect that finds it gone (:meth:`drop`) does."""
        for entry in entries:
            known = known_from_list(entry)
            if known is not None and known.container_id not in self._containers:
                self.put(known)

    def loaded(self) -> None:
        """Every container was listed since the event stream connected: a miss now means none."""
        self.ready = True

    def unload(self) -> None:
        """The event stream was lost: changes may go unseen until the next list."""
        self.ready = False

    def put(self, known: Known) -> None:
        if known.container_id in self._gone:
            return
        self._unlink(known.container_id)
        self._containers[known.container_id] = known
        self._of_sandbox.setdefault(known.sandbox_id, set()).add(known.container_id)

    def drop(self, container_id: str) -> None:
        """The container is gone for good."""
        if container_id:
            self._gone[container_id] = None
            if len(self._gone) > GONE_KEPT:
                del self._gone[next(iter(self._gone))]
        self._unlink(container_id)

    def _unlink(self, container_id: str) -> None:
        known = self._containers.pop(container_id, None)
        if known is None:
            return
        ids = self._of_sandbox.get(known.sandbox_id)
        if ids is not None:
            ids.discard(container_id)
            if not ids:
                del self._of_sandbox[known.sandbox_id]

    # ------------------------------------------------------------ the driver's side

    def containers(self, sandbox_id: str) -> list[str] | None:
        """The sandbox's container IDs (each to be checked by an inspect); None when
        the index knows none (then list: it may have been made a moment ago)."""
        ids = self._of_sandbox.get(sandbox_id)
        return sorted(ids) if ids else None

    def get(self, container_id: str) -> Known | None:
        return self._containers.get(container_id)

    def states(self) -> dict[str, str]:
        """Container ID -> Podman status when last observed."""
        return {cid: k.state for cid, k in self._containers.items()}

    def changed(self, entry: ContainerListEntry) -> bool:
        """Whether a list shows a run of the container other than the one last observed."""
        known = self._containers.get(entry.id)
        return known is None or known.run != listed_run(entry)

    def members(self, network_of: Callable[[str], str], network: str) -> int | None:
        """How many sandboxes the index knows on ``network`` (``network_of`` maps a
        workspace to its network); None when it cannot say."""
        if not self.ready:
            return None
        return len({k.sandbox_id for k in self._containers.values() if network_of(k.workspace) == network})

    def __len__(self) -> int:
        return len(self._containers)
