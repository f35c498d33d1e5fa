"""Each sandbox's pair in the driver: a workload and a supervisor container
(``pair``), made from what preparation found, started again with a new launch bundle,
stopped supervisor first and removed with its channel volume.

``pair`` owns what goes where and in which order; this module owns what the driver keeps
around it: the launch bundle in the state directory until its pair is made (then the
supervisor's ``auth.json`` is the only copy), the generation recorded per start, the
leftovers of an interrupted create cleared before a new attempt (only this create's,
by its instance label), the binds admitted and the runtime binary checked before any
start, and Podman's answers turned into the reasons a sandbox is reported with. The
supervisor's state as the workload's snapshot shows it is :func:`fold`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..errors import DriverError, FailedPrecondition
from ..libpod import ContainerInspect, ContainerListEntry, PodmanClient, PodmanError, PodmanUnavailable
from ..pair import documents, lifecycle, specs
from ..sandbox import snapshots
from ..sandbox.plan import Plan, Provision
from ..sandbox.spec import launch_bundle
from ..sandbox.supervisor import SupervisorCache
from ..security import admission, tokens
from .context import Context
from .events import EventSink
from .pending import Pending, ProvisionFailed
from .preparation import Prepared

log = logging.getLogger("podmand.driver")

LAUNCH_WHERE = "sandbox.spec.launch_authentication"
SUPERVISOR_GONE = "SupervisorExited"  # the workload stopped because its supervisor is not running


def pair_of(
    ctx: Context, plan: Plan, prov: Provision, *, rootless: bool, supervisor_image_id: str = ""
) -> lifecycle.Pair:
    """The pair ``plan`` is made of; ``supervisor_image_id`` only matters to a create."""
    s = ctx.settings
    return lifecycle.Pair(
        sandbox_id=plan.sandbox_id,
        workload=specs.workload_spec(plan, s, prov, rootless=rootless),
        supervisor=specs.supervisor_spec(plan, s, prov, supervisor_image_id=supervisor_image_id),
        workspace_volume=plan.volume_name,
        channel_labels={names.OWNER: names.OWNER_VALUE, names.SANDBOX_ID: plan.sandbox_id,
                        names.INSTANCE: prov.instance},
        stop_timeout=s.stop_timeout,
        workspace_path=prov.workspace,
    )


def bare_pair(ctx: Context, sandbox_id: str, workload_name: str) -> lifecycle.Pair:
    """The names of an existing pair (what stop, start and delete act on), no specs."""
    return lifecycle.Pair(
        sandbox_id=sandbox_id,
        workload={"name": workload_name},
        supervisor={"name": names.supervisor_name(sandbox_id)},
        workspace_volume=names.volume_name(sandbox_id),
        channel_labels={},
        stop_timeout=ctx.settings.stop_timeout,
    )


def session(ctx: Context, bundle: tokens.LaunchAuthentication, userns: str) -> lifecycle.Session:
    where = "host_gateway_ip (--host-gateway-ip / OPENSHELL_PODMAN_HOST_GATEWAY_IP)"
    address = documents.host_gateway_ip(ctx.settings.host_gateway_ip or specs.DEFAULT_HOST_GATEWAY_IP, where)
    return lifecycle.Session(bundle=bundle, host_gateway_ip=address, userns=userns)


class Pairs:
    """The driver's side of each sandbox's pair."""

    def __init__(self, ctx: Context, runtime: SupervisorCache) -> None:
        self.ctx = ctx
        self.runtime = runtime  # the runtime binary every workload binds: checked before each start

    async def rootless(self) -> bool:
        return (await self.ctx.podman.served_info()).host.security.rootless

    # ------------------------------------------------------------ create

    async def create(self, pending: Pending, prepared: Prepared, selinux: bool) -> str:
        """Make and start the pending sandbox's pair from the launch bundle its create
        recorded; the workload's ID. What an interrupted earlier attempt of this create left
        is removed first, before any check can fail it; a failure leaves nothing of this
        attempt (``lifecycle.create``)."""
        files, podman, plan = self.ctx.files, self.ctx.podman, pending.plan
        await self._clear_leftovers(bare_pair(self.ctx, plan.sandbox_id, plan.container_name), pending.instance)
        image = prepared.image
        prov = Provision(
            image_id=image.id,
            image_user=image.config.user,
            image_env=tuple(image.config.env or ()),
            network="",  # the workload has none; the supervisor is on the host's
            supervisor_path=str(prepared.supervisor_path),
            secrets_dir=str(files.dir(plan.sandbox_id)),
            instance=pending.instance,
            identity=prepared.identity,
            selinux=selinux,
            mount_images=prepared.mount_images,
            workspace=prepared.workspace,
        )
        rootless = await self.rootless()
        if prov.identity.supplementary and specs.launches_as_root(
            documents.identity_of(prov.identity), rootless=rootless
        ):  # the runtime's launcher drops every supplementary group (contract §7.2: setgroups(0)), and
            # its own check then wants none: the identity says what the workload really runs as
            prov = dataclasses.replace(prov, identity=dataclasses.replace(prov.identity, supplementary=()))
        raw = files.launch(plan.sandbox_id)
        if raw is None:
            raise ProvisionFailed("LaunchAuthenticationMissing", "the launch bundle is gone from the state directory; "
                                  "start the sandbox with a fresh one, or recreate it")
        try:
            bundle = launch_bundle(raw, plan.sandbox_id, LAUNCH_WHERE)
        except FailedPrecondition as exc:  # e.g. its gateway token expired while the image was pulled
            raise ProvisionFailed("LaunchAuthenticationInvalid", exc.message) from exc
        try:  # Podman resolves bind sources at the start: checked now, just before it
            await admission.admit_binds(podman, self.ctx.settings, str(self.ctx.state_dir), plan.mounts)
        except FailedPrecondition as exc:
            raise ProvisionFailed("MountRefused", exc.message) from exc
        try:  # the runtime binary every workload runs, unchanged (supervisor.py)
            await self.runtime.check(prov.supervisor_path)
        except FailedPrecondition as exc:
            raise ProvisionFailed("RuntimeImageUnavailable", exc.message) from exc
        try:
            identity = documents.identity_of(prov.identity)
        except FailedPrecondition as exc:
            raise ProvisionFailed("WorkloadIdentityInvalid", exc.message) from exc
        try:  # an address the supervisor cannot use (unspecified, multicast, the metadata service's)
            sess = session(self.ctx, bundle, plan.userns)
        except FailedPrecondition as exc:
            raise ProvisionFailed("HostGatewayInvalid", exc.message) from exc
        pair = pair_of(self.ctx, plan, prov, rootless=rootless,
                       supervisor_image_id=prepared.supervisor_image_id)
        files.write_resolver(plan.sandbox_id)
        child_env = documents.child_env(prov.image_env, plan.user_env)

        async def make() -> tuple[str, list[str]]:  # a stop meanwhile leaves it made, never started
            return await lifecycle.create(podman, pair, sess, identity, child_env,
                                          start=lambda: not pending.stopped), []

        # Podman carries out what it was sent when podmand stops waiting: a delete waits for
        # this (creation.finished), and the create removes what it made when it fails
        call = pending.creating = asyncio.ensure_future(make())
        try:
            workload_id, _ = await asyncio.shield(call)
        except FailedPrecondition as exc:  # the fence did not hold
            raise ProvisionFailed("FenceRefused", exc.message) from exc
        except PodmanError as exc:
            raise ProvisionFailed("ContainerCreateFailed", f"making the sandbox's pair failed: {exc.message}") from exc
        try:
            files.mark_created(plan.sandbox_id, workload_id)
            files.set_generation(plan.sandbox_id, bundle.supervisor.runtime_generation)
            files.drop_launch(plan.sandbox_id)
        except DriverError:  # the state directory: no pair without its record
            await lifecycle.discard(podman, pair)
            raise
        return workload_id

    async def _clear_leftovers(self, pair: lifecycle.Pair, instance: str) -> None:
        """Remove what an interrupted attempt of this very create left (its instance label):
        a pair is made whole or not at all. Another's container or volume under these names
        is a conflict, left alone. A channel volume without the label is this attempt's too
        when a container it left mounts it: a create podmand stopped waiting for (a slow
        Podman) removed its labelled volume, and Podman, carrying the container's create
        out later, made the named volume again, bare."""
        podman = self.ctx.podman
        mounted = False
        for name in (pair.supervisor_name, pair.workload_name):
            info = await podman.inspect_container_or_none(name)
            if info is None:
                continue
            if info.labels.get(names.INSTANCE) != instance or info.labels.get(names.SANDBOX_ID) != pair.sandbox_id:
                raise ProvisionFailed("ContainerNameConflict", f"a container named {name!r} already exists")
            mounted = mounted or any(m.type == "volume" and m.name == pair.channel_volume for m in info.mounts or ())
            log.info("sandbox %s: removing %s, left by an interrupted create", pair.sandbox_id, name)
            await podman.remove_container(name, 0)
        volume = await podman.inspect_volume(pair.channel_volume)
        if volume is not None:
            if (volume.labels or {}).get(names.INSTANCE) != instance and not mounted:
                raise ProvisionFailed("VolumeNameConflict", f"a volume named {pair.channel_volume!r} already exists")
            await podman.remove_volume(pair.channel_volume)

    # ------------------------------------------------------------ start, stop, delete

    async def start(
        self, sandbox_id: str, workload_name: str, bundle: tokens.LaunchAuthentication, generation: str
    ) -> None:
        """StartSandbox: every per-session file minted again from the new ``bundle`` (the
        caller checked it is this sandbox's), the fence checked again, both started."""
        info = await self.ctx.podman.inspect_container(workload_name)
        for m in info.mounts or ():  # the runtime binary every workload runs, unchanged (supervisor.py)
            if m.type == "bind" and m.destination == names.RUNTIME_BIN:
                await self.runtime.check(m.source)
        pair = bare_pair(self.ctx, sandbox_id, workload_name)
        try:
            await lifecycle.start(self.ctx.podman, pair, session(self.ctx, bundle, _userns(info)), generation)
        except PodmanError as exc:
            raise DriverError(f"starting the sandbox's pair failed: {exc.message}") from exc

    async def stop_supervisor(self, sandbox_id: str) -> None:
        """StopSandbox's first step (contract §4.3): the supervisor, until it exited."""
        await lifecycle.stop_supervisor(self.ctx.podman, bare_pair(self.ctx, sandbox_id, ""))

    async def remove_supervisor(self, sandbox_id: str) -> bool:
        return await self.ctx.podman.remove_container(names.supervisor_name(sandbox_id), self.ctx.settings.stop_timeout)

    async def remove_channel(self, sandbox_id: str) -> bool:
        return await self.ctx.podman.remove_volume(names.channel_volume_name(sandbox_id))


def _userns(info: ContainerInspect) -> str:
    """The workload's user namespace mode as its claims need it (keep-id or not)."""
    return info.host_config.userns_mode or ""


def fold(workload: ContainerInspect, supervisor: ContainerInspect | None) -> tuple[str, str, str] | None:
    """What the supervisor's state makes of a running workload's Ready (contract §4.6), as
    (status, reason, message): None when it changes nothing (a running supervisor without
    a health check: the workload's own condition stands). A running supervisor's health
    check result is the sandbox's; one made but not yet running is starting; a missing or
    exited one is gone (the driver then stops the workload)."""
    if supervisor is None:
        return _fold(workload.state.running, None)
    health = supervisor.state.health.status if supervisor.state.health and supervisor.config.checked else ""
    return _fold(workload.state.running, (supervisor.state.status, health, supervisor.state.exit_code))


def fold_listed(workload: ContainerListEntry, supervisor: ContainerListEntry | None) -> tuple[str, str, str] | None:
    """:func:`fold` from list entries (a list's health is its ``Status``'s, its check unseen)."""
    supervisor = _same_instance(workload, supervisor)
    if supervisor is None:
        return _fold(workload.state == "running", None)
    return _fold(workload.state == "running",
                 (supervisor.state, snapshots.listed_health(supervisor.status), supervisor.exit_code))


def _same_instance(workload: ContainerListEntry, supervisor: ContainerListEntry | None) -> ContainerListEntry | None:
    """The listed supervisor if it is this workload's (the same create's instance), else None."""
    instance = (workload.labels or {}).get(names.INSTANCE)
    if supervisor is None or (supervisor.labels or {}).get(names.INSTANCE) != instance:
        return None
    return supervisor


def at_odds(workload: ContainerListEntry, supervisor: ContainerListEntry | None) -> bool:
    """Whether a list shows the pair's halves in states that cannot stand outside a create,
    start or stop (contract §4.6): a running workload whose supervisor is not running (gone:
    the workload is stopped; made and never started: it is started), or a running supervisor
    whose workload ended (it is stopped). The observer's look at the workload mends each; a
    resync asks for it, since the event of the change can be missed (a supervisor removed
    while its look was in flight, a podmand killed between the pair's two starts)."""
    ours = _same_instance(workload, supervisor)
    supervising = ours is not None and ours.state == "running"
    if workload.state == "running":
        return not supervising
    return supervising and workload.state not in (*snapshots.NOT_STARTED, "stopping")


def unfinished(snap: pb.DriverSandbox, making: bool) -> None:
    """A snapshot of a pair whose create is unfinished (``making``: its launch bundle still
    kept): what its containers say is not the sandbox's end yet. A restarted podmand's resume
    clears what the killed one left (stopping it: an exit by signal, Stopping, a supervisor
    gone) and makes the pair again; a create that fails says so itself. So any such reason
    reads as starting."""
    ready = snap.status.conditions[0]
    if making and ready.status != "True" and ready.reason.lower() not in names.TRANSIENT_REASONS:
        ready.status, ready.reason, ready.message = "False", "ContainerStarting", "The sandbox's pair is being made"


def fold_into(snap: pb.DriverSandbox, folded: tuple[str, str, str] | None) -> None:
    """Set what :func:`fold` or :func:`fold_listed` said as the snapshot's Ready condition."""
    if folded is not None:
        ready = snap.status.conditions[0]
        ready.status, ready.reason, ready.message = folded


def _fold(running: bool, supervisor: tuple[str, str, int] | None) -> tuple[str, str, str] | None:
    if not running:
        return None
    if supervisor is None:
        return "False", SUPERVISOR_GONE, "The sandbox's supervisor container is missing"
    status, health, code = supervisor
    if status == "running":
        if health == "healthy":
            return "True", "HealthCheckPassed", "Supervisor health check passed"
        if health == "unhealthy":
            return "False", "HealthCheckFailed", "Supervisor health check failed"
        if health in ("starting", "reset"):  # reset: no result since an init or unpause (5.3 on)
            return "False", "HealthCheckStarting", "Waiting for the supervisor health check"
        if health == "stopped":  # 5.5 on: the last check cut short by a stop (snapshots.CHECK_STOPPED)
            return snapshots.CHECK_STOPPED.status, snapshots.CHECK_STOPPED.reason, snapshots.CHECK_STOPPED.message
        return None
    if status in snapshots.NOT_STARTED:
        return "False", "HealthCheckStarting", "The sandbox's supervisor container is starting"
    state = "has exited" if status in ("exited", "stopped") else f"is {status}"  # 4.3.1 and 6.1 also say stopped
    return "False", SUPERVISOR_GONE, f"The sandbox's supervisor container {state} (exit code {code})"


async def finish_start(podman: PodmanClient, sink: EventSink, supervisor_id: str, sandbox_id: str,
                       workload_id: str) -> None:
    """A supervisor made (its files uploaded) and never started beside its running workload: a
    start cut short between the two (a podmand killed there) is finished, as it would have."""
    log.warning("sandbox %s: its supervisor was never started; starting it", sandbox_id)
    with contextlib.suppress(PodmanError, PodmanUnavailable):  # gone or refused: the next look says so
        await podman.start_container(supervisor_id)
    sink.refresh(workload_id, sandbox_id)


async def supervisor_of(podman: PodmanClient, workload: ContainerInspect) -> ContainerInspect | None:
    """The workload's supervisor container, by name and labels (None: there is none)."""
    sandbox_id = workload.labels.get(names.SANDBOX_ID, "")
    info = await podman.inspect_container_or_none(names.supervisor_name(sandbox_id))
    if info is None or info.labels.get(names.SANDBOX_ID) != sandbox_id:
        return None
    if info.labels.get(names.INSTANCE) != workload.labels.get(names.INSTANCE):
        return None
    return info
