"""The split-topology stand-ins in real rootless Podman containers, from the test images
(tests/images/build.sh: runtime:1, supervisor2:1, workload:1), wired by hand the way the
Sandbox Protocol contract (§3.2) says a driver wires them, without podmand:

- the workload container: workload:1 with the runtime extracted from runtime:1 and
  bind-mounted read-only at /opt/openshell/bin/openshell-sandbox as its entrypoint,
  ``--network none``, no capabilities (or the launcher's four), no_new_privileges,
  ip_unprivileged_port_start=0, the channel and the workspace bind-mounted;
- the supervisor container: supervisor2:1, host network, no capabilities,
  no_new_privileges, the channel read-only, its own files at /.openshell/supervisor,
  a tmpfs /run.

It shows the pair working as the identity in both launch forms, and the runtime refusing
each container setting a driver can get wrong (what Podman's flags control: the user, a
capability, no_new_privileges, the network, the sysctl, the launcher's capabilities).
Needs root and the rootless test user's Podman (tests/setup-podman.sh).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.standin.launch import BOOTSTRAP, Launch
from tests.wait import wait_until

USER = os.environ.get("PODMAND_TEST_USER", "podmand")
RUNTIME_IMAGE = "localhost/podmand-test/runtime:1"
SUPERVISOR_IMAGE = "localhost/podmand-test/supervisor2:1"
WORKLOAD_IMAGE = "localhost/podmand-test/workload:1"
RUNTIME_BIN = "/opt/openshell/bin/openshell-sandbox"
IDENTITY = 1000
PROBE = ("import json,os,time\n"
         "status=dict(l.split(':\\t',1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
         "json.dump({'uid':os.getresuid(),'gid':os.getresgid(),'groups':os.getgroups(),'cwd':os.getcwd(),"
         "'env':dict(e.split('=',1) for e in open('/proc/self/environ').read().split('\\0') if e),"
         "'caps':[status[k].strip() for k in ('CapInh','CapPrm','CapEff','CapBnd','CapAmb')],"
         "'nnp':status['NoNewPrivs'].strip(),'net':sorted(os.listdir('/sys/class/net'))},"
         "open('/sandbox/probe.json','w'))\n"
         "while not os.path.exists('/sandbox/release'): time.sleep(0.05)\n"
         "raise SystemExit(3)\n")


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    entry = pwd.getpwnam(USER)
    env = ["env", "-i", f"HOME={entry.pw_dir}", f"USER={USER}", "PATH=/usr/local/bin:/usr/bin:/bin",
           f"XDG_RUNTIME_DIR=/run/user/{entry.pw_uid}"]
    result = subprocess.run(["runuser", "-u", USER, "--", *env, "podman", *args], capture_output=True, text=True,
                            timeout=timeout, cwd="/")
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {result.returncode}\n{result.stderr}")
    return result


def host_id(container_id: int, kind: str) -> int:
    """The host uid (gid) of a container uid (gid) under the rootless user's default mapping."""
    if container_id == 0:
        entry = pwd.getpwnam(USER)
        return entry.pw_uid if kind == "uid" else entry.pw_gid
    for line in Path(f"/etc/sub{kind}").read_text().splitlines():
        name, start, _count = line.split(":")
        if name in (USER, str(pwd.getpwnam(USER).pw_uid)):
            return int(start) + container_id - 1
    raise AssertionError(f"no /etc/sub{kind} range for {USER}")


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    """A directory the rootless user's containers can reach, and the runtime extracted from runtime:1
    (as a driver extracts it into its cache)."""
    if os.geteuid() != 0:
        pytest.skip("drives the rootless test user's Podman: needs root")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        pytest.skip(f"no rootless test user {USER} (tests/setup-podman.sh)")
    if podman("image", "exists", WORKLOAD_IMAGE, check=False).returncode != 0:
        pytest.skip(f"{WORKLOAD_IMAGE} missing (tests/images/build.sh rootless)")
    root = Path(tempfile.mkdtemp(prefix="podmand-standin-", dir="/tmp"))
    os.chmod(root, 0o755)
    cache = root / "runtime-cache"
    cache.mkdir()
    os.chown(cache, host_id(0, "uid"), host_id(0, "gid"))
    name = f"standin-extract-{uuid.uuid4().hex[:8]}"
    podman("create", "--name", name, RUNTIME_IMAGE)
    try:
        podman("cp", f"{name}:/openshell-sandbox", str(cache / "openshell-sandbox"))
    finally:
        podman("rm", "-f", name, check=False)
    yield root
    shutil.rmtree(root, ignore_errors=True)


class Containers:
    """The files of one launch, owned as the container identity sees them, and the containers made."""

    def __init__(self, base: Path, launch: Launch) -> None:
        self.launch = launch
        self.dir = Path(tempfile.mkdtemp(prefix="pair-", dir=base))
        os.chmod(self.dir, 0o755)
        self.runtime_bin = base / "runtime-cache" / "openshell-sandbox"
        self.channel, self.workspace = self.dir / "channel", self.dir / "workspace"
        self.supdir = self.dir / "supervisor"
        self.sandbox = self.channel / "sandbox"
        self.uid, self.gid = host_id(launch.uid, "uid"), host_id(launch.gid, "gid")
        self.names: list[str] = []
        for d, mode, owned in ((self.channel, 0o755, False), (self.sandbox, 0o711, True), (self.workspace, 0o700, True),
                               (self.supdir, 0o700, True)):
            d.mkdir()
            os.chmod(d, mode)
            os.chown(d, *((self.uid, self.gid) if owned else (host_id(0, "uid"), host_id(0, "gid"))))
        for path, data in ((self.sandbox / "bootstrap.json", json.dumps(launch.bootstrap())),
                           (self.sandbox / "server.crt", launch.tls.chain_pem),
                           (self.sandbox / "server.key", launch.tls.key_pem.decode()),
                           (self.supdir / "runtime-descriptor.json", json.dumps(launch.descriptor())),
                           (self.supdir / "auth.json", json.dumps(launch.auth()))):
            path.write_text(data)
            os.chmod(path, 0o600)
            os.chown(path, self.uid, self.gid)

    def name(self, role: str) -> str:
        name = f"standin-{uuid.uuid4().hex[:10]}-{role}"
        self.names.append(name)
        return name

    def workload_args(self, *, user: str = f"{IDENTITY}:{IDENTITY}", caps: tuple[str, ...] = (), nnp: bool = True,
                      network: str = "none", sysctl: bool = True) -> list[str]:
        return ["--network", network, "--cap-drop", "ALL", *(a for c in caps for a in ("--cap-add", c)),
                *(["--security-opt", "no-new-privileges"] if nnp else []),
                *(["--sysctl", "net.ipv4.ip_unprivileged_port_start=0"] if sysctl else []),
                "--user", user, "-v", f"{self.channel}:/.openshell/channel", "-v", f"{self.workspace}:/sandbox",
                "-v", f"{self.runtime_bin}:{RUNTIME_BIN}:ro", "--entrypoint", RUNTIME_BIN, WORKLOAD_IMAGE]

    def workload(self, args: list[str] | None = None, **options: Any) -> str:
        name = self.name("workload")
        podman("run", "-d", "--name", name, *self.workload_args(**options),
               *(args if args is not None else ["--bootstrap", BOOTSTRAP]))
        return name

    def supervisor(self, command: list[str]) -> str:
        name = self.name("supervisor")
        spec = json.dumps({"version": 1, "command": command, "tty": False})
        podman("run", "-d", "--name", name, "--network", "host", "--cap-drop", "ALL", "--security-opt",
               "no-new-privileges", "--user", f"{IDENTITY}:{IDENTITY}",
               "-v", f"{self.channel}:/.openshell/channel:ro", "-v", f"{self.supdir}:/.openshell/supervisor",
               # upstream's mode=0777 comes back root 0755 on Podman 4.3.1 (the supervisor, as the identity,
               # could not create /run/openshell): U gives the tmpfs to the container's user instead
               "--tmpfs", "/run:rw,noexec,nosuid,nodev,mode=0777,size=64m,U",
               "-e", f"OPENSHELL_SANDBOX_ID={self.launch.sandbox_id}", "-e", "OPENSHELL_SANDBOX=box",
               "-e", "OPENSHELL_ENDPOINT=http://127.0.0.1:8080", "-e", f"OPENSHELL_MAIN_PROCESS_SPEC={spec}",
               "-e", "OPENSHELL_ADMITTED_ISOLATION_BACKEND=openshell-sandbox", SUPERVISOR_IMAGE,
               "--workdir", "/sandbox",
               "--backend-descriptor-file=/.openshell/supervisor/runtime-descriptor.json",
               "--auth-bundle-file=/.openshell/supervisor/auth.json",
               "--health-socket-path=/run/openshell/supervisor-health.sock")
        return name

    def logs(self, name: str) -> str:
        result = podman("logs", name, check=False)
        return result.stdout + result.stderr

    def wait_log(self, name: str, text: str, timeout: float = 60) -> None:
        wait_until(lambda: text in self.logs(name), timeout, repr(text), lambda: self.logs(name))

    def exit_code(self, name: str) -> int:
        return int(podman("wait", name, timeout=60).stdout.strip())

    def close(self) -> None:
        for name in self.names:
            podman("rm", "-f", "-t", "0", name, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def containers(base: Path) -> Iterator[Containers]:
    c = Containers(base, Launch(uid=IDENTITY, gid=IDENTITY))
    yield c
    c.close()


def run_pair(c: Containers, workload: str) -> str:
    c.wait_log(workload, "openshell-sandbox: listening on")
    supervisor = c.supervisor(["/usr/bin/python3", "-c", PROBE])
    c.wait_log(supervisor, "openshell-supervisor: ready: health socket /run/openshell/supervisor-health.sock")
    health = podman("exec", supervisor, "/openshell-supervisor", "health", "--socket",
                    "/run/openshell/supervisor-health.sock", check=False)
    assert health.returncode == 0, health.stderr
    probe_file = c.workspace / "probe.json"
    wait_until(probe_file.exists, 30, "the main process's probe")
    probe = json.loads(probe_file.read_text())
    assert probe["uid"] == [IDENTITY] * 3 and probe["gid"] == [IDENTITY] * 3
    assert set(probe["groups"]) <= {IDENTITY}, "no supplementary group but the primary one"
    assert probe["caps"] == ["0000000000000000"] * 5 and probe["nnp"] == "1"
    assert probe["net"] == ["lo"] and probe["cwd"] == "/sandbox"
    assert probe["env"] == c.launch.child_env
    assert not (c.sandbox / "bootstrap.json").exists()
    assert (c.sandbox / "control.sock").stat().st_mode & 0o777 == 0o666
    (c.workspace / "release").touch()
    assert c.exit_code(supervisor) == 3, c.logs(supervisor)
    assert c.exit_code(workload) == 3, c.logs(workload)
    return supervisor


def test_pair_runs_in_containers_as_the_identity(containers: Containers) -> None:
    c = containers
    workload = c.workload()
    inspect = json.loads(podman("inspect", workload).stdout)[0]
    assert inspect["HostConfig"]["NetworkMode"] == "none" and not inspect["HostConfig"]["Privileged"]
    supervisor = run_pair(c, workload)
    log = c.logs(supervisor)
    assert "confirmed: generation, session, claims, fence, audit, properties and identity match" in log
    assert c.launch.auth()["sandbox_token"].split(".")[1] not in log + c.logs(workload)


def test_launcher_form_drops_to_the_identity_and_owns_the_workspace(containers: Containers) -> None:
    c = containers
    os.chown(c.workspace, host_id(0, "uid"), host_id(0, "gid"))     # as Podman leaves a new volume
    workload = c.workload(["launch-capability-free", str(IDENTITY), str(IDENTITY), BOOTSTRAP, "/sandbox"],
                          user="0:0", caps=("CHOWN", "SETGID", "SETUID", "SETPCAP"))
    c.wait_log(workload, "openshell-sandbox: launcher: dropped to 1000:1000, no capabilities, no_new_privs")
    st = c.workspace.stat()
    assert (st.st_uid, st.st_gid) == (c.uid, c.gid), "the workspace belongs to the identity"
    run_pair(c, workload)


REFUSALS = [
    pytest.param({"user": "0:0"}, "sandbox runtime must not run as root", id="root"),
    pytest.param({"caps": ("NET_RAW",)}, "sandbox runtime must run without capabilities; non-zero masks:",
                 id="capability"),
    pytest.param({"nnp": False}, "sandbox runtime requires no_new_privileges", id="no-nnp"),
    pytest.param({"network": "slirp4netns"}, "sandbox network namespace must have only lo, found lo, ", id="network"),
    pytest.param({"sysctl": False}, "net.ipv4.ip_unprivileged_port_start must be 0 for the DNS relay, found 1024",
                 id="sysctl"),
]


@pytest.mark.parametrize(("options", "message"), REFUSALS)
def test_runtime_refuses_the_container_settings(containers: Containers, options: dict[str, Any],
                                                message: str) -> None:
    c = containers
    result = podman("run", "--rm", "--name", c.name("refused"), *c.workload_args(**options), "--bootstrap", BOOTSTRAP,
                    check=False)
    assert result.returncode == 1, result.stderr
    assert f"openshell-sandbox: error: {message}" in result.stderr, result.stderr
    assert (c.sandbox / "bootstrap.json").exists(), "refused before the bootstrap is consumed"


def test_launcher_without_its_capabilities_is_refused(containers: Containers) -> None:
    c = containers
    os.chown(c.workspace, host_id(0, "uid"), host_id(0, "gid"))
    result = podman("run", "--rm", "--name", c.name("refused"), *c.workload_args(user="0:0"),
                    "launch-capability-free", str(IDENTITY), str(IDENTITY), BOOTSTRAP, "/sandbox", check=False)
    assert result.returncode == 1, result.stderr
    assert ("openshell-sandbox: error: chown workspace /sandbox to 1000:1000: Operation not permitted"
            in result.stderr), result.stderr
