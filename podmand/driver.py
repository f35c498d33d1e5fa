"""Sandbox lifecycle on Podman: what each RPC does, independent of gRPC.

State lives in Podman.  A create request is recorded durably as the labels of
the sandbox's workspace volume before anything slow happens; pulling, creating
and starting then continue in the background and are reported on the watch
stream.  After a restart, ``resume`` finishes what the volumes say was asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import (
    admission,
    cdi,
    fence,
    identity,
    imagefiles,
    names,
    proxy,
    registryauth,
    rootfs,
    selinux,
    snapshots,
    tokens,
)
from ._proto import compute_driver_pb2 as pb
from .config import Settings
from .credentials import BadCredential, CredentialSigner
from .errors import AlreadyExists, DriverError, FailedPrecondition, InvalidArgument, NotFound, Unauthenticated
from .files import SandboxFiles
from .identity import Resolved
from .imagefiles import READER_PREFIX, read_image_files
from .libpod import (
    ContainerInspect,
    ContainerListEntry,
    IDMappings,
    ImageInspect,
    PodmanClient,
    PodmanError,
    PodmanUnavailable,
)
from .locks import Hold, LockTable
from .pullprogress import HEARTBEAT as PULL_HEARTBEAT
from .pullprogress import REASON as PULLING
from .pullprogress import Inactivity, PullProgress, PullStalled
from .snapshots import Condition
from .spec import (
    Plan,
    Provision,
    check_name,
    container_spec,
    decode_intent,
    filtered_user_env,
    gateway_token,
    intent_labels,
    userns_id_limit,
    validate,
)
from .supervisor import SupervisorCache

log = logging.getLogger("podmand.driver")

Publish = Callable[[pb.WatchSandboxesEvent], None]


# The stop marker of a sandbox stopped before it had a container.
STOPPED_EARLY = "-"
STOPPED_EARLY_MESSAGE = "Sandbox was stopped before its container started"
ROOTFS_FAILED = "RootfsImportFailed"


class ProvisionFailed(Exception):
    """A terminal provisioning failure, shown as Ready=False with this reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class Pending:
    """A sandbox with no container yet: provisioning, failed, or stopped early."""

    plan: Plan
    instance: str
    ready: Condition
    stopped: bool = False
    task: asyncio.Task[None] | None = None

    def snapshot(self) -> pb.DriverSandbox:
        p = self.plan
        return snapshots.pending(p.sandbox_id, p.name, p.workspace, p.container_name, self.ready, stopped=self.stopped)


def platform_event(
    sandbox_id: str, reason: str, message: str, *, warning: bool = False, metadata: dict[str, str] | None = None
) -> pb.WatchSandboxesEvent:
    event = pb.DriverPlatformEvent(
        source="podman",
        type="Warning" if warning else "Normal",
        reason=reason,
        message=message,
        metadata=metadata or {},
    )
    event.event_time.CopyFrom(snapshots.now())
    return pb.WatchSandboxesEvent(platform_event=pb.WatchSandboxesPlatformEvent(sandbox_id=sandbox_id, event=event))


def sandbox_event(sandbox: pb.DriverSandbox) -> pb.WatchSandboxesEvent:
    return pb.WatchSandboxesEvent(sandbox=pb.WatchSandboxesSandboxEvent(sandbox=sandbox))


def deleted_event(sandbox_id: str) -> pb.WatchSandboxesEvent:
    return pb.WatchSandboxesEvent(deleted=pb.WatchSandboxesDeletedEvent(sandbox_id=sandbox_id))


def supervisor_pull_policy(image: str) -> str:
    """Mutable tags are refreshed ('newer'); pinned ones only pulled when missing."""
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "missing"
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "newer" if tag in ("", "latest", "dev") else "missing"


class Driver:
    def __init__(self, settings: Settings, podman: PodmanClient, state_dir: Path) -> None:
        self.settings = settings
        self.podman = podman
        self.state_dir = state_dir
        self.files = SandboxFiles(state_dir)
        self.supervisor = SupervisorCache(podman, state_dir)
        self.signer = CredentialSigner(state_dir / "credential.key")
        self.publish: Publish = lambda event: None
        self.refresh: Callable[[str, str], None] = lambda container_id, sandbox_id: None
        self._locks = LockTable()  # per sandbox id (and "net:<network>"), pruned when unused
        self._pending: dict[str, Pending] = {}
        self._deleting: set[str] = set()
        # What inspect knows and the list endpoint does not, per container ID.
        self._health: dict[str, str] = {}
        self._oom: dict[str, bool] = {}
        self._unwatched: dict[str, bool] = {}
        self._fence: dict[str, pb.DriverFenceEvidence] = {}
        self._accounts: dict[str, tuple[str, ...]] = {}  # image ID -> (/etc/passwd, /etc/group)
        self.gpus = cdi.GpuSelector(tuple(settings.cdi_spec_dirs))
        self._selinux: bool | None = None  # label own bind mounts; decided on the first create
        self._probes: dict[str, asyncio.Task[None]] = {}
        self._waiters: dict[str, asyncio.Task[None]] = {}
        self._announced: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        # Exits before this moment happened while no podmand was watching.
        self.watching_since = time.time()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Cancel background work; durable intent lets the next start resume it."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------ lookups

    async def _containers(self, sandbox_id: str | None = None) -> list[ContainerListEntry]:
        labels = list(names.MANAGED_FILTER)
        if sandbox_id is not None:
            labels.append(f"{names.SANDBOX_ID}={sandbox_id}")
        return await self.podman.list_containers(labels)

    async def _find(self, sandbox_id: str) -> ContainerListEntry | None:
        entries = await self._containers(sandbox_id)
        return entries[0] if entries else None

    def _stopped(self, sandbox_id: str, container_id: str) -> bool:
        return self.files.stopped_container(sandbox_id) == container_id

    def _from_inspect(self, info: ContainerInspect) -> pb.DriverSandbox:
        sandbox_id = info.labels.get(names.SANDBOX_ID, "")
        health = info.state.health.status if info.state.health else ""
        self._health[info.id] = health
        self._oom[info.id] = info.state.oom_killed
        self._unwatched[info.id] = snapshots.ended_before(info.state.finished_at, self.watching_since)
        if info.state.running:
            self._ensure_task(self._waiters, info.id, sandbox_id, self._wait_exit)
            if self.settings.health_check_interval and info.config.healthcheck:
                self._ensure_task(self._probes, info.id, sandbox_id, self._probe)
        self._fence[info.id] = fence.evidence(fence_facts(info), self.files.generation(sandbox_id))
        snap = snapshots.from_inspect(
            info,
            health=health,
            stopped=self._stopped(sandbox_id, info.id),
            watching_since=self.watching_since,
            fence=self._fence[info.id],
        )
        self._announce_exit(sandbox_id, info, snap)
        return snap

    def _announce_exit(self, sandbox_id: str, info: ContainerInspect, snap: pb.DriverSandbox) -> None:
        """One platform event per abnormal end of a container run (OOM, runtime restart, exit)."""
        cond = snap.status.conditions[0]
        if cond.reason not in ("OOMKilled", "ContainerRuntimeRestart", "ContainerExited", "WorkspaceValidationFailed"):
            return
        key = (info.id, info.state.finished_at)
        if key in self._announced:
            return
        self._announced.add(key)
        self.publish(platform_event(sandbox_id, cond.reason, cond.message, warning=True))

    async def _wait_exit(self, container_id: str, sandbox_id: str) -> None:
        """Podman's /wait answers as soon as Podman knows a container stopped."""
        try:
            await self.podman.wait_container(container_id)
        except (PodmanError, PodmanUnavailable):
            return  # gone, or Podman away: the watcher's resubscription covers it
        self.refresh(container_id, sandbox_id)

    async def observe(self, container_id: str) -> pb.DriverSandbox | None:
        """A fresh snapshot of one container, or None when it is gone."""
        try:
            info = await self.podman.inspect_container(container_id)
        except PodmanError as exc:
            if exc.gone:
                self._drop_container(container_id)
                return None
            raise
        return self._from_inspect(info)

    def _drop_container(self, container_id: str) -> None:
        """Forget what was cached about a container that no longer exists."""
        for cache in (self._health, self._oom, self._unwatched, self._fence):
            cache.pop(container_id, None)
        self._announced = {key for key in self._announced if key[0] != container_id}

    async def get(self, sandbox_id: str) -> pb.DriverSandbox:
        check_name("sandbox_id", sandbox_id, required=True)  # before any file or Podman call
        entry = await self._find(sandbox_id)
        if entry is not None:
            snap = await self.observe(entry.id)
            if snap is not None:
                return snap
        pending = self._pending.get(sandbox_id)
        if pending is not None:
            return pending.snapshot()
        raise NotFound("sandbox not found")

    async def list_sandboxes(self) -> list[pb.DriverSandbox]:
        """Every managed sandbox from one Podman list call plus those still provisioning."""
        out = []
        seen = set()
        for entry in await self._containers():
            sandbox_id = (entry.labels or {}).get(names.SANDBOX_ID, "")
            if not sandbox_id or sandbox_id in seen:
                continue
            seen.add(sandbox_id)
            out.append(
                snapshots.from_list_entry(
                    entry,
                    health=self._health.get(entry.id, ""),
                    oom=self._oom.get(entry.id, False),
                    stopped=self._stopped(sandbox_id, entry.id),
                    watching_since=self.watching_since,
                    unwatched=self._unwatched.get(entry.id),
                    fence=self._fence.get(entry.id),
                )
            )
        out += [p.snapshot() for sid, p in self._pending.items() if sid not in seen]
        out.sort(key=lambda s: (s.name, s.id))
        return out

    # ------------------------------------------------------------ create

    async def validate(self, sandbox: pb.DriverSandbox | None, *, staged: bool = True) -> Plan:
        """``staged=False``: leave the staged rootfs tar unchecked (create checks it
        after the identical-retry check: the first create may have imported it)."""
        plan = validate(sandbox, self.settings)
        if plan.gpu_count:  # peek: only a create takes devices
            self.gpus.peek(plan.gpu_count)
        await admission.admit_mounts(self.podman, self.settings, str(self.state_dir), plan.workspace, plan.mounts)
        if self.settings.image_pull_policy == "never":
            await self._check_mount_images(plan)
        if plan.rootfs_tar:
            if staged:
                self._check_rootfs(plan)
            return plan
        try:
            image = await self.podman.inspect_image(plan.image)
        except PodmanError as exc:
            if exc.status != 404:
                raise
            if self.settings.image_pull_policy == "never":
                raise FailedPrecondition(
                    f"sandbox.spec.template.image: image {plan.image!r} is not present and the pull policy is 'never'"
                ) from exc
        else:  # present already: what the image declares can be checked before anything is made
            try:
                if image.id in self._accounts:  # validation allocates nothing: only account files read before
                    self._resolve_from(plan, image.id, image.config.user)
                else:
                    self._check_declaration(plan, image.config.user)
            except FailedPrecondition as exc:
                raise FailedPrecondition(f"sandbox.spec.template.image: {plan.image}: {exc.message}") from exc
        return plan

    def _check_rootfs(self, plan: Plan) -> None:
        """The staged tar as it is now, and the identity: a rootfs tar declares no USER."""
        rootfs.check_staged(plan.rootfs_tar, self.settings)
        try:
            self._check_declaration(plan, "")
        except FailedPrecondition as exc:
            raise FailedPrecondition(f"{rootfs.WHERE}: a rootfs tar declares no USER: {exc.message}") from exc

    def _check_declaration(self, plan: Plan, image_user: str) -> None:
        """What the supervisor would refuse of the image's ``USER`` and the policy's identity,
        before the image's account files are read."""
        limit = userns_id_limit(self.settings, plan.userns)
        identity.check_declaration(plan.workload_user, plan.workload_group, image_user, id_limit=limit)

    async def _check_mount_images(self, plan: Plan) -> None:
        """Under pull policy 'never', each image mount's image must be here already."""
        for i, m in enumerate(plan.mounts):
            if m.kind != "image":
                continue
            try:
                await self.podman.inspect_image(m.source)
            except PodmanError as exc:
                if exc.status != 404:
                    raise
                raise FailedPrecondition(
                    f"sandbox.spec.template.driver_config.mounts[{i}].source: image {m.source!r} is not present "
                    "and the pull policy is 'never'"
                ) from exc

    def _assign_gpus(self, plan: Plan) -> Plan:
        """Take ``gpu_count`` devices from the CDI inventory as it is now (round-robin); the
        plan that comes back names them and asks for no more."""
        if not plan.gpu_count:
            return plan
        try:
            devices = self.gpus.take(plan.gpu_count)
        except FailedPrecondition as exc:
            raise ProvisionFailed("GpuUnavailable", exc.message) from exc
        log.info("sandbox %s: assigned GPU(s) %s", plan.sandbox_id, ", ".join(devices))
        return dataclasses.replace(plan, cdi_devices=tuple(devices), gpu_count=0)

    def _resolve_from(self, plan: Plan, image_id: str, image_user: str) -> Resolved:
        passwd, group = self._accounts[image_id]
        limit = userns_id_limit(self.settings, plan.userns)
        return identity.resolve(
            plan.workload_user, plan.workload_group, image_user, passwd, group, image_id, id_limit=limit
        )

    async def _resolve_identity(self, plan: Plan, image_id: str, image_user: str) -> Resolved:
        """The identity the supervisor will select, from the image's own /etc/passwd and
        /etc/group (read from a never-started container, once per image ID)."""
        if image_id not in self._accounts:
            files = await read_image_files(self.podman, image_id, ["/etc/passwd", "/etc/group"], str(self.state_dir))
            self._accounts[image_id] = tuple((files[p] or b"").decode(errors="replace") for p in files)
        return self._resolve_from(plan, image_id, image_user)

    async def _existing(self, plan: Plan) -> tuple[str, str] | None:
        """(spec hash, instance) of a sandbox already recorded under this id."""
        pending = self._pending.get(plan.sandbox_id)
        if pending is not None:
            return pending.plan.spec_hash, pending.instance
        volume = await self.podman.inspect_volume(plan.volume_name)
        labels = volume.labels if volume is not None else None
        if labels is None:
            entry = await self._find(plan.sandbox_id)
            labels = entry.labels if entry is not None else None
        if labels is None:
            return None
        return labels.get(names.SPEC_HASH, ""), labels.get(names.INSTANCE, "")

    def runtime_identity(self, sandbox_id: str, instance: str) -> str:
        return names.runtime_identity(instance, self.files.generation(sandbox_id) or "0")

    def _tls_files(self) -> dict[str, Path]:
        s = self.settings
        if not s.tls_enabled:
            return {}
        return {"ca.crt": Path(s.tls_ca), "tls.crt": Path(s.tls_cert), "tls.key": Path(s.tls_key)}

    async def create(self, sandbox: pb.DriverSandbox | None) -> str:
        """Record the request and start provisioning; the runtime identity. A staged
        rootfs tar belongs to the create from here on: provisioning deletes it after the
        import, and any refusal here deletes it at once, unless a create already
        accepted owns that slot (:meth:`_slot_owned`)."""
        try:
            plan = await self.validate(sandbox, staged=False)
            assert sandbox is not None
            async with self._locks[plan.sandbox_id]:
                existing = await self._existing(plan)
                if existing is not None:
                    if existing[0] == plan.spec_hash:
                        return self.runtime_identity(plan.sandbox_id, existing[1])  # an identical retry
                    raise AlreadyExists("sandbox already exists with a different spec")
                if plan.rootfs_tar:
                    self._check_rootfs(plan)
                instance = uuid.uuid4().hex
                try:
                    self.files.write_secrets(plan.sandbox_id, gateway_token(sandbox.spec), self._tls_files())
                    self._new_generation(plan.sandbox_id, instance, plan.generation)
                    labels = intent_labels(plan, instance, str(self.state_dir))
                    await self.podman.create_volume(plan.volume_name, labels)
                except BaseException:
                    self.files.remove(plan.sandbox_id)
                    raise
                self._start_provisioning(plan, instance)
                return self.runtime_identity(plan.sandbox_id, instance)
        except BaseException:
            if sandbox is not None and sandbox.spec.template.HasField("driver_config"):
                staged = sandbox.spec.template.driver_config.fields.get(rootfs.KEY)
                path = staged.string_value if staged is not None and staged.WhichOneof("kind") == "string_value" else ""
                if path and not await self._slot_owned(sandbox.id, path):
                    rootfs.remove_slot(path, self.settings)
            raise

    async def _slot_owned(self, sandbox_id: str, path: str) -> bool:
        """Whether a create already accepted owns the staging slot holding ``path``:
        one provisioning, or this sandbox's record not resumed yet. Refusing a
        request must not delete a tar that create is still to import."""
        want = rootfs.slot(path, self.settings)
        if want is None:
            return False
        owned = [p.plan.rootfs_tar for p in self._pending.values()]
        try:
            if sandbox_id not in self._pending and names.is_id(sandbox_id):
                volume = await self.podman.inspect_volume(names.volume_name(sandbox_id))
                intent = (volume.labels or {}).get(names.INTENT, "") if volume is not None else ""
                if intent:
                    owned.append(validate(decode_intent(intent), self.settings, recorded=True).rootfs_tar)
        except (DriverError, ValueError):
            pass  # an unusable record names no slot
        except Exception:  # cannot tell: keep the tar (the gateway deletes its slots too)
            return True
        return any(rootfs.slot(o, self.settings) == want for o in owned if o)

    def _new_generation(self, sandbox_id: str, instance: str, generation: str) -> None:
        """Record the generation and mint podmand's credential for it (the old one stops working)."""
        self.files.write(sandbox_id, "driver.credential", self.signer.mint(sandbox_id, instance, generation).encode())
        self.files.set_generation(sandbox_id, generation)

    def _start_provisioning(self, plan: Plan, instance: str) -> None:
        ready = Condition("False", "Starting", f"Sandbox accepted; preparing image {plan.image}", snapshots.now())
        pending = Pending(plan, instance, ready)
        self._pending[plan.sandbox_id] = pending
        self.publish(sandbox_event(pending.snapshot()))
        self.publish(
            platform_event(
                plan.sandbox_id,
                "Scheduled",
                "Sandbox accepted by podmand",
                metadata={
                    names.PROGRESS_COMPLETE_STEP: names.STEP_REQUESTING,
                    names.PROGRESS_COMPLETE_LABEL: "Sandbox requested",
                    names.PROGRESS_ACTIVE_STEP: names.STEP_PULLING,
                    names.PROGRESS_ACTIVE_DETAIL: plan.image,
                },
            )
        )
        filtered = filtered_user_env(plan)
        if filtered:
            # Keys only: values may be secrets.
            self.publish(
                platform_event(
                    plan.sandbox_id,
                    "EnvironmentFiltered",
                    f"Not given to the main process (they could steer the root supervisor or the loader; "
                    f"SSH sessions still get them): {', '.join(filtered)}",
                    warning=True,
                )
            )
        pending.task = self._spawn(self._provision(pending))

    def _set_pending(self, pending: Pending, reason: str, message: str, status: str = "False") -> None:
        old = pending.ready
        # transition_time moves only when the condition (status, reason) does, not on each retry.
        when = old.time if (old.status, old.reason) == (status, reason) else snapshots.now()
        pending.ready = Condition(status, reason, message, when)
        self.publish(sandbox_event(pending.snapshot()))

    async def _provision(self, pending: Pending) -> None:
        sandbox_id = pending.plan.sandbox_id
        delay = 0.5
        while True:
            try:
                await self._provision_once(pending)
                return
            except PodmanUnavailable as exc:
                log.warning("sandbox %s: Podman unavailable while provisioning, retrying: %s", sandbox_id, exc)
                self._set_pending(pending, "DependenciesNotReady", f"Podman is unavailable; retrying: {exc}")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            except ProvisionFailed as exc:
                self._fail(pending, exc.reason, exc.message, terminal=True)
            except (PodmanError, DriverError, OSError) as exc:
                # Reported, but a restart tries again: this may have been a passing fault.
                self._fail(pending, "ProvisioningFailed", str(exc))
            except Exception as exc:  # a bug or an answer podmand cannot read: never a silent, stuck sandbox
                log.error("sandbox %s: unexpected error while provisioning", sandbox_id, exc_info=exc)
                self._fail(pending, "ProvisioningFailed", f"unexpected error: {type(exc).__name__}")
            if pending.plan.rootfs_tar:  # every failure ends with the staged tar deleted
                rootfs.remove_slot(pending.plan.rootfs_tar, self.settings)
            return

    def _fail(self, pending: Pending, reason: str, message: str, *, terminal: bool = False) -> None:
        log.warning("sandbox %s: provisioning failed (%s): %s", pending.plan.sandbox_id, reason, message)
        if terminal:  # reported again, not retried, after a restart
            self.files.mark_failed(pending.plan.sandbox_id, reason, message)
        self._set_pending(pending, reason, message)
        self.publish(platform_event(pending.plan.sandbox_id, reason, message, warning=True))

    async def _pull(self, ref: str, policy: str, reason: str, sandbox_id: str = "") -> ImageInspect:
        """Pull per policy (with the operator's registry credentials, abandoned when
        Podman goes silent) and pin the image (its ID, user and environment)."""
        if policy != "never":
            auth_file = self.settings.registry_auth_file
            try:
                cred = registryauth.for_image(auth_file, ref)
            except registryauth.AuthFileError as exc:
                raise ProvisionFailed(reason, f"pulling image {ref!r}: {exc}") from None
            try:
                await self._pull_reporting(ref, policy, sandbox_id, cred.header() if cred else "")
            except PullStalled as exc:
                raise ProvisionFailed(reason, str(exc)) from None
            except PodmanError as exc:
                if registryauth.is_auth_failure(exc.message):
                    why = registryauth.failure_message(ref, cred, auth_file, exc.message)
                    raise ProvisionFailed(reason, why) from None
                raise ProvisionFailed(reason, f"pulling image {ref!r} failed: {exc.message}") from exc
        try:
            info = await self.podman.inspect_image(ref)
        except PodmanError as exc:
            if exc.status == 404:
                raise ProvisionFailed(reason, f"image {ref!r} is not present (pull policy {policy!r})") from exc
            raise
        if not info.id:
            raise ProvisionFailed(reason, f"inspecting image {ref!r} returned no immutable image ID")
        return info

    async def _pull_reporting(
        self, ref: str, policy: str, sandbox_id: str, auth: str = "", clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Consume the pull stream, publishing rate-limited ``Pulling`` events (and a
        heartbeat while Podman is silent) for ``sandbox_id``; see pullprogress. Raises
        PullStalled (the stream closed, which stops Podman's pull) after
        ``pull_inactivity_timeout`` seconds without a line."""
        progress = PullProgress(ref, clock())
        quiet = Inactivity(self.settings.pull_inactivity_timeout, clock())

        def report(meta: dict[str, str] | None) -> None:
            if meta is not None and sandbox_id:
                self.publish(platform_event(sandbox_id, PULLING, progress.message(), metadata=meta))

        async with contextlib.aclosing(self.podman.pull_image(ref, policy, auth)) as lines:
            next_line: asyncio.Task[Any] | None = None
            try:
                while True:
                    next_line = next_line or asyncio.ensure_future(anext(lines))
                    left = quiet.remaining(clock())
                    wait = PULL_HEARTBEAT if left is None else max(0.0, min(PULL_HEARTBEAT, left))
                    done, _ = await asyncio.wait({next_line}, timeout=wait)
                    if not done:
                        if quiet.expired(clock()):
                            raise PullStalled(quiet.message(ref))
                        report(progress.heartbeat(clock()))
                        continue
                    try:
                        line = next_line.result()
                    except StopAsyncIteration:
                        next_line = None
                        return
                    next_line = None
                    quiet.touch(clock())
                    report(progress.feed(line.stream, clock()))
            finally:
                if next_line is not None:
                    next_line.cancel()
                    ended = (asyncio.CancelledError, StopAsyncIteration, PodmanError, PodmanUnavailable)
                    with contextlib.suppress(*ended):
                        await next_line

    async def _import_rootfs(self, pending: Pending) -> ImageInspect:
        """Import the staged tar as the sandbox's image, pin its ID, delete the slot.
        While the tar is staged it is imported (moving the tag from any earlier
        import); with the slot gone, an import finished before a restart is used."""
        plan = pending.plan
        info: ImageInspect | None = None
        if not os.path.lexists(plan.rootfs_tar):
            try:
                info = await self.podman.inspect_image(plan.image)
            except PodmanError as exc:
                if exc.status != 404:
                    raise
        if info is None:
            self._set_pending(pending, "Starting", "Importing the rootfs tar")
            try:
                image_id = await rootfs.import_staged(self.podman, plan.rootfs_tar, self.settings, plan.image)
            except InvalidArgument as why:  # gone or changed since the create
                raise ProvisionFailed(ROOTFS_FAILED, why.message) from None
            except PodmanError as why:
                raise ProvisionFailed(ROOTFS_FAILED, f"importing the rootfs tar failed: {why.message}") from None
            info = await self.podman.inspect_image(image_id)
        rootfs.remove_slot(plan.rootfs_tar, self.settings)
        if not info.id:
            raise ProvisionFailed(ROOTFS_FAILED, f"inspecting image {plan.image!r} returned no immutable image ID")
        log.info("sandbox %s: rootfs tar imported as %s (%s)", plan.sandbox_id, plan.image, info.id)
        return info

    async def _relabel(self) -> bool:
        """Whether podmand's own bind mounts get SELinux labels (selinux.py); with
        ``selinux = auto``, Podman is asked once."""
        if self._selinux is None:
            setting, enabled = self.settings.selinux, False
            if setting == "auto":
                enabled, source = selinux.detect((await self.podman.info()).host.security.selinuxEnabled)
                log.info("SELinux is %s (from %s)", "enabled" if enabled else "not enabled", source)
            self._selinux = selinux.relabel(setting, enabled)
            log.info("podmand's own bind mounts %s SELinux labels", "carry" if self._selinux else "carry no")
        return self._selinux

    async def _provision_once(self, pending: Pending) -> None:
        plan, s = pending.plan, self.settings
        if plan.has_token and not self.files.has_token(plan.sandbox_id):
            raise ProvisionFailed(
                "SandboxTokenMissing", "the sandbox token file is gone from the state directory; delete and recreate"
            )
        sup_policy = supervisor_pull_policy(s.supervisor_image)
        sup = await self._pull(s.supervisor_image, sup_policy, "SupervisorImageUnavailable", plan.sandbox_id)
        try:
            supervisor_path = await self.supervisor.binary(sup.id)
        except FailedPrecondition as exc:
            raise ProvisionFailed("SupervisorImageUnavailable", exc.message) from exc
        if plan.rootfs_tar:
            image = await self._import_rootfs(pending)
        else:
            self._set_pending(pending, "Starting", f"Pulling image {plan.image}")
            image = await self._pull(plan.image, s.image_pull_policy, "ImagePullFailed", plan.sandbox_id)
        mount_images = {  # driver_config image mounts: pulled with the sandbox's policy, pinned by ID
            m.source: (await self._pull(m.source, s.image_pull_policy, "ImagePullFailed", plan.sandbox_id)).id
            for m in plan.mounts
            if m.kind == "image"
        }
        try:
            workload = await self._resolve_identity(plan, image.id, image.config.user)
        except FailedPrecondition as exc:
            raise ProvisionFailed("WorkloadIdentityInvalid", exc.message) from exc
        try:  # read again for each container: a rotated credential applies from the next one
            self.files.write_proxy(plan.sandbox_id, *proxy.read_files(s))
        except proxy.ProxyFileError as exc:
            raise ProvisionFailed("UpstreamProxyInvalid", str(exc)) from exc
        self.publish(
            platform_event(
                plan.sandbox_id,
                "Pulled",
                f"Image {plan.image} is ready",
                metadata={
                    names.PROGRESS_COMPLETE_STEP: names.STEP_PULLING,
                    names.PROGRESS_COMPLETE_LABEL: f"Image {plan.image} pulled",
                    names.PROGRESS_ACTIVE_STEP: names.STEP_STARTING,
                },
            )
        )
        self._set_pending(pending, "ContainerStarting", "Creating the sandbox container")
        plan = pending.plan = self._assign_gpus(plan)  # a retry keeps the devices
        async with self._network_lock(plan.workspace):
            network = await self._ensure_network(plan.workspace)
            prov = Provision(
                image_id=image.id,
                image_user=image.config.user,
                image_env=tuple(image.config.env or ()),
                network=network,
                supervisor_path=str(supervisor_path),
                secrets_dir=str(self.files.dir(plan.sandbox_id)),
                instance=pending.instance,
                identity=workload,
                selinux=await self._relabel(),
                mount_images=mount_images,
            )
            spec = container_spec(plan, s, prov)
            container_id = await self._create_container(plan, spec)
            self.files.mark_created(plan.sandbox_id, container_id)
        info = await self.podman.inspect_container(container_id)
        if not info.state.running:
            try:
                await self.podman.start_container(container_id)
            except PodmanError as exc:
                with contextlib.suppress(PodmanError, PodmanUnavailable):
                    await self.podman.remove_container(container_id, 0)
                raise ProvisionFailed(
                    "ContainerStartFailed", f"starting the sandbox container failed: {exc.message}"
                ) from exc
        self._pending.pop(plan.sandbox_id, None)
        self.publish(
            platform_event(
                plan.sandbox_id,
                "Started",
                "Sandbox container started",
                metadata={
                    names.PROGRESS_COMPLETE_STEP: names.STEP_STARTING,
                    names.PROGRESS_COMPLETE_LABEL: "Sandbox started",
                },
            )
        )
        self.refresh(container_id, plan.sandbox_id)

    async def _create_container(self, plan: Plan, spec: dict[str, Any]) -> str:
        try:
            container_id, warnings = await self.podman.create_container(spec)
        except PodmanError as exc:
            # Whatever the status (Podman 4.3.1 says 500, not 409, for a name in
            # use): our own interrupted attempt, found by its labels, is adopted.
            entry = await self._find(plan.sandbox_id)
            if entry is not None:
                labels = entry.labels or {}
                ours = (labels.get(names.SPEC_HASH), labels.get(names.INSTANCE))
                if ours == (plan.spec_hash, spec["labels"][names.INSTANCE]):
                    log.info("sandbox %s: adopting container %s of an interrupted create", plan.sandbox_id, entry.id)
                    return entry.id
            if entry is not None or exc.status == 409 or "already in use" in exc.message:
                raise ProvisionFailed(
                    "ContainerNameConflict", f"a container named {plan.container_name!r} already exists"
                ) from exc
            raise ProvisionFailed(
                "ContainerCreateFailed", f"creating the sandbox container failed: {exc.message}"
            ) from exc
        for warning in warnings:
            self.publish(platform_event(plan.sandbox_id, "PodmanWarning", warning, warning=True))
        return container_id

    async def resume(self) -> int:
        """Finish creates that the volumes record but that never reached a running
        container: none yet, or one created and never started (podmand was killed
        between the two).

        A create that failed terminally is reported with its failure again, and
        one whose container was removed while podmand was down is reported as
        such: neither is provisioned again behind the gateway's back."""
        await self._remove_stale_readers()
        volumes = await self.podman.list_volumes([f"{names.OWNER}={names.OWNER_VALUE}"])
        have = {(e.labels or {}).get(names.SANDBOX_ID, ""): e for e in await self._containers()}
        resumed = 0
        for volume in volumes:
            labels = volume.labels or {}
            sandbox_id = labels.get(names.SANDBOX_ID, "")
            if not names.is_id(sandbox_id) or sandbox_id in self._pending or names.INTENT not in labels:
                continue
            if labels.get(names.STATE_DIR, str(self.state_dir)) != str(self.state_dir):
                continue  # recorded by another podmand sharing this Podman: its to finish
            entry = have.get(sandbox_id)
            if entry is not None and not self._never_started(sandbox_id, entry, labels):
                continue  # a container that ran (or was stopped): its state is reported as it is
            try:
                async with self._locks[sandbox_id]:  # RPCs are already served: one owner at a time
                    if sandbox_id in self._pending or await self.podman.inspect_volume(volume.name) is None:
                        continue  # created or deleted meanwhile
                    resumed += await self._resume_one(sandbox_id, labels, entry)
            except PodmanUnavailable:
                raise
            except Exception:  # one bad record must not keep podmand from serving the rest
                log.exception("sandbox %s: recorded create could not be resumed", sandbox_id)
        return resumed

    async def _remove_stale_readers(self) -> list[str]:
        """Image readers of this state directory not in use: left by a predecessor
        killed mid-read, or by a removal Podman did not answer (one podmand per
        state directory, so nobody else's)."""
        removed = []
        mine = [f"{names.OWNER}={names.OWNER_VALUE}", f"{names.STATE_DIR}={self.state_dir}"]
        for entry in await self.podman.list_containers(mine):
            name = (entry.names or [""])[0]
            stale = name.startswith(READER_PREFIX) and name not in imagefiles.ACTIVE
            if not stale:
                continue
            try:
                if await self.podman.remove_container(entry.id, 0):
                    removed.append(f"container:{name}")
            except PodmanError as exc:  # tried again at the next collection
                log.warning("image reader %s not removed: %s", name, exc.message)
        return removed

    def _never_started(self, sandbox_id: str, entry: ContainerListEntry, intent: dict[str, str]) -> bool:
        """Created for this very create (same instance), never started, not stopped since."""
        return (
            entry.state in ("created", "configured", "initialized")
            and (entry.labels or {}).get(names.INSTANCE) == intent.get(names.INSTANCE)
            and not self.files.stopped_container(sandbox_id)
        )

    async def _resume_one(self, sandbox_id: str, labels: dict[str, str], entry: ContainerListEntry | None) -> int:
        """Provision one recorded create again (1), or report why not (0)."""
        try:
            plan = validate(decode_intent(labels[names.INTENT]), self.settings, recorded=True)
        except (DriverError, ValueError) as exc:
            log.warning("sandbox %s: recorded create request is unusable: %s", sandbox_id, exc)
            return 0
        plan = dataclasses.replace(
            plan,
            has_token=labels.get(names.HAS_TOKEN) == "true",
            generation=self.files.generation(sandbox_id) or plan.generation,
        )
        instance = labels.get(names.INSTANCE) or uuid.uuid4().hex
        if entry is None and self.files.stopped_container(sandbox_id) == STOPPED_EARLY:
            log.info("sandbox %s: stopped before its container existed; stays stopped", sandbox_id)
            ready = Condition("False", "ContainerStopped", STOPPED_EARLY_MESSAGE, snapshots.now())
            self._pending[sandbox_id] = Pending(plan, instance, ready, stopped=True)
            return 0
        failure = self.files.failure(sandbox_id)
        if failure is None and entry is None and self.files.created_container(sandbox_id):
            failure = ("ContainerRemoved", "The sandbox container was removed while podmand was not running")
        if failure is not None:
            if entry is not None:  # its start failed and its removal did not happen: finish that
                with contextlib.suppress(PodmanError):
                    await self.podman.remove_container(entry.id, 0)
            log.info("sandbox %s: reporting its failure (%s), not provisioning again", sandbox_id, failure[0])
            self._pending[sandbox_id] = Pending(plan, instance, Condition("False", *failure, snapshots.now()))
            return 0
        if not (self.files.dir(sandbox_id) / "driver.credential").exists():
            self._new_generation(sandbox_id, instance, plan.generation)
        # With a created container, provisioning adopts it (same labels) and starts it.
        log.info("sandbox %s: resuming interrupted create%s", sandbox_id, " (starting its container)" if entry else "")
        self._start_provisioning(plan, instance)
        return 1

    # ------------------------------------------------------------ stop / start

    async def stop(self, sandbox_id: str) -> None:
        check_name("sandbox_id", sandbox_id, required=True)  # before any file or Podman call
        async with self._locks[sandbox_id]:
            entry = await self._find(sandbox_id)
            if entry is None:
                pending = self._pending.get(sandbox_id)
                if pending is None:
                    raise NotFound("sandbox not found")
                await _cancel(pending.task)
                pending.stopped = True
                self.files.mark_stopped(sandbox_id, STOPPED_EARLY)  # a restart must not start it
                self._set_pending(pending, "ContainerStopped", STOPPED_EARLY_MESSAGE)
                return
            await self._stop_container(sandbox_id, entry)
        self.refresh(entry.id, sandbox_id)

    async def _stop_container(self, sandbox_id: str, entry: ContainerListEntry) -> None:
        """Stop the sandbox's container and wait for it; reported as stopped (Suspended), not as an exit."""
        self.files.mark_stopped(sandbox_id, entry.id)
        try:
            if entry.state == "paused":
                await self.podman.unpause_container(entry.id)
            if entry.state not in ("exited", "stopped", "created", "configured"):
                await self.podman.stop_container(entry.id, self.settings.stop_timeout)
            await self._wait_stopped(entry.id)
        except BaseException:
            self.files.clear_stopped(sandbox_id)
            raise

    async def _wait_stopped(self, container_id: str) -> None:
        deadline = time.monotonic() + self.settings.stop_timeout + 5
        while True:
            info = await self.podman.inspect_container(container_id)
            if info.state.status in ("exited", "stopped", "created", "configured"):
                return
            if time.monotonic() > deadline:
                raise DriverError(f"container {container_id[:12]} did not stop in time (state {info.state.status})")
            await asyncio.sleep(0.05)

    async def start(
        self,
        sandbox_id: str,
        *,
        launch_authentication: bytes = b"",
        generation_id: str = "",
        expected_runtime_identity: str = "",
    ) -> str:
        """Start a stopped sandbox (idempotent); the new runtime identity.

        A fresh launch bundle's token and podmand's credential for the new
        generation replace the old files before the container starts. A running
        sandbox is restarted when the request starts a new generation (a new
        ``generation_id``, or a bundle for another runtime generation): the
        supervisor reads its token once, at start. A retry of the same
        transition changes nothing."""
        check_name("sandbox_id", sandbox_id, required=True)  # before any file or Podman call
        if generation_id:
            tokens.check_generation("generation_id", generation_id)
        bundle = (
            tokens.decode_launch_authentication(launch_authentication, "launch_authentication")
            if launch_authentication
            else None
        )
        if bundle is not None:  # its token becomes the sandbox's: it must be this sandbox's
            where = "launch_authentication.supervisor.gateway_token"
            tokens.check_sandbox_token(bundle.supervisor.gateway_token, sandbox_id, where=where)
        async with self._locks[sandbox_id]:
            entry = await self._find(sandbox_id)
            if entry is None:
                pending = self._pending.get(sandbox_id)
                if pending is None:
                    raise NotFound("sandbox not found")
                self._check_expected(expected_runtime_identity, pending.instance)
                if pending.task is None or pending.task.done():
                    plan, state_dir = pending.plan, str(self.state_dir)  # admission under today's policy
                    admission.check_provenance(admission.policy(self.settings), str(plan.driver_config_used).lower())
                    await admission.admit_mounts(self.podman, self.settings, state_dir, plan.workspace, plan.mounts)
                    pending.stopped = False  # refused above: still stopped, and still after a restart
                    self.files.clear_stopped(sandbox_id)
                    self.files.clear_failed(sandbox_id)
                    self.files.clear_created(sandbox_id)
                    self._set_pending(pending, "Starting", "Resuming provisioning")
                    pending.task = self._spawn(self._provision(pending))
                return self.runtime_identity(sandbox_id, pending.instance)
            instance = (entry.labels or {}).get(names.INSTANCE, "")
            self._check_expected(expected_runtime_identity, instance)
            wanted = generation_id or (bundle.supervisor.runtime_generation if bundle else "")
            running = entry.state == "running"
            if running and (not wanted or wanted == self.files.generation(sandbox_id)):
                self.files.clear_stopped(sandbox_id)
                return self.runtime_identity(sandbox_id, instance)
            await admission.admit_start(self.podman, self.settings, str(self.state_dir), entry.id, entry.labels or {})
            if bundle is None and self.settings.require_launch_auth:
                raise FailedPrecondition("launch_authentication: podmand is configured to require it")
            if running:
                log.info("sandbox %s: restarting for generation %s", sandbox_id, wanted)
                await self._stop_container(sandbox_id, entry)
            if bundle is not None:
                self.files.write_secrets(sandbox_id, bundle.supervisor.gateway_token, {})
            self._new_generation(sandbox_id, instance, wanted or uuid.uuid4().hex[:16])
            try:
                await self.podman.start_container(entry.id)
            except PodmanError as exc:  # still reported as stopped (the marker stays)
                raise DriverError(f"starting the sandbox container failed: {exc.message}") from exc
            self.files.clear_stopped(sandbox_id)
        self.refresh(entry.id, sandbox_id)
        return self.runtime_identity(sandbox_id, instance)

    @staticmethod
    def _check_expected(expected: str, instance: str) -> None:
        if expected and names.stable_identity(expected) != names.stable_identity(names.runtime_identity(instance, "")):
            raise FailedPrecondition(
                "expected_runtime_identity: the sandbox's container was replaced out of band; recreate the sandbox"
            )

    async def authenticate(self, credential: str) -> tuple[str, str]:
        """Check podmand's own bootstrap credential: (sandbox id, runtime identity)."""
        try:
            claims = self.signer.verify(credential)
        except BadCredential as exc:
            raise Unauthenticated(f"credential rejected: {exc}") from exc
        try:
            check_name("sandbox_id", claims.sandbox_id, required=True)
        except InvalidArgument as exc:
            raise Unauthenticated(f"credential rejected: {exc.message}") from exc
        entry = await self._find(claims.sandbox_id)
        if entry is None or (entry.labels or {}).get(names.INSTANCE) != claims.instance:
            raise Unauthenticated("credential rejected: its sandbox no longer exists")
        if self.files.generation(claims.sandbox_id) != claims.generation:
            raise Unauthenticated("credential rejected: it belongs to an earlier start of the sandbox")
        return claims.sandbox_id, names.runtime_identity(claims.instance, claims.generation)

    # ------------------------------------------------------------ delete

    async def delete(self, sandbox_id: str) -> bool:
        check_name("sandbox_id", sandbox_id, required=True)  # before any file or Podman call
        self._deleting.add(sandbox_id)
        try:
            async with self._locks[sandbox_id]:
                existed, workspace = await self._remove_everything(sandbox_id)
        finally:
            self._deleting.discard(sandbox_id)
        if existed:
            self.publish(deleted_event(sandbox_id))
        if workspace is not None:
            await self._maybe_remove_network(workspace)
        return existed

    async def _remove_everything(self, sandbox_id: str) -> tuple[bool, str | None]:
        existed = False
        workspace: str | None = None
        pending = self._pending.pop(sandbox_id, None)
        if pending is not None:
            existed, workspace = True, pending.plan.workspace
            await _cancel(pending.task)
            if pending.plan.rootfs_tar:
                rootfs.remove_slot(pending.plan.rootfs_tar, self.settings)
        # Listed or inspected means it existed, even when the removal then finds
        # it already gone (Podman says 500 "no such ..." under load): Deleted follows.
        for entry in await self._containers(sandbox_id):
            workspace = (entry.labels or {}).get(names.SANDBOX_WORKSPACE, "")
            self._drop_container(entry.id)
            await self.podman.remove_container(entry.id, self.settings.stop_timeout)
            existed = True
        volume = await self.podman.inspect_volume(names.volume_name(sandbox_id))
        if volume is not None:
            if workspace is None:
                workspace = (volume.labels or {}).get(names.SANDBOX_WORKSPACE)
            await self._remove_rootfs_image((volume.labels or {}).get(names.ROOTFS_IMAGE, ""))
            await self.podman.remove_volume(volume.name)
            existed = True
        self.files.remove(sandbox_id)
        return existed, workspace

    async def _remove_rootfs_image(self, ref: str) -> bool:
        """Remove a sandbox's imported rootfs once its container is gone; one still in use
        (another sandbox mounts it) stays until garbage collection finds it unused."""
        if rootfs.sandbox_of(ref) is None:
            return False
        try:
            return await self.podman.remove_image(ref)
        except PodmanError as exc:
            log.info("keeping rootfs image %s for now: %s", ref, exc.message)
            return False

    async def forget(self, sandbox_id: str) -> bool:
        """The container vanished (removed out of band): clean up what podmand
        made for it.  True when the sandbox is gone and Deleted should be sent."""
        if not names.is_id(sandbox_id):  # a label podmand did not write: nothing of ours to clean
            return False
        if sandbox_id in self._deleting or sandbox_id in self._pending:
            return False
        async with self._locks[sandbox_id]:
            if await self._find(sandbox_id) is not None or sandbox_id in self._pending:
                return False
            _, workspace = await self._remove_everything(sandbox_id)
        if workspace is not None:
            await self._maybe_remove_network(workspace)
        return True

    # ------------------------------------------------------------ workspaces

    def _network(self, workspace: str) -> str:
        return names.network_name(self.settings.network_name, workspace)

    async def _ensure_network(self, workspace: str) -> str:
        name = self._network(workspace)
        if await self.podman.inspect_network(name) is None:
            body = {
                "name": name,
                "driver": "bridge",
                "dns_enabled": True,
                "options": {"isolate": "true"},
                "labels": {names.OWNER: names.OWNER_VALUE, names.SANDBOX_WORKSPACE: workspace},
            }
            try:
                await self.podman.create_network(body)
            except PodmanError as exc:
                if exc.status != 409:
                    raise
        return name

    def _network_lock(self, workspace: str) -> Hold:
        """One lock per network: workspaces "" and "default" share one."""
        return self._locks[f"net:{self._network(workspace)}"]

    async def _network_users(self, workspace: str) -> set[str]:
        """Sandbox ids on the workspace's network: containers and creates still pending."""
        net = self._network(workspace)
        users = {sid for sid, p in self._pending.items() if self._network(p.plan.workspace) == net}
        for entry in await self._containers():
            labels = entry.labels or {}
            if names.SANDBOX_WORKSPACE in labels and self._network(labels[names.SANDBOX_WORKSPACE]) == net:
                users.add(labels.get(names.SANDBOX_ID, entry.id))
        return users

    async def _maybe_remove_network(self, workspace: str, name: str | None = None) -> bool:
        """Remove the workspace's network (or ``name``) once its last sandbox is gone."""
        async with self._network_lock(workspace):
            if await self._network_users(workspace):
                return False
            return await self._remove_network(name or self._network(workspace), quiet=True)

    async def _remove_network(self, name: str, *, quiet: bool) -> bool:
        """Remove a network podmand owns; True when it was removed."""
        network = await self.podman.inspect_network(name)
        if network is None or (network.labels or {}).get(names.OWNER) != names.OWNER_VALUE:
            return False
        try:
            return await self.podman.remove_network(name)
        except PodmanError as exc:
            if not quiet:
                raise FailedPrecondition(f"workspace network {name!r} cannot be removed: {exc.message}") from exc
            log.info("workspace network %s kept: %s", name, exc.message)
            return False

    async def ensure_workspace(self, workspace: str) -> None:
        check_name("workspace", workspace, required=False)
        async with self._network_lock(workspace):
            await self._ensure_network(workspace)

    async def delete_workspace(self, workspace: str) -> None:
        check_name("workspace", workspace, required=False)
        async with self._network_lock(workspace):
            left_ids = await self._network_users(workspace)
            if left_ids:
                raise FailedPrecondition(f"workspace {workspace!r} still has {len(left_ids)} sandbox(es)")
            await self._remove_network(self._network(workspace), quiet=False)

    # ------------------------------------------------------------ garbage collection

    async def collect_garbage(self) -> list[str]:
        """Remove podmand-owned leftovers of sandboxes that no longer exist, once
        older than the grace period: token directories, workspace networks and
        supervisor extractor containers.  Never touches anything podmand does
        not own (networks need both podmand's owner label and a workspace label)."""
        removed: list[str] = []
        cutoff = time.time() - self.settings.gc_grace
        entries = await self._containers()
        live = {(e.labels or {}).get(names.SANDBOX_ID) for e in entries} | set(self._pending) | self._deleting
        volumes = {
            (v.labels or {}).get(names.SANDBOX_ID)
            for v in await self.podman.list_volumes([f"{names.OWNER}={names.OWNER_VALUE}"])
        }
        for sandbox_id in self.files.sandbox_ids():
            try:
                recent = self.files.dir(sandbox_id).stat().st_mtime > cutoff
            except FileNotFoundError:
                continue  # deleted meanwhile
            if sandbox_id in live or sandbox_id in volumes or recent:
                continue
            async with self._locks[sandbox_id]:
                if sandbox_id not in self._pending and await self._find(sandbox_id) is None:
                    self.files.remove(sandbox_id)
                    removed.append(f"files:{sandbox_id}")
        workspaces = {(e.labels or {}).get(names.SANDBOX_WORKSPACE) or "" for e in entries}
        workspaces |= {p.plan.workspace for p in self._pending.values()}
        in_use = {self._network(w) for w in workspaces}
        for network in await self.podman.list_networks([f"{names.OWNER}={names.OWNER_VALUE}"]):
            labels = network.labels or {}
            if names.SANDBOX_WORKSPACE not in labels or network.name in in_use:
                continue
            created = snapshots.parse_time(network.created)
            if created is None or created.seconds > cutoff:
                continue
            if await self._maybe_remove_network(labels[names.SANDBOX_WORKSPACE], network.name):
                removed.append(f"network:{network.name}")
        for ref in await self.podman.image_names(rootfs.REPOSITORY):  # rootfs imports of sandboxes now gone
            if rootfs.sandbox_of(ref) not in live | volumes and await self._remove_rootfs_image(ref):
                removed.append(f"image:{ref}")
        removed += await self._remove_stale_readers()
        # Readers of other state directories (or older podmands) live for well under
        # a second: one older than a minute was orphaned by a podmand killed mid-read.
        # (Older than both the grace and a minute: a grace of 0 must not take a live read.)
        extractor_cutoff = min(cutoff, time.time() - 60)
        for extractor in await self.podman.list_containers([f"{names.OWNER}={names.OWNER_VALUE}"]):
            name = (extractor.names or [""])[0]
            created = snapshots.parse_time(extractor.created)
            old = created is not None and created.seconds < extractor_cutoff
            reader = name.startswith(READER_PREFIX) and name not in imagefiles.ACTIVE
            if reader and old and await self.podman.remove_container(extractor.id, 0):
                removed.append(f"container:{name}")
        if removed:
            log.info("garbage collected %s", ", ".join(removed))
        return removed

    # ------------------------------------------------------------ watch support

    async def snapshot_all(self) -> list[pb.DriverSandbox]:
        """Full snapshot for a new watch stream: inspect-fresh, like live events."""
        out = []
        for entry in await self._containers():
            snap = await self.observe(entry.id)
            if snap is not None:
                out.append(snap)
        known = {s.id for s in out}
        out += [p.snapshot() for sid, p in self._pending.items() if sid not in known]
        return out

    # ------------------------------------------------------------ per-container tasks

    def _ensure_task(
        self,
        tasks: dict[str, asyncio.Task[None]],
        container_id: str,
        sandbox_id: str,
        run: Callable[[str, str], Coroutine[Any, Any, None]],
    ) -> None:
        if container_id not in tasks:
            task = self._spawn(run(container_id, sandbox_id))
            tasks[container_id] = task
            task.add_done_callback(lambda _t: tasks.pop(container_id, None))

    async def _probe(self, container_id: str, sandbox_id: str) -> None:
        """Run the container's healthcheck ourselves: no systemd timers here."""
        last = self._health.get(container_id, "")
        while True:
            try:
                status = await self.podman.healthcheck(container_id)
            except (PodmanError, PodmanUnavailable):
                return  # stopped or gone: the watcher reports that
            if status != last:
                last = status
                self.refresh(container_id, sandbox_id)
            await asyncio.sleep(self.settings.health_check_interval if status == "healthy" else 1.0)


def fence_facts(info: ContainerInspect) -> dict[str, object]:
    """What the created container really is, from inspect (observed, not requested)."""
    hc = info.host_config
    maps = hc.id_mappings or IDMappings()
    return {
        "container_id": info.id,
        "image_id": info.image,
        "effective_caps": sorted(info.effective_caps or []),
        "cap_add": sorted(hc.cap_add or []),
        "cap_drop": sorted(hc.cap_drop or []),
        "uid_map": list(maps.uid_map or []),
        "gid_map": list(maps.gid_map or []),
        "userns_mode": hc.userns_mode,
        "network_mode": hc.network_mode,
        "networks": sorted((info.network_settings.networks or {}).keys()),
        "mounts": [{"destination": m.destination, "type": m.type, "rw": m.rw} for m in info.mounts or []],
        "seccomp": next((o.split("=", 1)[1] for o in hc.security_opt or [] if o.startswith("seccomp=")), "default"),
        "no_new_privileges": "no-new-privileges" in (hc.security_opt or []),
        "privileged": hc.privileged,
        "memory_limit": hc.memory,
        "cpu_quota": hc.cpu_quota,
        "cpu_period": hc.cpu_period,
        "pids_limit": hc.pids_limit,
    }


async def _cancel(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` and wait for it to finish.  A cancellation of the caller
    itself still propagates (asyncio.wait never swallows it)."""
    if task is not None and not task.done():
        task.cancel()
        await asyncio.wait([task])
