"""driver_config mounts and SELinux labels through the pex, checked in Podman and in the sandbox.
Under the split topology the caller's mounts are the workload's; its supervisor gets none of them.

This host has no SELinux: ``--selinux=on`` shows that podmand sends Podman the labels
(``z``/``Z``) and that a Podman without SELinux accepts them and runs the sandbox.
Podman 4.3 drops ``U``, ``z`` and ``Z`` from a container's inspect once it has started
(they are acted on, then forgotten), so the labels are read from the create request
Podman received, through a recording relay in front of its socket. Whether an
enforcing host then lets the runtime read its files cannot be checked here.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import podman
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from tests.standin.launch import Launch

from .conftest import SUPERVISOR_IMAGE, Podmand, containers_of, podman_version, run_in, sandbox
from .test_hardening_input import create, nothing_created, refused, running

OPEN = {
    "PODMAND_ALLOW_DRIVER_CONFIG": "true",
    "OPENSHELL_ENABLE_BIND_MOUNTS": "true",
    "PODMAND_RESOURCE_ADMISSION": "false",
    "PODMAND_ALLOW_HOST_USERNS": "true",
    "PODMAND_ALLOW_USERNS_OWN_UID": "true",
    "PODMAND_SELINUX": "on",
}


class Recorder:
    """A pass-through Unix socket in front of Podman's API that keeps every request sent through it."""

    def __init__(self, path: str, upstream: str) -> None:
        self.upstream = upstream
        self.sent: list[bytearray] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        os.chmod(path, 0o666)
        self.server.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed
                return
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            up.connect(self.upstream)
            record = bytearray()
            self.sent.append(record)
            threading.Thread(target=self._pump, args=(conn, up, record), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, conn, None), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, record: bytearray | None) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if record is not None:
                    record += data
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def created(self, name: str) -> dict[str, Any]:
        """The body of the container create request for container ``name``."""
        for record in list(self.sent):
            data = bytes(record)
            start = 0
            while (at := data.find(b"/containers/create", start)) >= 0:
                start = at + 1
                head, _, rest = data[at:].partition(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                body = json.loads(rest[:length])
                if body.get("name") == name:
                    return body  # type: ignore[no-any-return]
        raise AssertionError(f"no create request for {name}")

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def recorded(make_podmand: Callable[..., Podmand], podman_socket: str) -> Iterator[tuple[Podmand, Recorder]]:
    """A podmand (not started yet) whose Podman API is reached through a :class:`Recorder`."""
    daemon = make_podmand(OPEN, start=False)
    relay = Recorder(str(daemon.workdir / "podman.sock"), podman_socket)
    daemon.env["OPENSHELL_PODMAN_SOCKET"] = str(daemon.workdir / "podman.sock")
    yield daemon, relay
    relay.close()


@pytest.fixture
def volume(podman_client: podman.PodmanClient) -> Iterator[Any]:
    vol = podman_client.volumes.create(f"mounts-{uuid.uuid4().hex[:10]}")
    yield vol
    with contextlib.suppress(podman.errors.NotFound):
        vol.remove(force=True)


def with_mounts(*mounts: dict[str, Any], host_userns: bool = False) -> pb.DriverSandbox:
    box = sandbox()
    box.spec.template.driver_config.update({"mounts": list(mounts)})
    if host_userns:
        box.spec.template.user_namespaces = False
    return box


# The workload has no environment (its processes get bootstrap.json's): no PATH for an exec, so
# every command here is named by its path.


def by_destination(container: Any) -> dict[str, dict[str, Any]]:
    return {m["Destination"]: m for m in container.attrs["Mounts"]}


def test_mounts_and_selinux_labels(
    recorded: tuple[Podmand, Recorder], podman_client: podman.PodmanClient, cleanup: list[str], volume: Any,
    tmp_path: Path,
) -> None:
    """A tmpfs (options, size, mode), a named volume, a privately labelled bind and, in the
    host userns, an image mount: what Podman recorded and what the workload sees, with
    podmand's own binds labelled (Z for the per-sandbox resolv.conf, z for the shared runtime
    binary); the supervisor is made with none of the caller's mounts."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hello").write_text("from the host\n")
    for p in (tmp_path, shared, shared / "hello"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    daemon, relay = recorded
    daemon.start()
    watch = daemon.watch()
    box = with_mounts(
        {"type": "tmpfs", "target": "/scratch", "options": ["rw", "noexec", "nosuid"], "size_bytes": 2 * 2**20,
         "mode": 0o1770},
        {"type": "volume", "source": volume.name, "target": "/data", "read_only": False},
        {"type": "bind", "source": str(shared), "target": "/shared", "selinux_label": "private"},
    )
    imaged = with_mounts({"type": "image", "source": SUPERVISOR_IMAGE, "target": "/img"}, host_userns=True)
    cleanup += [box.id, imaged.id]
    for b in (box, imaged):
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=b))
    watch.wait_reason(box.id, "ContainerRunning", timeout=60)
    watch.wait_reason(imaged.id, "ContainerRunning", timeout=60)

    [container] = containers_of(podman_client, box.id)
    created = relay.created(container.name)
    sent = {m["destination"]: m["options"] for m in created["mounts"]}
    assert sent[names.RUNTIME_BIN] == ["rbind", "ro", "z"]
    assert sent[names.RESOLV_CONF] == ["bind", "ro", "U", "Z"]
    assert sent["/shared"] == ["rbind", "ro", "Z"]
    assert {v["Name"]: v["Dest"] for v in created["volumes"]}[volume.name] == "/data"
    [supervisor] = containers_of(podman_client, box.id, "supervisor")
    to_supervisor = relay.created(supervisor.name)
    dests = {m["destination"] for m in to_supervisor["mounts"]} | {v["Dest"] for v in to_supervisor["volumes"]}
    assert not dests & {"/scratch", "/data", "/shared"}, dests
    assert not {"/scratch", "/data", "/shared"} & set(by_destination(supervisor)), by_destination(supervisor)
    mounts = by_destination(container)
    assert mounts["/shared"]["Type"] == "bind" and mounts["/shared"]["RW"] is False
    assert mounts["/data"]["Type"] == "volume" and mounts["/data"]["Name"] == volume.name and mounts["/data"]["RW"]
    tmpfs = container.attrs["HostConfig"]["Tmpfs"]["/scratch"].split(",")
    assert {"rw", "noexec", "nosuid", f"size={2 * 2**20}", "mode=1770"} <= set(tmpfs), tmpfs

    assert run_in(container, ["/bin/stat", "-c", "%a", "/scratch"])[1].strip() == "1770"
    [line] = [x for x in run_in(container, ["/bin/cat", "/proc/mounts"])[1].splitlines() if " /scratch " in x]
    assert line.startswith("tmpfs ") and "noexec" in line and "size=2048k" in line, line
    assert run_in(container, ["/bin/cat", "/shared/hello"])[1] == "from the host\n"
    assert run_in(container, ["/bin/cat", "/shared/hello"], user="1000:1000")[1] == "from the host\n"  # the identity
    code, _, err = run_in(container, ["/bin/sh", "-c", "echo hi > /shared/x"])
    assert code != 0 and "Read-only file system" in err, (code, err)
    assert run_in(container, ["/bin/sh", "-c", "echo written > /data/note"])[0] == 0
    volume.reload()
    assert (Path(volume.attrs["Mountpoint"]) / "note").read_text() == "written\n"

    [holder] = containers_of(podman_client, imaged.id)
    [image_volume] = relay.created(holder.name)["image_volumes"]  # pinned: the ID, not the tag
    pinned = podman_client.images.get(SUPERVISOR_IMAGE).id.removeprefix("sha256:")
    assert image_volume == {"Source": pinned, "Destination": "/img", "ReadWrite": False}
    assert "/img" in by_destination(holder)  # once started, Podman shows it as a bind of the mounted image
    assert run_in(holder, ["/bin/test", "-x", "/img/openshell-supervisor"])[0] == 0
    code, _, err = run_in(holder, ["/bin/touch", "/img/x"])
    assert code != 0 and "Read-only file system" in err, (code, err)
    [holders_supervisor] = containers_of(podman_client, imaged.id, "supervisor")
    assert "image_volumes" not in relay.created(holders_supervisor.name)
    assert "/img" not in by_destination(holders_supervisor)

    for b in (box, imaged):
        assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=b.id)).deleted
    assert podman_client.volumes.exists(volume.name)  # the caller's volume is never removed

    # doctor says what it found and what podmand does with it.
    proc = subprocess.run(daemon.command("doctor", "--json"), capture_output=True, text=True, timeout=120)
    [check] = [c for c in json.loads(proc.stdout) if c["name"] == "selinux"]
    assert check["status"] == "OK", check
    assert "SELinux is not enabled (from Podman's /info)" in check["finding"]
    assert "selinux = on" in check["finding"] and "Podman ignores here" in check["finding"]


def test_refused_mounts_create_nothing(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, volume: Any
) -> None:
    """Each refusal names the field and its code, before anything is made (pull policy 'never':
    an image mount's image must be here already)."""
    daemon = make_podmand({**OPEN, "OPENSHELL_SANDBOX_IMAGE_PULL_POLICY": "never"})
    where = "sandbox.spec.template.driver_config.mounts"
    # A volume subpath is refused only where Podman cannot mount it safely (before 4.5.0).
    subpath_refused = [
        ([{"type": "volume", "source": volume.name, "target": "/data", "subpath": "sub"}],
         grpc.StatusCode.FAILED_PRECONDITION, f"{where}[0].subpath: ", "needs Podman 4.5.0 or newer"),
    ] if podman_version(podman_client) < (4, 5, 0) else []
    cases = [
        *subpath_refused,
        ([{"type": "image", "source": SUPERVISOR_IMAGE, "target": "/img"}], grpc.StatusCode.FAILED_PRECONDITION,
         f"{where}[0]: ", "userns=auto", "containers/podman#23211"),
        ([{"type": "tmpfs", "target": "/etc/openshell/auth"}], grpc.StatusCode.INVALID_ARGUMENT,
         f"{where}[0].target: ", "reserved path '/etc/openshell'"),
        # the pair's own: the channel volume and the runtime's resolver in the workload
        ([{"type": "tmpfs", "target": "/.openshell/channel"}], grpc.StatusCode.INVALID_ARGUMENT,
         f"{where}[0].target: ", "reserved path '/.openshell'"),
        ([{"type": "bind", "source": "/etc/hosts", "target": "/etc/resolv.conf"}], grpc.StatusCode.INVALID_ARGUMENT,
         f"{where}[0].target: ", "reserved path '/etc/resolv.conf'"),
        ([{"type": "tmpfs", "target": "/x"}, {"type": "volume", "source": volume.name, "target": "/x/"}],
         grpc.StatusCode.INVALID_ARGUMENT, f"{where}[1].target: ", "duplicate"),
        ([{"type": "bind", "source": "/srv", "target": "/srv", "selinux_label": "Z"}],
         grpc.StatusCode.INVALID_ARGUMENT, f"{where}[0].selinux_label: ", "shared or private"),
        ([{"type": "tmpfs", "target": "/t", "options": ["rw,exec"]}], grpc.StatusCode.INVALID_ARGUMENT,
         f"{where}[0].options[0]: ", "not a tmpfs mount option"),
        ([{"type": "tmpfs", "target": "/t", "size_bytes": 0}], grpc.StatusCode.INVALID_ARGUMENT,
         f"{where}[0].size_bytes: ", "positive"),
    ]
    for mounts, code, *needles in cases:
        box = with_mounts(*mounts)
        refused(create(daemon, box), code, *needles)
        nothing_created(daemon, podman_client, box.id)
    absent = with_mounts({"type": "image", "source": "localhost/podmand-test/absent:1", "target": "/img"},
                         host_userns=True)
    refused(create(daemon, absent), grpc.StatusCode.FAILED_PRECONDITION, f"{where}[0].source: ",
            "is not present and the pull policy is 'never'")
    nothing_created(daemon, podman_client, absent.id)


def test_kernel_filesystem_targets_are_refused(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, volume: Any
) -> None:
    """A mount at or under /proc, /sys or /dev would replace procfs, sysfs or the device nodes
    under the workload's runtime: INVALID_ARGUMENT naming the target, and nothing is created."""
    daemon = make_podmand(OPEN)
    where = "sandbox.spec.template.driver_config.mounts"
    cases = [
        ({"type": "tmpfs", "target": "/proc"}, "/proc", "/proc"),
        ({"type": "tmpfs", "target": "/sys/fs"}, "/sys/fs", "/sys"),
        ({"type": "tmpfs", "target": "/dev"}, "/dev", "/dev"),
        ({"type": "tmpfs", "target": "/dev/shm"}, "/dev/shm", "/dev"),
        ({"type": "volume", "source": volume.name, "target": "/sys/fs/cgroup"}, "/sys/fs/cgroup", "/sys"),
        ({"type": "bind", "source": "/srv", "target": "/proc/"}, "/proc", "/proc"),
    ]
    for mount, target, root in cases:
        box = with_mounts({"type": "tmpfs", "target": "/scratch"}, mount)
        refused(create(daemon, box), grpc.StatusCode.INVALID_ARGUMENT,
                f"{where}[1].target: mount target {target!r} conflicts with reserved path {root!r}")
        nothing_created(daemon, podman_client, box.id)


def test_stopped_sandbox_with_a_bind_and_an_image_mount_starts_again(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str], tmp_path: Path
) -> None:
    """StartSandbox (with a new launch bundle) re-checks the caller's binds only: not podmand's
    own (the runtime binary and resolv.conf, from the state directory) nor the bind from
    Podman's storage that a started image mount shows as (graphRoot is protected), so such a
    sandbox starts again."""
    shared = tmp_path / "shared"
    shared.mkdir()
    for p in (tmp_path, shared):
        p.chmod(0o755)
    daemon = make_podmand(OPEN)
    box = with_mounts({"type": "image", "source": SUPERVISOR_IMAGE, "target": "/img"},
                      {"type": "bind", "source": str(shared), "target": "/shared"}, host_userns=True)
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    running(daemon, box.id)
    graph_root = podman_client.info()["store"]["graphRoot"]
    [container] = containers_of(podman_client, box.id)
    binds = {m["Destination"]: m["Source"] for m in container.attrs["Mounts"] if m["Type"] == "bind"}
    assert binds["/img"].startswith(graph_root + "/"), binds  # what the re-check must not refuse
    assert binds[names.RUNTIME_BIN].startswith(str(daemon.state_dir) + "/"), binds
    assert binds[names.RESOLV_CONF].startswith(str(daemon.state_dir) + "/"), binds
    daemon.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))
    daemon.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id,
                                                    launch_authentication=Launch(sandbox_id=box.id).bundle()))
    running(daemon, box.id)
    [container] = containers_of(podman_client, box.id)
    assert run_in(container, ["/bin/test", "-x", "/img/openshell-supervisor"])[0] == 0
    assert run_in(container, ["/bin/test", "-d", "/shared"])[0] == 0
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
