"""The pair's lifecycle against Podman: create, start, stop and delete one sandbox's
workload and supervisor in the order of the Sandbox Protocol (contract §4), and undo
what a failed call made.

It owns the order and the side effects, nothing else: which call comes first (the
workload is created, fenced and filled before the supervisor exists; the supervisor
stops first and is removed first), what a start re-mints (every per-session file, from
the new bundle: new TLS, new ``auth.json`` over the old one) and what a failure leaves
(nothing this call made: its containers, then its volumes). Every decision (the specs,
the fence, the documents, the archives) is the pure modules'; this module only carries
their bytes to Podman. Failures leave as one error naming the step: the pure modules'
``DriverError`` as they raised it, Podman's errors with the step prefixed (their
status kept for the caller's mapping). The caller (the driver) makes and owns the
workspace volume (its durable record) before :func:`create`; :func:`delete` removes it.
"""

from __future__ import annotations

import asyncio
import io
import logging
import tarfile
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .. import names
from ..libpod import ContainerInspect, PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable
from ..security.tokens import LaunchAuthentication
from . import archives, documents, outerfence, tls

__all__ = [
    "Pair",
    "Session",
    "create",
    "delete",
    "discard",
    "read_restart_metadata",
    "start",
    "stop",
    "stop_supervisor",
]

log = logging.getLogger(__name__)
T = TypeVar("T")
_METADATA_MAX = 1024 * 1024  # bytes of the restart metadata's tar read back, at most
_WAIT_GRACE = 5  # seconds past the stop timeout to see a stopped container exited
_RUNNING = ("running", "paused", "stopping")


@dataclass(frozen=True)
class Pair:
    """One sandbox's two containers (their libpod specs, ``specs.workload_spec`` and
    ``specs.supervisor_spec``) and its two volumes."""

    sandbox_id: str
    workload: Mapping[str, Any]
    supervisor: Mapping[str, Any]
    workspace_volume: str
    channel_labels: Mapping[str, str]
    stop_timeout: int
    workspace_path: str = names.WORKSPACE_PATH  # the workspace volume's destination (``Provision.workspace``)
    channel_volume: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "channel_volume", names.channel_volume_name(self.sandbox_id))

    @property
    def workload_name(self) -> str:
        return str(self.workload["name"])

    @property
    def supervisor_name(self) -> str:
        return str(self.supervisor["name"])


@dataclass(frozen=True, repr=False)
class Session:
    """What one launch's documents need besides the workload: the gateway's bundle, the
    supervisor's host-gateway address and the workload's user namespace mode (its claims)."""

    bundle: LaunchAuthentication
    host_gateway_ip: str
    userns: str = ""

    def __repr__(self) -> str:
        return f"Session(<bundle redacted>, host_gateway_ip={self.host_gateway_ip!r}, userns={self.userns!r})"


async def _step(what: str, call: Awaitable[T]) -> T:
    """``call``, with Podman's errors naming ``what`` this module was doing."""
    try:
        return await call
    except PodmanError as exc:
        raise PodmanError(exc.status, f"{what}: {exc.message}") from None
    except PodmanUnavailable as exc:
        raise PodmanUnavailable(f"{what}: {exc}") from None
    except PodmanUnreadable as exc:
        raise PodmanUnreadable(f"{what}: {exc}") from None


UPLOAD_TRIES = 3


async def _upload(client: PodmanClient, container: str, path: str, tar: bytes, what: str) -> None:
    """Podman's extracting helper can die mid-stream on a loaded host ("write |1: broken pipe",
    seen on 4.3.1 and 5.8.6): the same archive again writes the same files, a bounded few times."""
    for attempt in range(1, UPLOAD_TRIES + 1):
        try:
            await _step(f"upload the {what} to {container}:{path}", client.put_archive(container, path, tar))
            return
        except PodmanError as exc:
            if attempt == UPLOAD_TRIES or "broken pipe" not in exc.message:
                raise


async def _mint(
    client: PodmanClient, pair: Pair, session: Session, generation: str,
    identity: documents.WorkloadIdentity, child_env: dict[str, str],
) -> documents.Documents:
    """This launch's files: the fence checked on the workload's inspect (FailedPrecondition
    when it does not hold), fresh TLS, the documents bound to the workload's ID."""
    inspect = await _step(f"inspect the workload {pair.workload_name}", client.inspect_container(pair.workload_name))
    fence = outerfence.outer_fence(session.bundle.supervisor.runtime_generation, inspect)
    return documents.documents(documents.Launch(
        sandbox_id=pair.sandbox_id,
        container_id=inspect.id,
        generation=generation,
        host_gateway_ip=session.host_gateway_ip,
        identity=identity,
        claims=documents.resource_claims(inspect.id, identity, session.userns),
        child_env=child_env,
        bundle=session.bundle,
        fence=fence,
        tls=tls.mint(session.bundle.supervisor.session_id),
    ))


async def _start_both(client: PodmanClient, pair: Pair) -> None:
    """The workload, then the supervisor; a supervisor that does not start stops the
    workload again (no workload runs without its supervisor)."""
    await _step(f"start the workload {pair.workload_name}", client.start_container(pair.workload_name))
    try:
        await _step(f"start the supervisor {pair.supervisor_name}", client.start_container(pair.supervisor_name))
    except BaseException:
        await _quietly(f"stop the workload {pair.workload_name}", lambda: client.stop_container(pair.workload_name, 0))
        raise


async def _quietly(what: str, call: Callable[[], Awaitable[Any]]) -> None:
    """An undo step: shielded from cancellation, its failure logged (the caller reports
    the error that made it undo)."""
    try:
        await asyncio.shield(call())
    except (PodmanError, PodmanUnavailable, PodmanUnreadable) as exc:
        log.warning("pair: could not %s: %s", what, exc)


async def create(
    client: PodmanClient, pair: Pair, session: Session, identity: documents.WorkloadIdentity,
    child_env: dict[str, str], *, start: Callable[[], bool] = lambda: True,
) -> str:
    """Make and start the pair (contract §4.1, step 8): the channel volume, the workload
    (stopped), the fence, the channel and workspace archives, the supervisor (stopped)
    and its archive, then start the workload and the supervisor unless ``start()`` says
    no by then (the sandbox was stopped while Podman made it: the pair stays made,
    stopped). The workload's ID. On any failure what this call made is removed
    (containers, then the volume)."""
    made_containers: list[str] = []
    made_volumes: list[str] = []
    try:
        await _step(f"create the channel volume {pair.channel_volume}",
                    client.create_volume(pair.channel_volume, pair.channel_labels))
        made_volumes.append(pair.channel_volume)
        workload_id, _ = await _step(f"create the workload {pair.workload_name}",
                                     client.create_container(pair.workload))
        made_containers.append(pair.workload_name)
        docs = await _mint(client, pair, session, str(uuid.uuid4()), identity, child_env)
        await _upload(client, pair.workload_name, names.CHANNEL_DIR, archives.channel(docs, identity),
                      "channel archive")
        await _upload(client, pair.workload_name, pair.workspace_path, archives.workspace(identity),
                      "workspace archive")
        await _step(f"create the supervisor {pair.supervisor_name}", client.create_container(pair.supervisor))
        made_containers.append(pair.supervisor_name)
        await _upload(client, pair.supervisor_name, "/", archives.supervisor(docs, identity), "supervisor archive")
        if start():
            await _start_both(client, pair)
        return workload_id
    except BaseException:
        for name in reversed(made_containers):  # the supervisor first
            await _quietly(f"remove {name}", lambda n=name: client.remove_container(n, 0))  # type: ignore[misc]
        for volume in made_volumes:
            await _quietly(f"remove the volume {volume}", lambda v=volume: client.remove_volume(v))  # type: ignore[misc]
        raise


async def _halt(client: PodmanClient, name: str, timeout: int) -> ContainerInspect | None:
    """Stop ``name`` if it runs and wait until Podman says it exited; its inspect before,
    None when there is no such container."""
    inspect = await _step(f"inspect {name}", client.inspect_container_or_none(name))
    if inspect is None or inspect.state.status not in _RUNNING:
        return inspect
    try:
        await _step(f"stop {name}", client.stop_container(name, timeout))
        await asyncio.wait_for(client.wait_container(name), timeout + _WAIT_GRACE)
    except TimeoutError:
        raise PodmanUnavailable(f"stop {name}: it did not exit within {timeout + _WAIT_GRACE} s") from None
    except PodmanError as exc:
        if not exc.gone:
            raise
        # removed since the inspect (out of band, or its --rm): it has ended all the same
    return inspect


async def stop_supervisor(client: PodmanClient, pair: Pair) -> None:
    """The supervisor stopped until exited (a stop's first step); nothing when there is none."""
    await _halt(client, pair.supervisor_name, pair.stop_timeout)


async def discard(client: PodmanClient, pair: Pair) -> None:
    """Undo a made pair (its record could not be kept): the supervisor, the workload and
    the channel volume removed, each failure logged."""
    for name in (pair.supervisor_name, pair.workload_name):
        await _quietly(f"remove {name}", lambda n=name: client.remove_container(n, 0))  # type: ignore[misc]
    await _quietly(f"remove the volume {pair.channel_volume}", lambda: client.remove_volume(pair.channel_volume))


async def stop(client: PodmanClient, pair: Pair) -> bool:
    """Stop the supervisor, then the workload, each until exited (contract §4.3). False
    when there is no workload (the supervisor is stopped all the same)."""
    await _halt(client, pair.supervisor_name, pair.stop_timeout)
    return await _halt(client, pair.workload_name, pair.stop_timeout) is not None


async def read_restart_metadata(client: PodmanClient, pair: Pair) -> documents.RestartMetadata:
    """``restart-metadata.json`` read back from the supervisor's root filesystem."""
    what = f"read {names.RESTART_METADATA_PATH} from {pair.supervisor_name}"
    data = bytearray()

    async def fetch() -> None:
        async with client.archive(pair.supervisor_name, names.RESTART_METADATA_PATH) as chunks:
            async for chunk in chunks:
                data.extend(chunk)
                if len(data) > _METADATA_MAX:
                    raise PodmanUnreadable(f"the archive is over {_METADATA_MAX} bytes")

    await _step(what, fetch())
    if not data:  # the copy failed once the answer had begun (Podman logs why)
        raise PodmanUnavailable(f"{what}: Podman answered an empty archive; its log says why")
    try:
        with tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r:") as tar:
            member = next((m for m in tar.getmembers() if m.isfile()), None)
            extracted = tar.extractfile(member) if member is not None else None
            content = extracted.read() if extracted is not None else None
    except tarfile.TarError as exc:
        raise PodmanUnreadable(f"{what}: not a tar archive: {exc}") from None
    if content is None:
        raise PodmanUnreadable(f"{what}: the archive holds no file")
    return documents.read_restart_metadata(content, names.RESTART_METADATA_PATH)


CLEANUP_WAIT = 30.0  # seconds a start waits for Podman's cleanup of a container that ended


async def _cleaned_up(client: PodmanClient, name: str) -> None:
    """Until Podman has cleaned ``name`` up after its end (its state "stopped" becomes
    "exited"), within CLEANUP_WAIT. Podman's archive calls use a container still mounted from
    its run as they find it, and the cleanup that follows every end unmounts it under them
    (``copyToArchive``, ``copyFromArchive``: libpod at v4.3.1 and v5.4.2): a read answers 200
    and an empty body, and a write can go nowhere. Once cleaned up, the archive call mounts the
    container itself. Past the bound (a cleanup that never ran leaves the container mounted,
    and nothing unmounts it) the start goes on."""
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + CLEANUP_WAIT, 0.05
    while loop.time() < deadline:
        info = await _step(f"inspect {name}", client.inspect_container_or_none(name))
        if info is None or info.state.status != "stopped":
            return
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.5)


async def start(client: PodmanClient, pair: Pair, session: Session, generation: str) -> None:
    """Start the pair again for a new launch (contract §4.2): stop the supervisor (and a
    running workload), wait for Podman's cleanup of both, read the restart metadata back,
    re-mint every per-session file from ``session``'s bundle (new TLS; ``auth.json``
    replaced, so no token of an earlier launch is left) with ``generation`` recorded,
    re-check the fence, start both."""
    await _halt(client, pair.supervisor_name, pair.stop_timeout)
    await _halt(client, pair.workload_name, 0)
    for name in (pair.supervisor_name, pair.workload_name):
        await _cleaned_up(client, name)
    meta = await read_restart_metadata(client, pair)
    identity = meta.workload_identity
    docs = await _mint(client, pair, session, generation, identity, meta.child_env)
    await _upload(client, pair.workload_name, names.CHANNEL_DIR, archives.channel(docs, identity), "channel archive")
    await _upload(client, pair.supervisor_name, "/", archives.supervisor(docs, identity), "supervisor archive")
    await _start_both(client, pair)


async def delete(client: PodmanClient, pair: Pair) -> bool:
    """Remove the supervisor, the workload, the channel volume and the workspace volume
    (contract §4.4); whether the workload was there."""
    await _step(f"remove the supervisor {pair.supervisor_name}",
                client.remove_container(pair.supervisor_name, pair.stop_timeout))
    existed = await _step(f"remove the workload {pair.workload_name}",
                          client.remove_container(pair.workload_name, pair.stop_timeout))
    for volume in (pair.channel_volume, pair.workspace_volume):
        await _step(f"remove the volume {volume}", client.remove_volume(volume))
    return existed
