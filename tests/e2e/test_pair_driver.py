"""The split topology through the pex: podmand against the real
rootless Podman, with the stand-in runtime and supervisor (tests/images: runtime:1,
supervisor2:1, workload:1) and real Ed25519-signed launch bundles (tests/standin/launch.py).

What a 0.1.x gateway sees of a sandbox, end to end: a create gives the pair, Ready, and one
sandbox in List, Get and Watch whose instance is the workload; the stand-in supervisor
attaches, confirms and starts the main process as the image's identity; the supervisor's
tokens are in its ``auth.json`` and nowhere else (volumes, inspect, logs, podmand's state
directory and log); stop takes the supervisor down first; a start re-mints the session
from its new bundle, a retry changes nothing, a new generation restarts both; a supervisor
killed out of band takes the workload down and the watch stream says why; delete leaves
nothing. Refusals: a missing, malformed, unknown-field or another sandbox's bundle, a root
identity, an image shipping /.openshell. A podmand killed mid-create finishes the pair.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import tarfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import podman
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from tests.e2e.conftest import Podmand, pair_of, sandbox, volumes_of
from tests.e2e.test_pair_lifecycle import (
    PROBE,
    inspect,
    leaked,
    logs,
    token_windows,
    volume_bytes,
    wait_log,
    wait_probe,
)
from tests.standin.launch import Launch
from tests.standin.test_split_podman import RUNTIME_IMAGE, SUPERVISOR_IMAGE, WORKLOAD_IMAGE
from tests.standin.test_split_podman import podman as podman_cli
from tests.wait import wait_until

IDENTITY = 1000  # workload:1's USER sandbox
ROOT_IMAGE = "localhost/podmand-test/sandbox-root:1"
SPLIT = {
    "OPENSHELL_SANDBOX_RUNTIME_IMAGE": RUNTIME_IMAGE,
    "OPENSHELL_SUPERVISOR_IMAGE": SUPERVISOR_IMAGE,
    "OPENSHELL_SANDBOX_IMAGE": WORKLOAD_IMAGE,
}
READY = 180.0  # a pair's first start: two pulls pinned, an image read, two containers, TLS on both sides


@pytest.fixture
def split(make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient) -> Podmand:
    for image in (RUNTIME_IMAGE, SUPERVISOR_IMAGE, WORKLOAD_IMAGE):
        if not podman_client.images.exists(image):
            pytest.skip(f"{image} missing (tests/images/build.sh rootless)")
    daemon: Podmand = make_podmand(SPLIT)
    return daemon


class Box:
    """One sandbox's requests and every bundle sent for it."""

    def __init__(self, image: str = WORKLOAD_IMAGE) -> None:
        self.id = f"sb-{uuid.uuid4().hex[:12]}"
        self.sent: list[bytes] = []
        self.launches: list[Launch] = []
        self.request = sandbox(self.id, image=image, command=["/usr/bin/python3", "-c", PROBE],
                               launch_authentication=self.bundle())

    def bundle(self) -> bytes:
        launch = Launch(uid=IDENTITY, gid=IDENTITY, sandbox_id=self.id)
        self.launches.append(launch)
        self.sent.append(launch.bundle())
        return self.sent[-1]

    @property
    def workload(self) -> str:
        return names.container_name(self.request.workspace, self.request.name, self.id)

    @property
    def supervisor(self) -> str:
        return names.supervisor_name(self.id)


def files_of(daemon: Podmand, box: Box) -> Path:
    """The sandbox's directory in podmand's state directory (sandbox/files.py)."""
    return daemon.state_dir / "sandboxes" / box.id


def create(daemon: Podmand, box: Box, cleanup: list[str]) -> None:
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box.request))


def started_at(name: str) -> str:
    return str(inspect(name)["State"]["StartedAt"])


def state_bytes(daemon: Podmand) -> bytes:
    out = bytearray(daemon.logs().encode())
    for path in sorted(daemon.state_dir.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out += path.read_bytes()
    return bytes(out)


def test_a_sandbox_is_a_pair_from_create_to_delete(split: Podmand, podman_client: podman.PodmanClient,
                                                   cleanup: list[str]) -> None:
    watch = split.watch()
    box = Box()
    create(split, box, cleanup)
    watch.wait_reason(box.id, "ContainerRunning", READY)
    wait_log(box.supervisor, "openshell-supervisor: ready: health socket")
    assert f"auth bundle accepted: session {box.launches[0].session_id}" in logs(box.supervisor)

    # one sandbox in every view, its instance the workload
    workload = inspect(box.workload)
    listed = [s for s in split.stub.ListSandboxes(pb.ListSandboxesRequest()).sandboxes if s.id == box.id]
    got = split.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox
    assert len(listed) == 1
    for snap in (listed[0], got, *watch.snapshots(box.id)):
        assert snap.status.instance_id in ("", workload["Id"][:12]), snap
        assert snap.status.name in ("", box.workload), snap
    assert got.status.instance_id == workload["Id"][:12]
    # what Podman's inspect says of the workload (upstream leaves both empty): its identity and fence
    ident = got.status.resolved_identity
    assert (ident.uid, ident.gid, ident.resource_digest) == (IDENTITY, IDENTITY, workload["Image"]), ident
    fence = got.status.fence_evidence
    assert fence.generation == box.launches[0].generation, fence
    assert fence.resource_claims["podman.container_id"] == workload["Id"]
    claims = fence.resource_claims
    assert claims["podman.network_mode"] == "none" and claims["podman.privileged"] == "false", claims
    # a workspace is no network here: the workload has none, its supervisor the host's
    split.stub.EnsureWorkspace(pb.EnsureWorkspaceRequest(workspace=box.request.workspace))
    assert not podman_client.networks.exists(names.network_name("openshell", box.request.workspace))
    assert {c.attrs["Name"].lstrip("/") for c in pair_of(podman_client, box.id)} == {box.workload,
                                                                                         box.supervisor}

    # the workload: the image's identity, no capability, no network, no environment of the image's
    probe = wait_probe(box.workload, 60)
    assert probe["uid"] == [IDENTITY] * 3 and probe["gid"] == [IDENTITY] * 3 and probe["caps"] == "0" * 16
    assert workload["HostConfig"]["NetworkMode"] == "none" and not workload["HostConfig"]["Privileged"]
    assert not any(e.startswith("OPENSHELL_") for e in workload["Config"]["Env"] or [])
    resolver = podman_exec(box.workload, "/usr/bin/stat", "-c", "%u %g %a", "/etc/resolv.conf")
    assert resolver.split() == [b"0", b"0", b"444"], resolver  # the runtime's DNS relay, root's
    assert podman_exec(box.workload, "/bin/cat", "/etc/resolv.conf") == b"nameserver 127.0.0.53\n"
    assert inspect(box.supervisor)["HostConfig"]["NetworkMode"] == "host"
    assert not inspect(box.supervisor)["EffectiveCaps"]

    # the tokens: in the supervisor's auth.json, and nowhere else, podmand's own files included
    windows = token_windows(box.sent)
    auth = podman_exec(box.supervisor, "/bin/cat", names.AUTH_BUNDLE_PATH)
    assert json.loads(auth) == json.loads(box.sent[0])["supervisor"]
    assert leaked(auth, windows)
    assert files_of(split, box).is_dir() and not (files_of(split, box) / "launch.json").exists(), \
        "the bundle is kept only until the pair exists"
    for where, data in (("channel volume", volume_bytes(names.channel_volume_name(box.id))),
                        ("workspace volume", volume_bytes(names.volume_name(box.id))),
                        ("workload inspect", json.dumps(workload).encode()),
                        ("supervisor inspect", json.dumps(inspect(box.supervisor)).encode()),
                        ("workload log", logs(box.workload).encode()),
                        ("podmand's log and state directory", state_bytes(split))):
        assert not leaked(data, windows), f"a token in the {where}"

    # stop: the supervisor first; reported stopped, not as an exit
    split.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))
    watch.wait_reason(box.id, "ContainerStopped")
    sup, work = inspect(box.supervisor)["State"], inspect(box.workload)["State"]
    assert sup["Status"] == work["Status"] == "exited"
    assert sup["FinishedAt"] <= work["FinishedAt"], "the supervisor stops first"

    # start with a fresh bundle: a new session from it, no earlier token left
    split.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, launch_authentication=box.bundle(),
                                                   generation_id="g0000000000000001"))
    wait_log(box.supervisor, f"auth bundle accepted: session {box.launches[1].session_id}")
    watch.wait_reason(box.id, "ContainerRunning")
    meta = json.loads(podman_exec(box.supervisor, "/bin/cat", names.RESTART_METADATA_PATH))
    assert meta["generation"] == "g0000000000000001"
    auth = podman_exec(box.supervisor, "/bin/cat", names.AUTH_BUNDLE_PATH)
    assert json.loads(auth)["session_id"] == box.launches[1].session_id
    assert not leaked(auth + volume_bytes(names.channel_volume_name(box.id)), token_windows(box.sent[:1]))

    # a retry of that start changes nothing; a start under a new generation restarts both
    before = started_at(box.workload), started_at(box.supervisor)
    split.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, launch_authentication=box.bundle(),
                                                   generation_id="g0000000000000001"))
    assert (started_at(box.workload), started_at(box.supervisor)) == before
    split.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, launch_authentication=box.bundle(),
                                                   generation_id="g0000000000000002"))
    wait_log(box.supervisor, f"auth bundle accepted: session {box.launches[3].session_id}")
    assert started_at(box.workload) != before[0] and started_at(box.supervisor) != before[1]
    watch.wait_reason(box.id, "ContainerRunning")

    # the supervisor killed out of band: the workload is stopped, and the stream says why
    podman_client.containers.get(box.supervisor).kill()
    wait_until(lambda: [e for e in watch.platform_events(box.id) if e.reason == "SupervisorExited"], 60,
               "a SupervisorExited event", lambda: watch.platform_events(box.id))
    wait_until(lambda: inspect(box.workload)["State"]["Status"] == "exited", 60, "the workload stopped")
    cond = watch.wait_reason(box.id, "ContainerRuntimeRestart").status.conditions[0]
    assert cond.status == "False"

    # delete: nothing left
    assert split.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
    assert not pair_of(podman_client, box.id) and not volumes_of(podman_client, box.id)
    assert not files_of(split, box).exists()
    wait_until(lambda: watch.deleted(box.id), 30, "Deleted on the stream")


def podman_exec(container: str, *cmd: str) -> bytes:
    return podman_cli("exec", container, *cmd).stdout.encode()


def bad_bundles(box: Box) -> list[tuple[bytes, str]]:
    good = json.loads(box.sent[0])
    unknown = {**good, "extra": 1}
    other = Launch(uid=IDENTITY, gid=IDENTITY, sandbox_id="sb-someone-else").bundle()
    return [
        (b"", "launch_authentication: required"),
        (b"{not json", "launch authentication is invalid"),
        (json.dumps(unknown).encode(), "launch authentication is invalid"),
        (other, "gateway_token"),
    ]


def test_a_bad_bundle_is_refused_with_nothing_made(split: Podmand, podman_client: podman.PodmanClient,
                                                   cleanup: list[str]) -> None:
    box = Box()
    cleanup.append(box.id)
    for data, said in bad_bundles(box):
        request = pb.DriverSandbox()
        request.CopyFrom(box.request)
        request.spec.launch_authentication = data
        with pytest.raises(grpc.RpcError) as err:
            split.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=request))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
        assert "sandbox.spec.launch_authentication" in err.value.details() and said in err.value.details()
        assert not pair_of(podman_client, box.id) and not volumes_of(podman_client, box.id)
        assert not files_of(split, box).exists()
    # a start without a bundle, or with another sandbox's, is refused before it finds anything
    for data, said in bad_bundles(box):
        with pytest.raises(grpc.RpcError) as err:
            split.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, launch_authentication=data))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
        assert "launch_authentication" in err.value.details() and said in err.value.details()


def refused(split: Podmand, box: Box, reason: str, cleanup: list[str]) -> pb.DriverSandbox:
    watch = split.watch()
    create(split, box, cleanup)
    return watch.wait_reason(box.id, reason, READY)


def test_a_root_identity_and_an_image_with_openshell_are_refused(
        split: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    root = Box(image=ROOT_IMAGE)  # USER root, refused at once (the image is here to read)
    cleanup.append(root.id)
    with pytest.raises(grpc.RpcError) as err:
        split.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=root.request))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
    assert "workload identity" in err.value.details() and "root" in err.value.details()
    assert not pair_of(podman_client, root.id) and not volumes_of(podman_client, root.id)
    asked = Box()  # a caller's request for uid 0, refused once the image's accounts are read
    asked.request.spec.workload_identity.user = "0"
    snap = refused(split, asked, "WorkloadIdentityInvalid", cleanup)
    assert "UID must be in range [1," in snap.status.conditions[0].message, snap
    assert not pair_of(podman_client, asked.id)

    holder = podman_client.containers.create(WORKLOAD_IMAGE, name=f"dot-openshell-{uuid.uuid4().hex[:8]}")
    try:
        holder.put_archive("/", dot_openshell_tar())
        image = holder.commit(repository="localhost/podmand-test/dot-openshell", tag=uuid.uuid4().hex[:8])
    finally:
        holder.remove(force=True)
    try:
        box = Box(image=f"localhost/podmand-test/dot-openshell:{image.tags[0].rpartition(':')[2]}")
        snap = refused(split, box, "ImageRefused", cleanup)
        assert "/.openshell" in snap.status.conditions[0].message
        assert not pair_of(podman_client, box.id)
    finally:
        podman_client.images.remove(image.id, force=True)


def dot_openshell_tar() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        entry = tarfile.TarInfo(".openshell")
        entry.type, entry.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(entry)
    return out.getvalue()


class HoldingRelay:
    """A relay to the Podman socket that holds the first archive upload (the channel's, to
    the created workload) and everything after it on that connection: podmand stops there
    with the workload made and the supervisor not, until it is killed."""

    def __init__(self, target: str, where: Path) -> None:
        self.target = target
        self.path = str(where / "podman.sock")
        self.held = threading.Event()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        os.chmod(self.path, 0o777)  # podmand runs as the rootless user
        self.server.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        seen = b""
        try:
            while data := source.recv(65536):
                if requests:
                    if re.search(rb"PUT [^ ]*/archive\?", seen + data):
                        self.held.set()
                        return  # held: never forwarded
                    seen = data[-256:]  # a request line split between two reads
                sink.sendall(data)
        except OSError:
            return

    def close(self) -> None:
        self.server.close()


def test_a_podmand_killed_mid_create_finishes_the_pair(make_podmand: Callable[..., Podmand],
                                                       podman_client: podman.PodmanClient, podman_socket: str,
                                                       cleanup: list[str], tmp_path: Path) -> None:
    """podmand is killed with the workload created and the supervisor not (its first upload
    held by a relay): the next podmand removes what that attempt left and makes the pair."""
    tmp_path.chmod(0o755)
    relay = HoldingRelay(podman_socket, tmp_path)
    first = make_podmand(SPLIT, socket=relay.path)
    box = Box()
    try:
        create(first, box, cleanup)
        assert relay.held.wait(READY), first.logs()[-3000:]
        first.stop(signal.SIGKILL)
    finally:
        relay.close()
    made = {c.attrs["Name"].lstrip("/"): c.attrs["State"]["Status"] for c in pair_of(podman_client, box.id)}
    assert made == {box.workload: "created"}, made  # half a pair
    assert (files_of(first, box) / "launch.json").exists()

    again = make_podmand(SPLIT, start=False)  # the same state directory: the same podmand, restarted
    again.state_dir, again.env["PODMAND_STATE_DIR"] = first.state_dir, str(first.state_dir)
    again.start()
    watch = again.watch()
    watch.wait_reason(box.id, "ContainerRunning", READY)
    wait_log(box.supervisor, "openshell-supervisor: ready: health socket")
    assert not (files_of(again, box) / "launch.json").exists()
    names_now = {c.attrs["Name"].lstrip("/") for c in pair_of(podman_client, box.id)}
    assert names_now == {box.workload, box.supervisor}
    assert again.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
    assert not pair_of(podman_client, box.id) and not volumes_of(podman_client, box.id)


def test_the_main_process_exit_and_a_killed_workload_are_reported(split: Podmand, podman_client: podman.PodmanClient,
                                                                  cleanup: list[str]) -> None:
    """The main process's exit ends the pair and is the sandbox's exit (not its supervisor's
    going); a workload killed out of band is a runtime restart, its supervisor not left running."""
    watch = split.watch()
    exits = Box()
    del exits.request.spec.command[:]
    exits.request.spec.command.extend(["/bin/sh", "-c", "exit 3"])
    killed = Box()
    create(split, exits, cleanup)
    create(split, killed, cleanup)
    cond = watch.wait_reason(exits.id, "ContainerExited", READY).status.conditions[0]
    assert cond.message == "Container exited with code 3", cond
    assert not [e for e in watch.platform_events(exits.id) if e.reason == "SupervisorExited"]

    watch.wait_reason(killed.id, "ContainerRunning", READY)
    wait_log(killed.supervisor, "openshell-supervisor: ready: health socket")
    podman_client.containers.get(killed.workload).kill()
    watch.wait_reason(killed.id, "ContainerRuntimeRestart")
    wait_until(lambda: not inspect(killed.supervisor)["State"]["Running"], 60, "the supervisor to end",
               lambda: logs(killed.supervisor))


def test_a_sandbox_an_older_podmand_made_as_one_container(make_podmand: Callable[..., Podmand],
                                                          podman_client: podman.PodmanClient,
                                                          cleanup: list[str]) -> None:
    """After the upgrade (docs/operations.md): listed, stopped and deleted as before; a start,
    which would need a supervisor it never had, is refused with what to do, not INTERNAL. (No
    podmand makes that layout any more: the test makes the container as an older one labelled
    it, one container with podmand's labels and no isolation role, beside its workspace volume.)"""
    box = sandbox()
    cleanup.append(box.id)
    labels = {names.MANAGED: "true", names.OWNER: names.OWNER_VALUE, names.SANDBOX_ID: box.id,
              names.SANDBOX_NAME: box.name, names.SANDBOX_WORKSPACE: box.workspace}
    podman_client.volumes.create(names.volume_name(box.id), labels={names.OWNER: names.OWNER_VALUE,
                                                                     names.SANDBOX_ID: box.id})
    old = podman_client.containers.create(WORKLOAD_IMAGE, ["sleep", "600"], labels=labels,
                                          name=names.container_name(box.workspace, box.name, box.id))
    old.start()
    new = make_podmand(SPLIT)
    listed = [s for s in new.stub.ListSandboxes(pb.ListSandboxesRequest()).sandboxes if s.id == box.id]
    assert [s.status.conditions[0].reason for s in listed] == ["ContainerRunning"]
    bundle = Launch(uid=IDENTITY, gid=IDENTITY, sandbox_id=box.id).bundle()
    with pytest.raises(grpc.RpcError) as err:
        new.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, launch_authentication=bundle,
                                                     generation_id="g0000000000000001"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "made by an earlier podmand as one container" in err.value.details()
    assert inspect(old.name)["State"]["Running"], "refused: left as it was"
    new.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))
    assert not inspect(old.name)["State"]["Running"]
    assert new.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
    assert not pair_of(podman_client, box.id) and not volumes_of(podman_client, box.id)


def test_ctl_mints_the_bundle_a_split_podmand_needs(split: Podmand, podman_client: podman.PodmanClient,
                                                    cleanup: list[str]) -> None:
    """docs/operations.md: against a driver that expects the gateway's bundle, ``ctl create``
    and ``ctl start`` mint one; the pair gets Ready, and each start is a new session."""
    sandbox_id = f"sb-{uuid.uuid4().hex[:12]}"
    cleanup.append(sandbox_id)

    def ctl(*args: str) -> str:
        result = subprocess.run(split.command("ctl", "--socket", split.socket, *args), capture_output=True,
                                text=True, timeout=240)
        assert result.returncode == 0, result.stdout + result.stderr + split.logs()[-2000:]
        return result.stdout + result.stderr

    assert "Ready=True" in ctl("create", "--id", sandbox_id, "--name", "ctl", "--wait", "--", "sleep", "600")
    supervisor = names.supervisor_name(sandbox_id)
    wait_log(supervisor, "openshell-supervisor: ready: health socket")
    first = json.loads(podman_exec(supervisor, "/bin/cat", names.AUTH_BUNDLE_PATH))["session_id"]
    ctl("stop", sandbox_id)
    ctl("start", sandbox_id)
    wait_log(supervisor, "openshell-supervisor: ready: health socket", count=2)
    assert json.loads(podman_exec(supervisor, "/bin/cat", names.AUTH_BUNDLE_PATH))["session_id"] != first
    assert "deleted: true" in ctl("delete", sandbox_id)
    assert not pair_of(podman_client, sandbox_id)
