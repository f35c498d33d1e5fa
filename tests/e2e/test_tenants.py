"""Tenants cannot touch each other (issue 19), through the pex against real rootless
Podman: a caller's image cannot pose as another tenant's sandbox, cannot take the
shared driver's memory, and cannot be another sandbox's imported rootfs."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import podman
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from tests.standin.launch import Launch
from tests.wait import wait_until

from .conftest import (
    DEADLINE,
    SANDBOX_IMAGE,
    Podmand,
    Watch,
    containers_of,
    gateway_metadata,
    pair_of,
    ready,
    sandbox,
    volumes_of,
)
from .test_conformance import policy
from .test_rootfs import IMPORTED, REPOSITORY, daemon, from_tar, rootfs_tar, stage

__all__ = ["daemon"]  # the rootfs tests' fixture: a podmand that takes rootfs tars

ROOT_IMAGE = "localhost/podmand-test/sandbox-root:1"  # the test rootfs with USER root: a shell that may write /etc


@contextlib.contextmanager
def image_from(client: podman.PodmanClient, changes: list[str], script: str = "", base: str = SANDBOX_IMAGE
               ) -> Iterator[str]:
    """An image made from ``base`` (after running ``script`` in it, as root) with ``changes``
    (Dockerfile instructions as podman commit takes them) and USER sandbox; removed afterwards."""
    ref = f"localhost/podmand-test/tenant-{uuid.uuid4().hex[:8]}:1"
    container = client.containers.create(base, ["/bin/sh", "-c", script or "true"], user="0")
    try:
        if script:
            container.start()
            assert container.wait() == 0, container.logs()
        repository, tag = ref.rsplit(":", 1)
        container.commit(repository=repository, tag=tag, changes=[*changes, "USER=sandbox"])
    finally:
        container.remove(force=True)
    try:
        yield ref
    finally:
        with contextlib.suppress(podman.errors.APIError):
            client.images.remove(ref, force=True)


def refused(call: Any, request: Any, code: grpc.StatusCode, *needles: str) -> str:
    with pytest.raises(grpc.RpcError) as err:
        call(request)
    details = err.value.details() or ""
    assert err.value.code() == code, details
    for needle in needles:
        assert needle in details, details
    return details


def container_events(client: podman.PodmanClient, since: int, label: str) -> list[dict[str, Any]]:
    """Podman's own record: every container event since ``since`` of containers with ``label``."""
    until = int(time.time()) + 1
    return list(client.events(since=since, until=until, filters={"label": label, "type": "container"}, decode=True))


# ---------------------------------------------------------------- an image posing as another sandbox


def instances(watch: Watch, sandbox_id: str) -> set[str]:
    """The containers the stream's snapshots of the sandbox named (none while provisioning)."""
    return {s.status.instance_id for s in watch.snapshots(sandbox_id) if s.status.instance_id}


def test_an_image_bearing_a_victims_labels_is_refused_and_cannot_pose_as_it(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """Podman copies an image's labels onto every container made from it. An attacker's
    image labelled as the victim's sandbox is refused before anything is made from it (no
    reader either: Podman's events show no container with the victim's id but its pair); and
    a container that carries the victim's workload's labels, or its supervisor's, under any
    other name is never taken for either: not by the watch stream, GetSandbox, ListSandboxes,
    StopSandbox, StartSandbox nor DeleteSandbox."""
    since = int(time.time()) - 1
    watch = driver.watch()
    victim = sandbox(name="victim")
    cleanup.append(victim.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=victim))
    watch.wait_reason(victim.id, "ContainerRunning")
    [mine] = containers_of(podman_client, victim.id)
    [its_supervisor] = containers_of(podman_client, victim.id, "supervisor")
    own = f"{mine.id[:12]}"
    posed = {k: mine.labels[k] for k in (names.MANAGED, names.OWNER, names.SANDBOX_ID, names.SANDBOX_NAME,
                                         names.SANDBOX_WORKSPACE, names.INSTANCE, names.ISOLATION_ROLE)}
    with image_from(podman_client, [f"LABEL={k}={v}" for k, v in posed.items()]) as hostile:
        attacker = sandbox(image=hostile)
        cleanup.append(attacker.id)
        for call, request in ((driver.stub.ValidateSandboxCreate, pb.ValidateSandboxCreateRequest(sandbox=attacker)),
                              (driver.stub.CreateSandbox, pb.CreateSandboxRequest(sandbox=attacker))):
            refused(call, request, grpc.StatusCode.FAILED_PRECONDITION, "sandbox.spec.template.image", hostile,
                    "reserved for OpenShell and podmand")
        assert containers_of(podman_client, attacker.id) == [] and volumes_of(podman_client, attacker.id) == []
        label = f"{names.SANDBOX_ID}={victim.id}"
        assert {e["Actor"]["ID"] for e in container_events(podman_client, since, label)} == {mine.id,
                                                                                               its_supervisor.id}

        # A container with the victim's every label under another name (as an image reader
        # of that image was), and one with its supervisor's: podmand's event subscription sees
        # them start.
        impostor = podman_client.containers.create(hostile, ["sleep", "600"], name=f"podmand-read-{victim.id}")
        sup_impostor = podman_client.containers.create(
            SANDBOX_IMAGE, ["sleep", "600"], name=f"impostor-sup-{victim.id}", labels=dict(its_supervisor.labels))
        try:
            impostor.start()
            sup_impostor.start()
            marker = sandbox(name="marker")  # a create after the impostor's start: the hub saw both by then
            cleanup.append(marker.id)
            driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=marker))
            watch.wait_reason(marker.id, "ContainerRunning")
            assert instances(watch, victim.id) == {own}
            fresh = driver.watch()
            try:
                first = wait_until(lambda: fresh.latest(victim.id), DEADLINE, "the new stream's snapshot")
                assert first.status.instance_id == own
            finally:
                fresh.cancel()
            got = driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=victim.id)).sandbox
            assert got.status.instance_id == own
            listed = [s for s in driver.stub.ListSandboxes(pb.ListSandboxesRequest()).sandboxes if s.id == victim.id]
            assert [s.status.instance_id for s in listed] == [own]

            driver.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=victim.id))
            for c in (mine, its_supervisor, impostor, sup_impostor):
                c.reload()
            assert [c.status for c in (mine, its_supervisor, impostor, sup_impostor)] == [
                "exited", "exited", "running", "running"]
            driver.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=victim.id,
                                                            launch_authentication=Launch(sandbox_id=victim.id).bundle()))
            watch.wait_reason(victim.id, "ContainerRunning")
            for c in (its_supervisor, impostor, sup_impostor):
                c.reload()
            assert [c.status for c in (its_supervisor, impostor, sup_impostor)] == ["running"] * 3
            assert instances(watch, victim.id) == {own}

            assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=victim.id)).deleted
            wait_until(lambda: watch.deleted(victim.id), DEADLINE, "the victim's Deleted")
            refused(driver.stub.GetSandbox, pb.GetSandboxRequest(sandbox_id=victim.id), grpc.StatusCode.NOT_FOUND)
            for c in (impostor, sup_impostor):  # the delete acted on the victim's pair only
                c.reload()
                assert c.status == "running"
            assert {c.id for c in pair_of(podman_client, victim.id)} == {impostor.id, sup_impostor.id}
        finally:
            impostor.remove(force=True)
            sup_impostor.remove(force=True)


# ---------------------------------------------------------------- an image taking the driver's memory


def peak_rss_kib(daemon: Podmand) -> int:
    """The highest resident size any of podmand's processes has reached (VmHWM)."""
    peaks = []
    for pid in daemon.pids() or [daemon.proc.pid]:  # type: ignore[union-attr]
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]))
    return max(peaks)


BIG = 96  # MiB of /etc/passwd: well over the limit, and over what podmand may take


def test_an_image_with_a_huge_account_file_fails_terminally_and_costs_podmand_no_memory(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """An /etc/passwd of 96 MiB is refused at its tar header, before its data is read: the
    sandbox fails with WorkloadIdentityInvalid naming the file and the limit, nothing is
    created, and podmand's peak resident size grows by far less than the file."""
    script = f"cp /etc/passwd /tmp/p && dd if=/dev/zero bs=1048576 count={BIG} >> /tmp/p && mv /tmp/p /etc/passwd"
    with image_from(podman_client, [], script, base=ROOT_IMAGE) as hostile:
        warm = sandbox()  # podmand's own start-up costs (supervisor extraction, first create) come first
        cleanup.append(warm.id)
        watch = driver.watch()
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=warm))
        watch.wait_reason(warm.id, "ContainerRunning")
        before = peak_rss_kib(driver)
        box = sandbox(image=hostile)
        cleanup.append(box.id)
        driver.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=box))  # validation reads no file
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        snap = watch.wait_reason(box.id, "WorkloadIdentityInvalid")
        message = ready(snap).message  # type: ignore[union-attr]
        assert "/etc/passwd" in message and "1024 KiB" in message, message
        grown = peak_rss_kib(driver) - before
        assert grown < 16 * 1024, f"podmand's peak RSS grew by {grown} KiB reading a {BIG} MiB file"
        assert containers_of(podman_client, box.id) == []
        # terminal: a restart does not try again (the failure is recorded, not retried)
        assert (driver.state_dir / "sandboxes" / box.id / "failed").exists()
        assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


# ---------------------------------------------------------------- another sandbox's imported rootfs


def test_an_imported_rootfs_runs_only_in_the_sandbox_that_imported_it(
    daemon: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """Another tenant names the owner's imported rootfs by its name, its short name, its
    image ID or an ID prefix: each is refused, naming the field, and nothing is made."""
    caps = daemon.stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
    owner = from_tar(stage(Path(caps.rootfs_tar_staging_dir), rootfs_tar("the-owners")))
    cleanup.append(owner.id)
    watch = daemon.watch()
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=owner))
    watch.wait_reason(owner.id, "ContainerRunning", timeout=IMPORTED)
    image_id = podman_client.images.get(f"{REPOSITORY}:{owner.id}").id
    by_name = (f"{REPOSITORY}:{owner.id}", f"podmand-rootfs:{owner.id}")
    by_id = (image_id, image_id.removeprefix("sha256:")[:12])
    for image, code in [*((n, grpc.StatusCode.INVALID_ARGUMENT) for n in by_name),
                        *((i, grpc.StatusCode.FAILED_PRECONDITION) for i in by_id)]:
        other = sandbox(image=image, **policy("sandbox", "sandbox"))  # as the owner's: a rootfs declares no USER
        cleanup.append(other.id)
        for call, request in ((daemon.stub.ValidateSandboxCreate, pb.ValidateSandboxCreateRequest(sandbox=other)),
                              (daemon.stub.CreateSandbox, pb.CreateSandboxRequest(sandbox=other))):
            refused(call, request, code, "sandbox.spec.template.image", "only by the sandbox that imported it")
        assert containers_of(podman_client, other.id) == [] and volumes_of(podman_client, other.id) == []
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=owner.id)).deleted


def test_reading_an_image_with_volumes_leaves_no_volume(
    make_podmand: Any, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """An image's VOLUMEs are not made for podmand's reader of it: Podman would make each an
    anonymous volume, which the reader's removal leaves behind. The runtime image here (the
    split topology reads its openshell-sandbox; the supervisor image is only run) declares two
    and lacks the binary, so its reader is the only container made from it."""
    with image_from(podman_client, ["VOLUME=/data", "VOLUME=/etc/more"], "mkdir -p /data /etc/more") as image:
        before = {v.name for v in podman_client.volumes.list()}
        daemon = make_podmand({"OPENSHELL_SANDBOX_RUNTIME_IMAGE": image})
        watch = daemon.watch()
        box = sandbox()
        cleanup.append(box.id)
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        watch.wait_reason(box.id, "RuntimeImageUnavailable", timeout=60)
        assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
        left = {v.name for v in podman_client.volumes.list()} - before
        try:
            assert left == set()
        finally:
            for name in left:
                podman_client.volumes.get(name).remove(force=True)
