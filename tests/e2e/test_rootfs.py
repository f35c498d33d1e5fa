"""Rootfs tar sources through the pex: advertised, staged as the gateway stages them,
imported, run (the imported image is the workload's, the supervisor's stays the supervisor
image), and the slot deleted; refusals touch nothing outside the staging directory."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import shutil
import signal
import tarfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import grpc
import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from tests.wait import wait_until

from .conftest import (
    SANDBOX_IMAGE,
    SUPERVISOR_IMAGE,
    USER,
    Podmand,
    containers_of,
    gateway_metadata,
    pair_of,
    run_in,
    sandbox,
    volumes_of,
)
from .test_conformance import policy

# The sandbox images' rootfs (tests/images/build.sh): Debian with python3, which the workload
# runtime stand-in needs. A tar that is run is made from it.
ROOTFS_TAR = Path("/var/cache/podmand-test/python-standin.tar")
# A small tar (the busybox rootfs: nothing can run the runtime in it), for what is only refused.
SANDBOX_TAR = Path("/var/cache/podmand-test/sandbox.tar")
LIMIT = 256 * 2**20  # over ROOTFS_TAR's size (about 160 MB); the oversized tar is a sparse file
IMPORTED = 120  # seconds to import ROOTFS_TAR and run the pair on a loaded host
WHERE = "sandbox.spec.template.driver_config.rootfs_tar_path"
REPOSITORY = "localhost/podmand-rootfs"


def stage(staging: Path, data: bytes | None = None, size: int = 0) -> Path:
    """A slot as the gateway makes one: a private req-<uuid> directory of its user (the
    same user as podmand), holding the tar (``size``: a sparse file of that many bytes)."""
    slot = staging / f"req-{uuid.uuid4()}"
    slot.mkdir(mode=0o700)
    tar = slot / "rootfs.tar"
    with open(tar, "wb") as fh:
        if data is not None:
            fh.write(data)
        else:
            fh.truncate(size)
    os.chmod(tar, 0o600)
    for path in (slot, tar):
        shutil.chown(path, USER, USER)
    return tar


def rootfs_tar(marker: str) -> bytes:
    """The test sandbox rootfs plus /etc/rootfs-marker, so the container shows it runs this tar."""
    buf = io.BytesIO(ROOTFS_TAR.read_bytes())
    with tarfile.open(fileobj=buf, mode="a") as tar:
        info = tarfile.TarInfo("etc/rootfs-marker")
        info.size = len(marker)
        tar.addfile(info, io.BytesIO(marker.encode()))
    return buf.getvalue()


def from_tar(path: Path | str, group: str = "sandbox") -> pb.DriverSandbox:
    # As the gateway sends it: template.image is its default image, driver_config the podman block
    # with the slot substituted; the policy's user and group (a rootfs tar declares no USER).
    box = sandbox(image=SANDBOX_IMAGE, **policy("sandbox", group))
    box.spec.template.driver_config.update({"rootfs_tar_path": str(path)})
    return box


def refused(daemon: Podmand, rpc: str, box: pb.DriverSandbox, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT
            ) -> str:
    call = getattr(daemon.stub, rpc)
    request = pb.CreateSandboxRequest if rpc == "CreateSandbox" else pb.ValidateSandboxCreateRequest
    with pytest.raises(grpc.RpcError) as err:
        call(request(sandbox=box))
    assert err.value.code() == code, err.value.details()
    return err.value.details() or ""


@pytest.fixture
def daemon(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> Iterator[Podmand]:
    yield make_podmand({"PODMAND_ROOTFS_MAX_BYTES": str(LIMIT)})
    for sandbox_id in cleanup:  # the containers first: an image in use is not removed
        for container in pair_of(podman_client, sandbox_id):
            with contextlib.suppress(podman.errors.APIError):
                container.remove(force=True)
    remove_rootfs_images(podman_client, cleanup)


def remove_rootfs_images(client: podman.PodmanClient, sandbox_ids: Iterable[str]) -> None:
    """What an aborted test left of its own sandboxes (the GC would, later), by name, so that
    an image with other names (the GC test tags the test sandbox image) is only untagged.
    Only this test's: another session on the same store has rootfs images of its own (removing
    them all once took a running sandbox's image from under its create)."""
    for sandbox_id in sandbox_ids:
        with contextlib.suppress(podman.errors.APIError):
            if client.images.exists(f"{REPOSITORY}:{sandbox_id}"):
                client.images.remove(f"{REPOSITORY}:{sandbox_id}")


def test_rootfs_tar_is_imported_run_and_its_slot_deleted(
    daemon: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """The staging directory is advertised (0700, podmand's user) with the limit; validation
    only looks; the create imports the tar, runs the workload from the image pinned by ID as
    the policy's user (the supervisor from the supervisor image), and deletes the slot;
    deleting the sandbox removes the image."""
    caps = daemon.stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
    staging = Path(caps.rootfs_tar_staging_dir)
    assert staging == (daemon.state_dir / "rootfs-staging").resolve() and caps.rootfs_tar_max_bytes == LIMIT
    st = staging.stat()
    assert (st.st_mode & 0o777, st.st_uid) == (0o700, pwd.getpwnam(USER).pw_uid)

    tar = stage(staging, rootfs_tar("from-the-tar"))
    box = from_tar(tar)
    cleanup.append(box.id)
    daemon.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=box))
    assert tar.exists()  # the gateway sends the same slot with the create
    watch = daemon.watch()
    created = daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box)).runtime_identity
    watch.wait_reason(box.id, "ContainerRunning", timeout=IMPORTED)
    assert not tar.parent.exists() and list(staging.iterdir()) == []
    # The gateway retries the same create after the import deleted the tar: the same sandbox.
    assert daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box)).runtime_identity == created

    ref = f"localhost/podmand-rootfs:{box.id}"
    imported = podman_client.images.get(ref)
    [container] = containers_of(podman_client, box.id)
    assert container.attrs["Image"] == imported.id != podman_client.images.get(SANDBOX_IMAGE).id
    assert run_in(container, ["/bin/cat", "/etc/rootfs-marker"])[1] == "from-the-tar"  # no PATH in the workload
    identity = json.loads(container.labels["io.podmand.identity"])  # the policy's user, found in the tar's passwd
    assert (identity["uid"], identity["gid"], identity["source"]) == (1000, 1000, "policy")
    assert container.attrs["Args"][:3] == ["launch-capability-free", "1000", "1000"]  # the runtime drops to it
    [supervisor] = containers_of(podman_client, box.id, "supervisor")
    assert supervisor.attrs["Image"] == podman_client.images.get(SUPERVISOR_IMAGE).id
    assert supervisor.attrs["Config"]["User"] == "1000:1000"

    daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id))
    assert not podman_client.images.exists(ref)


def test_refused_rootfs_tars_create_nothing_and_touch_nothing_outside(
    daemon: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """Outside the staging directory (directly, through a slot that is a symlink, or a
    tar that is one), or over the limit: INVALID_ARGUMENT naming the field, no container
    or volume, the outside file intact. A refused create deletes its tar and slot,
    whatever the reason (also a policy without the group a USER-less rootfs needs):
    a tar that is a symlink loses the link, never its target, and a slot that is a
    symlink is left as it is; validation deletes nothing."""
    staging = daemon.state_dir / "rootfs-staging"
    outside = daemon.workdir / "outside" / "rootfs.tar"
    outside.parent.mkdir()
    outside.write_bytes(SANDBOX_TAR.read_bytes())
    link = staging / f"req-{uuid.uuid4()}"
    link.symlink_to(outside.parent)
    inner = staging / f"req-{uuid.uuid4()}"
    inner.mkdir()
    shutil.chown(inner, USER, USER)
    (inner / "rootfs.tar").symlink_to(outside)
    big = stage(staging, size=LIMIT + 1)
    cases = [
        (outside, "must be inside the rootfs staging directory"),
        (link / "rootfs.tar", "resolves outside the rootfs staging directory"),
        (inner / "rootfs.tar", "is a symbolic link"),
        (big, f"is {LIMIT + 1} bytes, more than rootfs_max_bytes ({LIMIT})"),
    ]
    for path, needle in cases:
        box = from_tar(path)
        cleanup.append(box.id)
        message = refused(daemon, "ValidateSandboxCreate", box)
        assert message.startswith(f"{WHERE}: ") and needle in message, message
        assert path.exists() or path.is_symlink()
        message = refused(daemon, "CreateSandbox", box)
        assert message.startswith(f"{WHERE}: ") and needle in message, message
        assert outside.read_bytes() == SANDBOX_TAR.read_bytes()  # a symlink is unlinked, never followed
        assert containers_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []
        assert not podman_client.images.exists(f"localhost/podmand-rootfs:{box.id}")
    assert outside.read_bytes() == SANDBOX_TAR.read_bytes()
    # The refused creates' slots are gone (the tar that is a symlink: the link, not its
    # target); a slot that is a symlink is no slot podmand deletes through or removes.
    assert list(staging.iterdir()) == [link] and link.is_symlink()

    # A good tar, but a policy without a group: the image declares no USER to take it from.
    tar = stage(staging, SANDBOX_TAR.read_bytes())
    box = from_tar(tar, group="")
    cleanup.append(box.id)
    for rpc in ("ValidateSandboxCreate", "CreateSandbox"):
        message = refused(daemon, rpc, box, grpc.StatusCode.FAILED_PRECONDITION)
        assert message.startswith(f"{WHERE}: a rootfs tar declares no USER: ") and "name both" in message, message
        assert tar.exists() == (rpc == "ValidateSandboxCreate")
    assert containers_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []


def owned(path: Path, data: bytes | None = None) -> Path:
    """A directory (or, with ``data``, a file) as the gateway's user makes it."""
    if data is None:
        path.mkdir(mode=0o700)
    else:
        path.write_bytes(data)
    shutil.chown(path, USER, USER)
    return path


def test_paths_of_another_shape_are_refused_and_what_they_name_stays(
    daemon: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """Only <staging>/req-<uuid>/<file> is taken. A file below another tenant's slot, in
    a directory that is no slot, or in the staging directory itself: INVALID_ARGUMENT
    naming the field from validation and create alike, nothing created, and every
    file and directory there as it was (a refused create once rmtree'd the first
    component below the staging directory)."""
    staging = daemon.state_dir / "rootfs-staging"
    victim = stage(staging, SANDBOX_TAR.read_bytes())  # another tenant's slot, its tar staged
    owned(victim.parent / "sub")
    owned(victim.parent / "sub" / "keep", b"the other tenant's")
    victimdir = owned(staging / "victimdir")
    owned(victimdir / "keep", b"not a slot")
    loose = owned(staging / "x.tar", b"x" * 1024)  # a tar in the staging directory itself

    def tree() -> dict[str, bytes | None]:
        return {str(p.relative_to(staging)): p.read_bytes() if p.is_file() else None for p in staging.rglob("*")}

    before = tree()
    for path in (victim.parent / "sub" / "x.tar", victimdir / "x.tar", loose):
        box = from_tar(path)
        cleanup.append(box.id)
        messages = []
        for rpc in ("ValidateSandboxCreate", "CreateSandbox"):
            messages.append(refused(daemon, rpc, box))
            assert tree() == before, (rpc, path)
        for message in messages:
            assert message.startswith(f"{WHERE}: must name a file directly in a slot the gateway staged, "
                                      f"{staging.resolve()}/req-<uuid>/<file>"), message
        assert containers_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []
    assert victim.read_bytes() == SANDBOX_TAR.read_bytes()


def test_a_tar_podman_cannot_import_fails_the_sandbox_and_its_slot_is_deleted(
    daemon: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """Not a tar: the create is accepted (the import runs in the background), the sandbox
    fails with RootfsImportFailed and Podman's reason, the slot is gone, no container."""
    staging = daemon.state_dir / "rootfs-staging"
    tar = stage(staging, b"this is not a tar archive\n" * 100)
    box = from_tar(tar)
    cleanup.append(box.id)
    watch = daemon.watch()
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    snap = watch.wait_reason(box.id, "RootfsImportFailed")
    message = next(c.message for c in snap.status.conditions if c.type == "Ready")
    assert message.startswith("importing the rootfs tar failed: ") and "tar" in message[34:], message
    assert not tar.parent.exists()
    assert containers_of(podman_client, box.id) == []
    assert not podman_client.images.exists(f"localhost/podmand-rootfs:{box.id}")


def test_garbage_collection_untags_rootfs_images_of_sandboxes_that_are_gone(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient
) -> None:
    """A podmand-rootfs name whose sandbox has neither container nor volume is removed by
    name: an image that has other names (here the test sandbox image) is only untagged."""
    orphan = f"sb-gone-{uuid.uuid4().hex[:12]}"
    image = podman_client.images.get(SANDBOX_IMAGE)
    assert image.tag(REPOSITORY, orphan)
    try:
        daemon = make_podmand({"PODMAND_GC_GRACE": "0", "PODMAND_RESYNC_INTERVAL": "0.5"})
        # The log line comes once the whole collection is done, after the removal.
        wait_until(lambda: f"image:{REPOSITORY}:{orphan}" in daemon.logs(), what="the orphan collected")
        assert not podman_client.images.exists(f"{REPOSITORY}:{orphan}")
        assert podman_client.images.get(SANDBOX_IMAGE).id == image.id
    finally:
        remove_rootfs_images(podman_client, [orphan])


def test_a_create_killed_mid_import_is_finished_by_the_next_podmand(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """SIGKILL right after the create: the next podmand on the same state directory finishes
    it from the slot, or from the image if the import was done, and the slot is gone."""
    first = make_podmand()
    staging = Path(first.stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
                   .rootfs_tar_staging_dir)
    tar = stage(staging, rootfs_tar("after-a-restart"))
    box = from_tar(tar)
    cleanup.append(box.id)
    first.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    first.stop(signal.SIGKILL)
    second = make_podmand(start=False)
    second.workdir, second.state_dir, second.socket = first.workdir, first.state_dir, first.socket
    second.log_path = first.workdir / "podmand-2.log"
    second.env.update(PODMAND_STATE_DIR=str(first.state_dir), OPENSHELL_COMPUTE_DRIVER_SOCKET=first.socket)
    second.start()
    second.watch().wait_reason(box.id, "ContainerRunning", timeout=IMPORTED)
    [container] = containers_of(podman_client, box.id)
    assert run_in(container, ["/bin/cat", "/etc/rootfs-marker"])[1] == "after-a-restart"
    assert not tar.parent.exists()
    assert second.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
    assert not podman_client.images.exists(f"{REPOSITORY}:{box.id}")
