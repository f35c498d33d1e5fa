"""``podmand ctl`` end to end: the pex's operator client against a real podmand on
rootless Podman, run as the daemon's user with its environment; podman-py checks
what each command did."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import uuid
from typing import Any

import podman

from podmand._proto import compute_driver_pb2 as pb
from tests.standin.launch import Launch

from .conftest import (
    DEADLINE,
    SANDBOX_IMAGE,
    Podmand,
    containers_of,
    gateway_metadata,
    ready,
    run_in,
    sandbox,
    wait_until,
)


def ctl(driver: Podmand, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``podmand ctl`` from the pex as the daemon's user (its socket is the default)."""
    return subprocess.run(driver.command("ctl", *args), input=stdin, capture_output=True, text=True,
                          timeout=DEADLINE + 30)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def fields(text: str) -> dict[str, str]:
    """The ``key: value`` lines of human output."""
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def container(client: podman.PodmanClient, sandbox_id: str) -> Any:
    [found] = containers_of(client, sandbox_id)
    return found


class Lines:
    """The stdout (or stderr) lines of a running process, collected by a thread."""

    def __init__(self, proc: subprocess.Popen[str], stream: str = "stdout") -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()
        pipe = getattr(proc, stream)
        assert pipe is not None
        threading.Thread(target=self._read, args=(pipe,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            with self._lock:
                self.lines.append(line)

    def having(self, text: str) -> list[str]:
        with self._lock:
            return [line for line in self.lines if text in line]

    def json_for(self, sandbox_id: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.having(sandbox_id)]


def test_caps(driver: Podmand) -> None:
    """caps negotiates like a gateway: JSON is the response, human output is key: value."""
    caps = json.loads(ok(ctl(driver, "--json", "caps")))
    assert "openshell.compute.contract" in caps["extension"]["supported_capabilities"]
    assert caps["default_image"] == SANDBOX_IMAGE
    assert caps["driver_reports_runtime_readiness"] is False  # defaults are shown, not dropped
    human = fields(ok(ctl(driver, "caps", "--socket", driver.socket)))
    assert human["driver_name"] == "podman"
    assert human["resource_admission_policy"] == caps["resource_admission_policy"]


def test_lifecycle_through_ctl(driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """create --wait (its steps on stderr), list (IMAGE, AGE, -q), get, describe, logs, watch,
    stop, start, delete, each checked against Podman."""
    box_id = f"ctl-{uuid.uuid4().hex[:10]}"
    cleanup.append(box_id)
    watcher = subprocess.Popen(driver.command("ctl", "--json", "watch"), stdout=subprocess.PIPE, text=True)
    try:
        lines = Lines(watcher)
        result = ctl(driver, "create", "--wait", "--id", box_id, "--name", "web", "--workspace", "ops",
                     "--env", "GREETING=hi", "--memory", "256Mi", "--", "sleep", "600")
        created = fields(ok(result))
        steps = [line.split()[1] for line in result.stderr.splitlines()]
        for step in ("Scheduled", "Pulled", "Ready=True"):  # Started may come after Ready, which ends the wait
            assert step in steps, result.stderr
        assert steps.index("Scheduled") < steps.index("Pulled") < steps.index("Ready=True")
        assert (created["id"], created["ready"], created["reason"]) == (box_id, "True", "ContainerRunning")
        assert created["runtime_identity"].startswith("podmand:")
        running = container(podman_client, box_id)
        assert running.status == "running"
        [supervisor] = containers_of(podman_client, box_id, "supervisor")
        env = dict(e.split("=", 1) for e in supervisor.attrs["Config"]["Env"])
        assert json.loads(env["OPENSHELL_USER_ENVIRONMENT"]) == {"GREETING": "hi"}
        caps = driver.stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
        if caps.resource_capabilities.memory.limit_supported:  # not on cgroup v1 rootless hosts
            assert running.attrs["HostConfig"]["Memory"] == 256 * 1024 * 1024

        snaps = wait_until(lambda: [d for d in lines.json_for(box_id) if "sandbox" in d], what="ctl watch snapshot")
        assert snaps[-1]["sandbox"]["sandbox"]["id"] == box_id
        assert snaps[-1]["sandbox"]["sandbox"]["workspace"] == "ops"
    finally:
        watcher.terminate()
        watcher.wait(DEADLINE)

    table = ok(ctl(driver, "list")).splitlines()
    assert table[0].split() == ["ID", "NAME", "WORKSPACE", "READY", "IMAGE", "AGE", "MESSAGE"]
    [row] = [line.split() for line in table if line.startswith(box_id)]
    assert row[:5] == [box_id, "web", "ops", "True/ContainerRunning", SANDBOX_IMAGE]
    assert re.fullmatch(r"\d+s|\dm\d+s", row[5]), row
    assert box_id in ok(ctl(driver, "list", "-q")).split()
    assert all(" " not in line for line in ok(ctl(driver, "list", "-q")).splitlines())
    listed = json.loads(ok(ctl(driver, "--json", "list")))
    assert box_id in [b["id"] for b in listed]
    assert listed == json.loads(ok(ctl(driver, "list", "-o", "json")))

    described = ok(ctl(driver, "describe", box_id))
    about = fields(described)
    assert (about["Image"].strip(), about["Command"].strip()) == (SANDBOX_IMAGE, "sleep 600")
    assert about["State"].strip() == "running" and about["Container ID"].strip() == running.id[:12]
    assert about["Runtime identity"].strip() == created["runtime_identity"]
    assert re.search(r"Ready +True +ContainerRunning", described), described
    events = described.split("Events (Podman):", 1)[1].split()
    assert "create" in events and "start" in events, described

    # The workload's log: the runtime's lines on stderr, the last once it started the main process.
    logged = wait_until(lambda: (r := ctl(driver, "logs", box_id)).returncode == 0
                        and "openshell-sandbox: started the main process" in r.stderr and r,
                        what="the runtime's line on the main process")
    assert "openshell-sandbox: bootstrap accepted" in logged.stderr
    tail = ctl(driver, "logs", "--tail", "1", box_id)
    [last] = tail.stderr.strip().splitlines()
    assert ok(tail) == "" and last.startswith("openshell-sandbox: started the main process sleep")

    got = json.loads(ok(ctl(driver, "get", box_id, "--json")))
    assert (got["id"], got["name"], got["workspace"]) == (box_id, "web", "ops")
    assert got["status"]["instance_id"] == running.id[:12]
    assert fields(ok(ctl(driver, "get", box_id)))["condition Ready"].startswith("True ContainerRunning")

    ok(ctl(driver, "stop", box_id))
    assert container(podman_client, box_id).status == "exited"
    stopped = ok(ctl(driver, "describe", box_id))
    code = container(podman_client, box_id).attrs["State"]["ExitCode"]
    assert fields(stopped)["State"].strip() == f"exited (exit code {code})"
    assert re.search(rf"died +{code}\b", stopped), stopped
    started = fields(ok(ctl(driver, "start", box_id)))
    assert started["runtime_identity"].split("/")[0] == created["runtime_identity"].split("/")[0]
    assert started["runtime_identity"] != created["runtime_identity"]
    assert container(podman_client, box_id).status == "running"

    assert fields(ok(ctl(driver, "delete", box_id)))["deleted"] == "true"
    assert containers_of(podman_client, box_id) == []
    assert fields(ok(ctl(driver, "delete", box_id)))["deleted"] == "false"


def test_create_from_spec_on_stdin(driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """--spec - takes a JSON DriverSandbox; the gateway's field names work as written."""
    box = sandbox(name="fromspec", workspace="specws", command=["sleep", "600"])
    cleanup.append(box.id)
    spec = json.dumps({"id": box.id, "name": "fromspec", "workspace": "specws",
                       "spec": {"command": ["sleep", "600"], "template": {"image": SANDBOX_IMAGE},
                                "environment": {"FROM_SPEC": "yes"}}})
    out = fields(ok(ctl(driver, "create", "--spec", "-", "--wait", stdin=spec)))
    assert (out["id"], out["reason"]) == (box.id, "ContainerRunning")
    snap = driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox
    assert (snap.name, snap.workspace, ready(snap).status) == ("fromspec", "specws", "True")
    [supervisor] = containers_of(podman_client, box.id, "supervisor")
    env = dict(e.split("=", 1) for e in supervisor.attrs["Config"]["Env"])
    assert json.loads(env["OPENSHELL_USER_ENVIRONMENT"]) == {"FROM_SPEC": "yes"}
    mixed = ctl(driver, "create", "--spec", "-", "--name", "x", stdin=spec)
    assert mixed.returncode == 2 and "--spec excludes --name" in mixed.stderr
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_wait_reports_terminal_failure(driver: Podmand, cleanup: list[str]) -> None:
    """An image that cannot be pulled: --wait ends with exit 1 and the terminal reason."""
    box_id = f"ctl-{uuid.uuid4().hex[:10]}"
    cleanup.append(box_id)
    result = ctl(driver, "create", "--wait", "--id", box_id, "--name", "nopull",
                 "--image", "localhost/podmand-test/absent:1", "--", "sleep", "600")
    assert result.returncode == 1, result.stderr
    out = fields(result.stdout)
    assert (out["ready"], out["reason"]) == ("False", "ImagePullFailed"), result.stdout
    assert "absent" in out["message"]
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box_id)).deleted


def test_rpc_errors_name_the_code(driver: Podmand) -> None:
    """Any RPC error: 'podmand ctl: CODE: details' on stderr, exit 1, nothing on stdout."""
    missing = ctl(driver, "get", "nope")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("podmand ctl: NOT_FOUND: ")
    invalid = ctl(driver, "stop", "")
    assert invalid.returncode == 1 and "podmand ctl: INVALID_ARGUMENT:" in invalid.stderr


def test_launch_file_delivered_never_printed(driver: Podmand, podman_client: podman.PodmanClient,
                                             cleanup: list[str]) -> None:
    """--launch-file: the gateway's bundle reaches the supervisor's auth.json as it was sent
    (its tokens there, 0600 or stricter) and no ctl output, the workload nothing of it."""
    box_id = f"ctl-{uuid.uuid4().hex[:10]}"
    cleanup.append(box_id)
    bundle = Launch(sandbox_id=box_id).bundle()
    path = driver.workdir / "bundle.json"
    path.write_bytes(bundle)
    os.chmod(path, 0o600)
    if driver.user:
        shutil.chown(path, driver.user, driver.user)
    outputs = []
    for args in (["create", "--wait", "--id", box_id, "--name", "tok", "--launch-file", str(path), "--",
                  "sleep", "600"], ["get", box_id], ["--json", "get", box_id], ["--json", "list"], ["list"]):
        result = ctl(driver, *args)
        outputs += [ok(result), result.stderr]
    token = json.loads(bundle)["supervisor"]["gateway_token"]
    [supervisor] = containers_of(podman_client, box_id, "supervisor")
    auth = json.loads(run_in(supervisor, ["/bin/cat", "/.openshell/supervisor/auth.json"])[1])
    assert auth["gateway_token"] == token
    payload = token.split(".")[1]
    for text in outputs:
        assert token not in text and payload not in text
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box_id)).deleted


def test_watch_ends_with_the_stream_error(make_podmand: Any, cleanup: list[str]) -> None:
    """A watch whose stream fails (the daemon goes away) says why and exits 1."""
    daemon = make_podmand()
    # Without the state dir in its environment: daemon.stop() signals every process that has it.
    command = [a for a in daemon.command("ctl", "watch") if not a.startswith("PODMAND_STATE_DIR=")]
    watcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = Lines(watcher)
        box = sandbox()
        cleanup.append(box.id)
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        wait_until(lambda: lines.having(box.id), what="ctl watch to print the sandbox")
        daemon.stop()
        assert watcher.stderr is not None
        watcher.wait(DEADLINE)
        err = watcher.stderr.read()
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert watcher.returncode == 1, err
    assert err.startswith("podmand ctl: ") and err.count("\n") == 1, err


def test_watch_retry_survives_a_restart(make_podmand: Any, cleanup: list[str]) -> None:
    """watch --retry: when podmand goes away it says so on stderr and reconnects; after a
    restart on the same socket it streams again (a fresh snapshot, then live events)."""
    daemon = make_podmand()
    # Without the state dir in its environment: daemon.stop() signals every process that has it.
    command = [a for a in daemon.command("ctl", "watch", "--retry") if not a.startswith("PODMAND_STATE_DIR=")]
    watcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = Lines(watcher), Lines(watcher, "stderr")
        first = sandbox()
        cleanup.append(first.id)
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=first))
        wait_until(lambda: out.having(first.id), what="ctl watch to print the sandbox")
        daemon.stop()
        wait_until(lambda: err.having("reconnecting in"), what="ctl watch to announce a reconnect")
        assert watcher.poll() is None
        daemon.start()  # its log still holds the first ready line: wait for the second
        wait_until(lambda: daemon.logs().count("ready: serving") == 2, what="podmand to serve again")
        second = sandbox()
        cleanup.append(second.id)
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=second))
        wait_until(lambda: out.having(second.id), what="ctl watch to stream again after the restart")
        assert all(line.startswith("podmand ctl: watch: ") for line in err.lines), err.lines
        for box in (first, second):
            daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id))
    finally:
        watcher.terminate()
        watcher.wait(DEADLINE)


def test_friendly_errors_for_wrong_sockets(make_podmand: Any, podman_socket: str) -> None:
    """No podmand at the path, or Podman's own API socket: ctl and health say which, in words."""
    daemon = make_podmand(start=False)
    missing = str(daemon.workdir / "run" / "nobody.sock")
    for tool in (["ctl", "list"], ["health"]):
        gone = subprocess.run(daemon.command(*tool, "--socket", missing), capture_output=True, text=True,
                              timeout=DEADLINE)
        assert gone.returncode == 1 and gone.stdout == ""
        assert gone.stderr.startswith(f"podmand {tool[0]}: no podmand is listening on {missing} ("), gone.stderr
        assert "podmand serve" in gone.stderr
        wrong = subprocess.run(daemon.command(*tool, "--socket", podman_socket), capture_output=True, text=True,
                               timeout=DEADLINE)
        assert wrong.returncode == 1
        assert wrong.stderr.strip() == (f"podmand {tool[0]}: {podman_socket} is not a podmand driver socket "
                                        "(it speaks HTTP/1.1: Podman's API socket?)"), wrong.stderr
    usage = subprocess.run(daemon.command("ctl", "describe", "--bogus", "x"), capture_output=True, text=True,
                           timeout=DEADLINE)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: podmand ctl describe "), usage.stderr


def test_completion_and_version_from_the_pex(make_podmand: Any) -> None:
    """The shipped pex prints a valid completion script and a version naming Podman's API."""
    daemon = make_podmand(start=False)
    script = subprocess.run(daemon.command("completion", "bash"), capture_output=True, text=True, timeout=DEADLINE)
    assert script.returncode == 0 and "describe" in script.stdout and "--retry" in script.stdout
    subprocess.run(["bash", "-n"], input=script.stdout, text=True, check=True)
    version = subprocess.run(daemon.command("--version"), capture_output=True, text=True, timeout=DEADLINE)
    lines = version.stdout.splitlines()
    assert version.returncode == 0 and lines[0].startswith("podmand ") and lines[1].startswith("Python 3.")
    assert re.fullmatch(r"Podman \S+ \(libpod API \S+, Docker API \S+\) at /\S+", lines[3]), lines
