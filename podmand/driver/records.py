"""The durable record of a create: written before anything slow, read back after a restart.

A create request is recorded as the labels of the sandbox's workspace volume;
:func:`create` writes it and hands the sandbox to provisioning, :func:`resume`
finishes what the volumes say was asked when podmand starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from pathlib import Path

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..config import Settings
from ..errors import AlreadyExists, DriverError
from ..libpod import ContainerListEntry, PodmanError, PodmanUnavailable, VolumeInspect
from ..sandbox import rootfs, snapshots
from ..sandbox.plan import Plan
from ..sandbox.snapshots import Condition
from ..sandbox.spec import decode_intent, intent_labels, validate
from . import lookup
from .garbage import remove_stale_readers
from .pending import STOPPED_EARLY, STOPPED_EARLY_MESSAGE, Pending
from .provisioning import Provisioner

log = logging.getLogger("podmand.driver")


async def create(prov: Provisioner, sandbox: pb.DriverSandbox | None) -> str:
    """Record the request and start provisioning; the runtime identity. A staged
    rootfs tar belongs to the create from here on: provisioning deletes it after the
    import, and any refusal here deletes it at once, unless a create already
    accepted owns that slot (:func:`_slot_owned`). The path is the caller's: only one
    of the gateway's shape is deleted, and only that file and its emptied slot
    (:func:`rootfs.remove_slot`); any other path is refused and left alone."""
    try:
        plan = await prov.validator.validate(sandbox, staged=False, read=True)
        assert sandbox is not None
        async with prov.locks[plan.sandbox_id]:
            existing = await _existing(prov, plan)
            if existing is None:
                if plan.rootfs_tar:
                    prov.validator.check_rootfs(plan)
                instance = uuid.uuid4().hex
                existing = await _record(prov, plan, sandbox, instance)
                if existing is None:
                    prov.start(plan, instance)
                    return prov.runtime_identity(plan.sandbox_id, instance)
            if existing[0] == plan.spec_hash:
                return prov.runtime_identity(plan.sandbox_id, existing[1])  # an identical retry
            raise AlreadyExists("sandbox already exists with a different spec")
    except BaseException:
        if sandbox is not None and sandbox.spec.template.HasField("driver_config"):
            staged = sandbox.spec.template.driver_config.fields.get(rootfs.KEY)
            path = staged.string_value if staged is not None and staged.WhichOneof("kind") == "string_value" else ""
            if path and not await _slot_owned(prov, sandbox.id, path):
                rootfs.remove_slot(path, prov.ctx.settings)
        raise


async def _existing(prov: Provisioner, plan: Plan) -> tuple[str, str] | None:
    """(spec hash, instance) of a sandbox already recorded under this id, as far as is
    known without reading its volume unless there is a sign of one: provisioning, a
    container, or state files. None also when the volume alone records it
    (:func:`_record` finds that out by creating it). A rootfs create always reads it:
    its staged tar is checked only after an identical retry is ruled out."""
    pending = prov.get(plan.sandbox_id)
    if pending is not None:
        return pending.plan.spec_hash, pending.instance
    entry = await _container(prov, plan.sandbox_id)
    if entry is None and not plan.rootfs_tar and not prov.ctx.files.dir(plan.sandbox_id).exists():
        return None
    volume = await prov.ctx.podman.inspect_volume(plan.volume_name)
    labels = volume.labels if volume is not None else None
    if labels is None and entry is not None:  # a container recorded by its labels alone
        labels = entry.labels
    return _recorded(labels)


async def _container(prov: Provisioner, sandbox_id: str) -> ContainerListEntry | None:
    """The sandbox's container; none, without a call, when the index has every
    container and none of this sandbox (the common create)."""
    if prov.index.ready and prov.index.containers(sandbox_id) is None:
        return None
    return await lookup.find_indexed(prov.ctx.podman, prov.index, sandbox_id)


def _recorded(labels: dict[str, str] | None) -> tuple[str, str] | None:
    if labels is None:
        return None
    return labels.get(names.SPEC_HASH, ""), labels.get(names.INSTANCE, "")


async def _record(prov: Provisioner, plan: Plan, sandbox: pb.DriverSandbox, instance: str) -> tuple[str, str] | None:
    """Write the sandbox's files, then its durable record (the volume): None when made,
    else what the volume already there records. Files written here go again when no
    record is made."""
    try:
        prov.ctx.files.write_tls(plan.sandbox_id, _tls_files(prov.ctx.settings))
        # the pair's bundle (validate() required it), until the pair is made
        prov.ctx.files.write_launch(plan.sandbox_id, sandbox.spec.launch_authentication)
        prov.ctx.files.set_generation(plan.sandbox_id, plan.generation)
        labels = intent_labels(plan, instance, str(prov.ctx.state_dir))
        await prov.ctx.podman.create_volume(plan.volume_name, labels)
        return None
    except PodmanError as exc:
        prov.ctx.files.remove(plan.sandbox_id)
        if not _exists(exc):
            raise
        volume = await prov.ctx.podman.inspect_volume(plan.volume_name)
        if volume is None:  # removed again meanwhile
            raise
        return _recorded(volume.labels or {})
    except BaseException:
        prov.ctx.files.remove(plan.sandbox_id)
        raise


def _exists(exc: PodmanError) -> bool:
    """Podman 4.3.1 says 500 "volume already exists" (409 elsewhere)."""
    return exc.status == 409 or "already exists" in exc.message


def _tls_files(s: Settings) -> dict[str, Path]:
    if not s.tls_enabled:
        return {}
    return {"ca.crt": Path(s.tls_ca), "tls.crt": Path(s.tls_cert), "tls.key": Path(s.tls_key)}


async def _slot_owned(prov: Provisioner, sandbox_id: str, path: str) -> bool:
    """Whether a create already accepted owns the staging slot holding ``path``:
    one provisioning, or this sandbox's record not resumed yet. Refusing a
    request must not delete a tar that create is still to import."""
    want = rootfs.slot(path, prov.ctx.settings)
    if want is None:
        return False
    owned = prov.rootfs_tars()
    try:
        if prov.get(sandbox_id) is None and names.is_id(sandbox_id):
            volume = await prov.ctx.podman.inspect_volume(names.volume_name(sandbox_id))
            intent = (volume.labels or {}).get(names.INTENT, "") if volume is not None else ""
            if intent:
                recorded = validate(decode_intent(intent), prov.ctx.settings, podman=await prov.validator.features(),
                                    recorded=True)
                owned.append(recorded.rootfs_tar)
    except (DriverError, ValueError):
        pass  # an unusable record names no slot
    except Exception:  # cannot tell: keep the tar (the gateway deletes its slots too)
        return True
    return any(rootfs.slot(o, prov.ctx.settings) == want for o in owned if o)


async def recorded(prov: Provisioner) -> list[VolumeInspect]:
    """The durable records: every podmand-owned volume. Image readers a predecessor left
    are removed meanwhile (garbage.py; a cheap list: readers by name)."""
    podman = prov.ctx.podman
    volumes, _ = await asyncio.gather(
        podman.list_volumes([f"{names.OWNER}={names.OWNER_VALUE}"]), remove_stale_readers(podman, prov.ctx.state_dir)
    )
    return volumes


async def resume(
    prov: Provisioner, volumes: list[VolumeInspect], listed: list[ContainerListEntry] | None = None
) -> int:
    """Finish creates that the volumes (:func:`recorded`) record but that never reached
    a running container: none yet, or one created and never started (podmand was killed
    between the two). ``listed``: every managed container, when a list of them was just
    made (the hub's first); else one is made here.

    A create that failed terminally is reported with its failure again, and
    one whose container was removed while podmand was down is reported as
    such: neither is provisioned again behind the gateway's back."""
    entries = listed if listed is not None else await lookup.containers(prov.ctx.podman)
    have = {(e.labels or {}).get(names.SANDBOX_ID, ""): e for e in entries}
    resumed = 0
    for volume in volumes:
        labels = volume.labels or {}
        sandbox_id = labels.get(names.SANDBOX_ID, "")
        if not names.is_id(sandbox_id) or prov.get(sandbox_id) is not None or names.INTENT not in labels:
            continue
        if labels.get(names.STATE_DIR, str(prov.ctx.state_dir)) != str(prov.ctx.state_dir):
            continue  # recorded by another podmand sharing this Podman: its to finish
        entry = have.get(sandbox_id)
        if entry is not None and not _never_started(prov, sandbox_id, entry, labels):
            continue  # a container that ran (or was stopped): its state is reported as it is
        try:
            async with prov.locks[sandbox_id]:  # RPCs are already served: one owner at a time
                if prov.get(sandbox_id) is not None or await prov.ctx.podman.inspect_volume(volume.name) is None:
                    continue  # created or deleted meanwhile
                resumed += await _resume_one(prov, sandbox_id, labels, entry)
        except PodmanUnavailable:
            raise
        except Exception:  # one bad record must not keep podmand from serving the rest
            log.exception("sandbox %s: recorded create could not be resumed", sandbox_id)
    return resumed


def _never_started(prov: Provisioner, sandbox_id: str, entry: ContainerListEntry, intent: dict[str, str]) -> bool:
    """Created for this very create (same instance), never started, not stopped since; or
    a pair whose create did not finish (its launch bundle is dropped
    only once the pair is made: pairs.py)."""
    if (entry.labels or {}).get(names.INSTANCE) != intent.get(names.INSTANCE):
        return False
    if prov.ctx.files.stopped_container(sandbox_id):
        return False
    return entry.state in snapshots.NOT_STARTED or prov.ctx.files.making(sandbox_id)


async def _resume_one(
    prov: Provisioner, sandbox_id: str, labels: dict[str, str], entry: ContainerListEntry | None
) -> int:
    """Provision one recorded create again (1), or report why not (0)."""
    files = prov.ctx.files
    podman = await prov.validator.features()
    try:
        plan = validate(decode_intent(labels[names.INTENT]), prov.ctx.settings, podman=podman, recorded=True)
    except (DriverError, ValueError) as exc:
        log.warning("sandbox %s: recorded create request is unusable: %s", sandbox_id, exc)
        return 0
    plan = dataclasses.replace(plan, generation=files.generation(sandbox_id) or plan.generation)
    instance = labels.get(names.INSTANCE) or uuid.uuid4().hex
    if entry is None and files.stopped_container(sandbox_id) == STOPPED_EARLY:
        log.info("sandbox %s: stopped before its container existed; stays stopped", sandbox_id)
        ready = Condition("False", "ContainerStopped", STOPPED_EARLY_MESSAGE, snapshots.now())
        prov.add(Pending(plan, instance, ready, stopped=True))
        return 0
    failure = files.failure(sandbox_id)
    if failure is None and entry is None and files.created_container(sandbox_id):
        failure = ("ContainerRemoved", "The sandbox container was removed while podmand was not running")
    if failure is not None:
        if entry is not None:  # its start failed and its removal did not happen: finish that
            with contextlib.suppress(PodmanError):
                await prov.ctx.podman.remove_container(entry.id, 0)
        log.info("sandbox %s: reporting its failure (%s), not provisioning again", sandbox_id, failure[0])
        prov.add(Pending(plan, instance, Condition("False", *failure, snapshots.now())))
        return 0
    if not files.generation(sandbox_id):
        files.set_generation(sandbox_id, plan.generation)
    # With a created container, provisioning adopts it (same labels) and starts it.
    log.info("sandbox %s: resuming interrupted create%s", sandbox_id, " (starting its container)" if entry else "")
    prov.start(plan, instance)
    return 1
