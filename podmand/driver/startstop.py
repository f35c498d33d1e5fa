"""StopSandbox and StartSandbox: a sandbox stopped, and started again as a new generation.
Its own module because these transitions work on a sandbox that exists, under its lock,
apart from how it was made (provisioning.py) and how it ends (removal.py).

A stop marks the sandbox stopped (it is reported Suspended, not as an exit), stops
its supervisor and waits for its workload to end. A start admits the workload again
under today's policy and starts the pair again with every per-session file minted from
the request's launch bundle; a running sandbox is restarted when the request starts a
new generation; a retry of either changes nothing. Before its container exists, the
sandbox goes back to provisioning (stopped early, resumed). The driver (core.py) has
checked the request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial

from .. import names
from ..errors import DriverError, FailedPrecondition, NotFound
from ..libpod import ContainerListEntry, PodmanError
from ..locks import LockTable
from ..security import admission, tokens
from . import lookup
from .context import Context
from .index import Index
from .pending import Pending
from .provisioning import Provisioner
from .teardown import retried

log = logging.getLogger("podmand.driver")


class StartStop:
    def __init__(self, ctx: Context, locks: LockTable, index: Index, provisioning: Provisioner) -> None:
        self.ctx = ctx
        self.locks = locks
        self.index = index
        self.provisioning = provisioning
        self.pairs = provisioning.pairs

    async def stop(self, sandbox_id: str) -> None:
        async with self.locks[sandbox_id]:
            # the supervisor first, even when its workload is gone (contract §4.3)
            await self.pairs.stop_supervisor(sandbox_id)
            entry = await self._container_or_pending(sandbox_id)
            if isinstance(entry, Pending):
                made = await self.provisioning.stop_early(entry)
                if made:  # a container Podman made after all: the hub reports it stopped
                    self.ctx.sink.refresh(made, sandbox_id)
                return
            await self._stop_container(sandbox_id, entry)
        self.ctx.sink.refresh(entry.id, sandbox_id)

    async def start(
        self, sandbox_id: str, bundle: tokens.LaunchAuthentication, generation_id: str, expected: str,
        raw: bytes = b"",
    ) -> str:
        """Start a stopped sandbox (idempotent) with the request's launch bundle (``raw``:
        its bytes); the new runtime identity.

        A running sandbox is restarted when the request starts a new generation (a new
        ``generation_id``, or a bundle for another runtime generation). A retry of the
        same transition changes nothing. A sandbox an earlier podmand made as one
        container is refused (FailedPrecondition): no 0.1.x supervisor runs it."""
        identity = self.provisioning.runtime_identity
        async with self.locks[sandbox_id]:
            entry = await self._container_or_pending(sandbox_id)
            if isinstance(entry, Pending):
                _check_expected(expected, entry.instance)
                if raw:  # its pair is made from the newest bundle
                    self.ctx.files.write_launch(sandbox_id, raw)
                await self.provisioning.resume_stopped(entry)  # admission under today's policy
                return identity(sandbox_id, entry.instance)
            instance = (entry.labels or {}).get(names.INSTANCE, "")
            _check_expected(expected, instance)
            wanted = generation_id or bundle.supervisor.runtime_generation
            if (entry.labels or {}).get(names.ISOLATION_ROLE) != names.ROLE_WORKLOAD:
                raise FailedPrecondition(
                    "sandbox_id: made by an earlier podmand as one container, which no 0.1.x supervisor runs; "
                    "delete and recreate it (docs/operations.md)")
            await self._start_pair(sandbox_id, entry, bundle, wanted)
        self.ctx.sink.refresh(entry.id, sandbox_id)
        return identity(sandbox_id, instance)

    async def _start_pair(
        self, sandbox_id: str, entry: ContainerListEntry, bundle: tokens.LaunchAuthentication, generation: str
    ) -> None:
        """StartSandbox of a pair (contract §4.2): nothing when this generation runs already
        (both containers running), else admitted under today's policy and started again with
        every per-session file minted from the new bundle. Reported stopped (Suspended), not
        as an exit, until it runs; still so when the start fails."""
        ctx = self.ctx
        if entry.state == "running" and generation == ctx.files.generation(sandbox_id):
            supervisor = await ctx.podman.inspect_container_or_none(names.supervisor_name(sandbox_id))
            if supervisor is not None and supervisor.state.running:
                ctx.files.clear_stopped(sandbox_id)
                return
        await admission.admit_start(ctx.podman, ctx.settings, str(ctx.state_dir), entry.id, entry.labels or {})
        ctx.files.mark_stopped(sandbox_id, entry.id)
        await self.pairs.start(sandbox_id, lookup.entry_name(entry), bundle, generation)
        ctx.files.set_generation(sandbox_id, generation)
        ctx.files.clear_stopped(sandbox_id)

    async def _container_or_pending(self, sandbox_id: str) -> ContainerListEntry | Pending:
        """The sandbox's container, or else its create still being provisioned; NotFound
        when it has neither."""
        entry = await lookup.find_indexed(self.ctx.podman, self.index, sandbox_id)
        if entry is not None:
            return entry
        pending = self.provisioning.get(sandbox_id)
        if pending is None:
            raise NotFound("sandbox not found")
        return pending

    async def _stop_container(self, sandbox_id: str, entry: ContainerListEntry) -> None:
        """Stop the sandbox's container and wait for it; reported as stopped (Suspended), not as an exit."""
        self.ctx.files.mark_stopped(sandbox_id, entry.id)
        try:
            if entry.state == "paused":
                await self.ctx.podman.unpause_container(entry.id)
            if entry.state not in ("exited", "stopped", "created", "configured"):
                stop = partial(self.ctx.podman.stop_container, entry.id, self.ctx.settings.stop_timeout)
                try:
                    await retried(sandbox_id, "stopping", stop)
                except PodmanError as exc:
                    if not exc.gone:
                        raise
            await self._wait_stopped(entry.id)
        except BaseException:
            self.ctx.files.clear_stopped(sandbox_id)
            raise

    async def _wait_stopped(self, container_id: str) -> None:
        deadline = time.monotonic() + self.ctx.settings.stop_timeout + 5
        while True:
            info = await self.ctx.podman.inspect_container_or_none(container_id)
            if info is None or info.state.status in ("exited", "stopped", "created", "configured"):
                return  # gone meanwhile (removed out of band): ended all the same; the hub reports it
            if time.monotonic() > deadline:
                raise DriverError(f"container {container_id[:12]} did not stop in time (state {info.state.status})")
            await asyncio.sleep(0.05)


def _check_expected(expected: str, instance: str) -> None:
    if expected and names.stable_identity(expected) != names.stable_identity(names.runtime_identity(instance, "")):
        raise FailedPrecondition(
            "expected_runtime_identity: the sandbox's container was replaced out of band; recreate the sandbox"
        )
