"""End to end: CPU and memory requests and limits as Podman receives them, and GPUs from
CDI spec files assigned round-robin, seen through podman-py and inside the containers.

Rootless Podman on a cgroup v1 host (as these test machines are) drops every limit and
request with a warning, so the values are checked through rootful Podman, where they
arrive; the rootless daemon's capability bits must say that they are not enforced. Each sandbox
is a pair: the limits bound the workload and its supervisor alike, a GPU is the workload's.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from tests.e2e.conftest import Podmand, containers_of, gateway_metadata, pair_of, run_in, sandbox, volumes_of
from tests.e2e.test_pair_lifecycle import podman_features

ROOTFUL = os.environ.get("PODMAN_ROOTFUL_SOCK", "/run/podman/podman.sock")
CGROUP_V2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
CDI_DIR = Path("/var/run/cdi")  # a directory Podman 4.3 reads CDI specs from (it has no setting for others)
SPEC = CDI_DIR / "podmand-e2e-gpus.yaml"
NODES = [Path(f"/dev/podmand-e2e-gpu{i}") for i in range(2)]


def with_resources(box: pb.DriverSandbox, **res: str) -> pb.DriverSandbox:
    box.spec.template.resources.CopyFrom(pb.DriverResourceRequirements(**res))
    return box


def cgroup_v1(container: Any, path: str) -> int:
    code, out, err = run_in(container, ["/bin/cat", f"/sys/fs/cgroup/{path}"])
    assert code == 0, err
    return int(out)


def test_requests_and_limits_reach_podman(make_podmand: Callable[..., Podmand]) -> None:
    """Template limits become quota and memory limit, requests CPU shares (kubelet mapping) and
    a memory reservation; with default limits set to "unlimited" a sandbox without limits gets
    no quota and no memory limit. Checked in Podman's inspect and in the container's cgroup."""
    daemon = make_podmand(
        {"PODMAND_DEFAULT_CPU_LIMIT": "unlimited", "PODMAND_DEFAULT_MEMORY_LIMIT": "unlimited"},
        user=None,
        socket=ROOTFUL,
    )
    watch = daemon.watch()
    sized = with_resources(sandbox(), cpu_limit="1500m", cpu_request="250m", memory_limit="512Mi",
                           memory_request="256Mi")
    loose = with_resources(sandbox(), cpu_request="500m", memory_request="64Mi")
    with podman.PodmanClient(base_url=f"unix://{ROOTFUL}") as client:
        try:
            caps = daemon.stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
            limits = caps.resource_capabilities
            supported = (limits.cpu.limit_supported, limits.memory.limit_supported)
            if supported == (False, False):  # rootful on a cgroup v2 with no controller (Podman 6.1.1's tree)
                daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sized))
                watch.wait_reason(sized.id, "ContainerRunning", 120)  # issue 32: no limit asked, so it starts
                for container in pair_of(client, sized.id):
                    hc = container.attrs["HostConfig"]
                    assert (hc["CpuQuota"], hc["CpuShares"], hc["Memory"], hc["PidsLimit"] or 0) == (0, 0, 0, 0), hc
                return
            assert supported == (True, True)  # rootful: enforced
            for box in (sized, loose):
                daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
            for box in (sized, loose):
                watch.wait_reason(box.id, "ContainerRunning", 120)
            [first] = containers_of(client, sized.id)
            [second] = containers_of(client, loose.id)
            hc = first.attrs["HostConfig"]
            assert (hc["CpuQuota"], hc["CpuPeriod"], hc["NanoCpus"]) == (150_000, 100_000, 1_500_000_000)
            assert (hc["CpuShares"], hc["Memory"], hc["MemoryReservation"]) == (256, 512 * 2**20, 256 * 2**20)
            # the supervisor is bounded as its workload is (as upstream's is)
            [supervisor] = containers_of(client, sized.id, "supervisor")
            shc = supervisor.attrs["HostConfig"]
            assert (shc["CpuQuota"], shc["CpuShares"], shc["Memory"], shc["MemoryReservation"]) == (
                150_000, 256, 512 * 2**20, 256 * 2**20)
            hc = second.attrs["HostConfig"]
            assert (hc["CpuQuota"], hc["NanoCpus"], hc["Memory"]) == (0, 0, 0)  # unlimited defaults
            assert (hc["CpuShares"], hc["MemoryReservation"]) == (512, 64 * 2**20)
            if not CGROUP_V2:  # what the kernel was told (v2 names these cpu.max, cpu.weight, memory.max/low)
                assert cgroup_v1(first, "cpu/cpu.cfs_quota_us") == 150_000
                assert cgroup_v1(first, "cpu/cpu.shares") == 256
                assert cgroup_v1(first, "memory/memory.limit_in_bytes") == 512 * 2**20
                assert cgroup_v1(first, "memory/memory.soft_limit_in_bytes") == 256 * 2**20
                assert cgroup_v1(second, "cpu/cpu.cfs_quota_us") == -1
                assert cgroup_v1(second, "cpu/cpu.shares") == 512
        finally:
            for box in (sized, loose):
                with contextlib.suppress(grpc.RpcError):
                    daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id))
                for item in [*pair_of(client, box.id), *volumes_of(client, box.id)]:
                    with contextlib.suppress(podman.errors.NotFound, podman.errors.APIError):
                        item.remove(force=True)


def _foreign_gpu_specs() -> list[Path]:
    """NVIDIA CDI specs of a real GPU host: this test's fake devices would collide with them."""
    found = []
    for directory in (Path("/etc/cdi"), CDI_DIR):
        for spec in sorted(directory.glob("*")) if directory.is_dir() else []:
            if spec != SPEC and spec.suffix in (".json", ".yaml") and "nvidia.com/gpu" in spec.read_text():
                found.append(spec)
    return found


@pytest.fixture
def fake_gpus() -> Iterator[None]:
    """Two "GPUs" Podman's CDI support resolves: nvidia.com/gpu=0 and =1, each a device node
    like /dev/null (rootless runtimes bind the host node at the same path into the container,
    as with /dev/nvidia0 on a GPU host). Removed afterwards."""
    if _foreign_gpu_specs():
        pytest.skip(f"this host has NVIDIA CDI specs ({_foreign_gpu_specs()}); the fake GPUs would collide")
    made_dir = not CDI_DIR.exists()
    CDI_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    try:
        for node in NODES:
            node.unlink(missing_ok=True)
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            os.chmod(node, 0o666)
        entries = "".join(
            f'- name: "{i}"\n  containerEdits:\n    deviceNodes:\n    - path: {node}\n' for i, node in enumerate(NODES)
        )
        SPEC.write_text(f'cdiVersion: "0.5.0"\nkind: nvidia.com/gpu\ndevices:\n{entries}')
        yield
    finally:
        SPEC.unlink(missing_ok=True)
        for node in NODES:
            node.unlink(missing_ok=True)
        if made_dir:
            with contextlib.suppress(OSError):
                CDI_DIR.rmdir()


def _devices(container: Any) -> set[str]:
    code, out, err = run_in(container, ["/bin/ls", "/dev"])
    assert code == 0, err
    return {f"/dev/{name}" for name in out.split()} & {str(n) for n in NODES}


def test_gpu_count_assigns_cdi_devices(
    fake_gpus: None, make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """With CDI devices in the default spec directories the GPU bits are true; validation
    peeks, each create takes the next device (a gpu request without count is one GPU); a
    count beyond the inventory is refused with upstream's text; the device is in the
    container. Without the spec file the bits turn false again (read at each call)."""
    daemon = make_podmand()  # rootless, default cdi_spec_dirs
    caps = daemon.stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
    gpu = caps.resource_capabilities.gpu
    assert (gpu.count_selection_supported, gpu.default_selection_supported) == (True, True)
    # rootless v1: dropped; a cgroup v2 without the cpu controller (6.1.1's tree): none either
    assert caps.resource_capabilities.cpu.limit_supported is ("cpu" in podman_features().limited)
    one = sandbox(resource_requirements=pb.ResourceRequirements(gpu=pb.GpuResourceRequirements()))
    two = sandbox(resource_requirements=pb.ResourceRequirements(gpu=pb.GpuResourceRequirements(count=1)))
    too_many = sandbox(resource_requirements=pb.ResourceRequirements(gpu=pb.GpuResourceRequirements(count=3)))
    cleanup.extend([one.id, two.id])
    with pytest.raises(grpc.RpcError) as err:
        daemon.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=too_many))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "GPU sandbox requested 3 GPUs, but only 2 selectable NVIDIA CDI GPU devices are available" in (
        err.value.details() or ""
    )
    watch = daemon.watch()
    for box in (one, two):
        daemon.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=box))  # peeks only
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        watch.wait_reason(box.id, "ContainerRunning", 120)
    [first] = containers_of(podman_client, one.id)
    [second] = containers_of(podman_client, two.id)
    assert _devices(first) == {str(NODES[0])}
    assert _devices(second) == {str(NODES[1])}
    [supervisor] = containers_of(podman_client, one.id, "supervisor")
    assert _devices(supervisor) == set()  # the GPU is the workload's alone
    assert f"sandbox {one.id}: assigned GPU(s) nvidia.com/gpu=0" in daemon.logs()
    SPEC.unlink()
    caps = daemon.stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
    assert caps.resource_capabilities.gpu.count_selection_supported is False
