"""The pex as a process: start-up, discovery errors, restart, health probes, what the
driver socket lets connections hold."""

from __future__ import annotations

import os
import pwd
import signal
import socket
import struct
import subprocess
from collections.abc import Callable
from typing import Any

import podman

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.sandbox.imagefiles import READER_PREFIX
from podmand.security import peers

from .conftest import DEADLINE, ROOT, SANDBOX_IMAGE, Podmand, containers_of, ready, sandbox, volumes_of, wait_until


def test_ready_line_names_socket(driver: Podmand) -> None:
    """Against a live Podman: one ready line, carrying the driver socket path."""
    lines = [line for line in driver.logs().splitlines() if "ready: serving" in line]
    assert len(lines) == 1
    assert f"unix://{driver.socket}" in lines[0]


def test_missing_podman_socket_lists_paths(make_podmand: Callable[..., Podmand]) -> None:
    """No Podman: non-zero exit, and every path tried with the reason it failed."""
    daemon = make_podmand(
        {"OPENSHELL_PODMAN_SOCKET": "/nonexistent/podman.sock"}, start=False, socket="/nonexistent/podman.sock"
    )
    result = subprocess.run(daemon.command("serve"), capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "/nonexistent/podman.sock: does not exist" in result.stderr
    assert "ready" not in result.stderr


def test_sigterm_ends_watch_and_removes_socket(driver: Podmand) -> None:
    """SIGTERM: watch streams end, the process exits 0 and its socket is gone."""
    watch = driver.watch()
    wait_until(lambda: driver.stub.ListSandboxes(pb.ListSandboxesRequest()) is not None, what="serving")
    assert driver.stop(signal.SIGTERM) == 0
    assert watch.done.wait(10)
    assert watch.error is not None
    assert not os.path.exists(driver.socket)


def connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(DEADLINE)
    sock.connect(path)
    return sock


def is_open(sock: socket.socket) -> bool:
    """Whether the other end still holds the connection (what it sent read and dropped)."""
    sock.setblocking(False)  # with a timeout, Python would wait for the socket to be readable
    try:
        while sock.recv(65536):  # the grpc server's SETTINGS, spliced through
            pass
    except BlockingIOError:
        return True
    except ConnectionResetError:
        pass
    return False


def test_the_socket_bounds_connections_held_and_silent(driver: Podmand) -> None:
    """MAX_CONNECTIONS connections held silent: each one more is closed at once, logged in
    one line, and one more line counts the rest; after IDLE_TIMEOUT the silent ones are
    closed (again one line, and one counting the rest) and a real client is served."""
    cap, extra, pid = peers.MAX_CONNECTIONS, 20, os.getpid()
    held = [connect(driver.socket) for _ in range(cap)]
    try:
        for _ in range(extra):
            with connect(driver.socket) as sock:
                assert sock.recv(1) == b""  # closed without a byte (a spliced one hears SETTINGS)
        assert all(is_open(sock) for sock in held)
        wait_until(lambda: f"closed {extra - 1} more new connection(s) over the cap at once" in driver.logs(),
                   DEADLINE, "the count of connections closed over the cap", detail=driver.logs)
        assert driver.logs().count("driver socket: closed a new connection") == 1
        assert f"closed a new connection from uid 0 (pid {pid}) at once: {cap} connections are open" in driver.logs()

        wait_until(lambda: not any(is_open(sock) for sock in held), 3 * peers.IDLE_TIMEOUT, "the idle ones closed")
        wait_until(lambda: f"closed {cap - 1} more connection(s) that sent nothing" in driver.logs(), DEADLINE,
                   "the count of idle connections closed", detail=driver.logs)
        assert driver.logs().count(f"that sent nothing in {peers.IDLE_TIMEOUT:g} s") == 1
        assert driver.stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=DEADLINE) is not None
    finally:
        for sock in held:
            sock.close()


def test_restart_finishes_interrupted_create(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """SIGKILL right after create: the next podmand reports the sandbox and finishes it, no orphans."""
    first = make_podmand()
    box = sandbox(token=True)
    cleanup.append(box.id)
    first.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    first.stop(signal.SIGKILL)
    second = make_podmand({"PODMAND_GC_GRACE": "0", "PODMAND_RESYNC_INTERVAL": "0.5"}, start=False)
    second.workdir, second.state_dir, second.socket = first.workdir, first.state_dir, first.socket
    second.log_path = first.workdir / "podmand-2.log"
    second.env.update(PODMAND_STATE_DIR=str(first.state_dir), OPENSHELL_COMPUTE_DRIVER_SOCKET=first.socket)
    second.start()
    watch = second.watch()
    watch.wait_reason(box.id, "ContainerRunning")
    listed = [s for s in second.stub.ListSandboxes(pb.ListSandboxesRequest()).sandboxes if s.id == box.id]
    assert len(listed) == 1 and ready(listed[0]).status == "True"
    assert len(containers_of(podman_client, box.id)) == 1
    # An extractor container orphaned by the SIGKILL is garbage-collected.
    mine = {"label": f"io.podmand.state-dir={first.state_dir}"}
    wait_until(lambda: not [c for c in podman_client.containers.list(all=True, filters=mine)
                            if c.name.startswith("podmand-read-")], what="no orphan extractor")
    assert second.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
    assert containers_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []


def test_health_probes_run_by_podmand(make_podmand: Callable[..., Podmand], cleanup: list[str]) -> None:
    """With a healthcheck configured, podmand probes it itself (no systemd timers here)."""
    daemon = make_podmand({"OPENSHELL_HEALTH_CHECK_INTERVAL_SECS": "1"})
    watch = daemon.watch()
    box = sandbox()
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    snap = watch.wait_reason(box.id, "HealthCheckPassed")
    assert ready(snap).status == "True"
    reasons = [ready(s).reason for s in watch.snapshots(box.id)]
    assert "ContainerRunning" not in reasons  # never Ready before the probe passed
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def notification(sock: socket.socket) -> tuple[str, int]:
    """The next sd_notify datagram and the PID the kernel says sent it."""
    data, ancillary, _flags, _addr = sock.recvmsg(4096, socket.CMSG_SPACE(struct.calcsize("3i")))
    pids = [struct.unpack("3i", cdata[:12])[0] for level, kind, cdata in ancillary
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS]
    return data.decode(), pids[0]


def test_systemd_readiness_comes_from_the_main_pid(make_podmand: Callable[..., Podmand]) -> None:
    """As containers/systemd/podmand.service runs it (Type=notify, NotifyAccess=main): READY=1
    once it serves, STOPPING=1 on SIGTERM, both sent by the process systemd started (the pex's
    sh boot execs Python in place), so NotifyAccess=main accepts them."""
    unit = (ROOT / "containers" / "systemd" / "podmand.service").read_text().splitlines()
    assert "Type=notify" in unit and "NotifyAccess=main" in unit
    daemon = make_podmand(start=False)
    path = str(daemon.workdir / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        sock.bind(path)
        os.chmod(path, 0o666)
        sock.settimeout(60)
        entry = pwd.getpwnam(daemon.user or "")
        env = [f"{k}={v}" for k, v in {**daemon.env, "NOTIFY_SOCKET": path}.items()]
        with open(daemon.log_path, "ab") as log:  # setpriv execs: the PID is the pex's, as under systemd
            daemon.proc = subprocess.Popen(
                ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups",
                 "env", "-i", *env, str(daemon.pex), "serve"],
                cwd="/", stdout=log, stderr=subprocess.STDOUT,
            )
        text, sender = notification(sock)
        assert text.splitlines() == ["READY=1", f"STATUS=serving unix://{daemon.socket}"]
        assert sender == daemon.proc.pid
        assert "ready: serving" in daemon.logs()  # readiness is told after the socket serves

        assert daemon.stop(signal.SIGTERM) == 0
        text, sender = notification(sock)
        assert text.splitlines()[0] == "STOPPING=1" and sender == daemon.proc.pid


def test_start_up_removes_the_image_readers_its_predecessor_left_and_nothing_else(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient
) -> None:
    """A reader container a killed predecessor left is removed at start-up, in the background
    (no resync, so no garbage collection, runs here); a container of another name and a reader
    of another state directory stay."""
    daemon = make_podmand({"PODMAND_RESYNC_INTERVAL": "0"}, start=False)
    tag = os.urandom(6).hex()

    def made(name: str, state_dir: str) -> Any:
        labels = {names.OWNER: names.OWNER_VALUE, names.STATE_DIR: state_dir}
        return podman_client.containers.create(SANDBOX_IMAGE, ["true"], name=name, labels=labels)

    stale = made(f"{READER_PREFIX}1-{tag}", str(daemon.state_dir))
    kept = [made(f"podmand-kept-{tag}", str(daemon.state_dir)), made(f"{READER_PREFIX}2-{tag}", f"/elsewhere/{tag}")]
    try:
        daemon.start()
        wait_until(lambda: not podman_client.containers.exists(stale.id), DEADLINE, "the stale reader removed",
                   detail=daemon.logs)
        assert all(podman_client.containers.exists(c.id) for c in kept)
    finally:
        for c in [stale, *kept]:
            if podman_client.containers.exists(c.id):
                c.remove(force=True)



ROUNDS = 5  # each stop lands in a read at random; the old code left a reader in about half of them


def test_sigterm_while_images_are_read_leaves_no_reader(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """Issue 30, item 7: eight creates at once whose runtime image lacks the binary (each one
    reads the image through a never-started reader container, one at a time, and fails
    RuntimeImageUnavailable), then SIGTERM while the other reads go on. Once podmand has
    exited, no reader of its state directory is left in Podman, whichever step of a read
    (create, copy, removal) the stop cut short; no resync runs here, so no garbage collection
    removes one."""
    for _ in range(ROUNDS):
        daemon = make_podmand({"OPENSHELL_SANDBOX_RUNTIME_IMAGE": SANDBOX_IMAGE, "PODMAND_RESYNC_INTERVAL": "0"})
        watch = daemon.watch()
        boxes = [sandbox() for _ in range(8)]
        cleanup.extend(box.id for box in boxes)
        for box in boxes:
            daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))

        def failed(boxes: list[pb.DriverSandbox] = boxes, watch: Any = watch) -> int:
            return sum(1 for box in boxes if (s := watch.latest(box.id)) is not None
                       and (cond := ready(s)) is not None and cond.reason == "RuntimeImageUnavailable")

        wait_until(failed, DEADLINE, "a create to fail RuntimeImageUnavailable", detail=daemon.logs)
        assert failed() < len(boxes)  # reads are still going on
        assert daemon.stop(signal.SIGTERM) == 0, daemon.logs()
        mine = {"label": f"{names.STATE_DIR}={daemon.state_dir}"}
        left = [c.name for c in podman_client.containers.list(all=True, filters=mine)
                if c.name.startswith(READER_PREFIX)]
        try:
            assert left == [], daemon.logs()
        finally:
            for name in left:
                podman_client.containers.get(name).remove(force=True)
