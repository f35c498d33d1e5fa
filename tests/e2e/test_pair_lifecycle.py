"""The split topology's lifecycle (podmand/pair/lifecycle.py) against the real rootless
Podman, with the stand-in runtime and supervisor (tests/images: runtime:1, supervisor2:1,
workload:1) and real Ed25519-signed launch bundles (tests/standin/launch.py).

A component-level test: it calls ``lifecycle`` directly with podmand's libpod client on
the rootless socket (``PODMAN_ROOTLESS_SOCK`` from tests/setup-podman.sh env), the specs
built by ``pair.specs`` from a real plan; no pex (tests/e2e/test_pair_driver.py drives the
same through podmand). It makes its own objects under a sandbox id of its own, labelled with an owner of
its own (not ``io.podmand.owner=podmand``, which the e2e fixtures wipe), and removes
exactly those by name: it can run beside the full CI. The checks are the contract's
§7.3 and §2.4: the pair attaches, confirms and starts the agent as the identity; the
workload is fenced and bare; no byte of a bearer token is anywhere but the supervisor's
``auth.json``; a start re-mints the session and leaves no earlier token; delete leaves
nothing; a refused fence leaves nothing.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.errors import FailedPrecondition
from podmand.libpod import Info, PodmanClient, versions
from podmand.pair import documents, lifecycle, specs
from podmand.sandbox import spec as sandbox_spec
from podmand.sandbox.identity import Resolved
from podmand.sandbox.plan import Provision
from podmand.security.tokens import decode_launch_authentication
from tests.standin.launch import Launch
from tests.standin.test_split_podman import RUNTIME_IMAGE, SUPERVISOR_IMAGE, WORKLOAD_IMAGE, host_id, podman
from tests.wait import wait_until

T = TypeVar("T")
OWNER = "podmand-test-pairlife"  # not "podmand": the e2e fixtures' wipe leaves these alone
IDENTITY = 1000
STOP_TIMEOUT = 5
PROBE = ("import json,os,signal,time\n"
         "signal.signal(signal.SIGTERM, lambda *_: os._exit(0))\n"
         "status=dict(l.split(':\\t',1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
         "json.dump({'uid':os.getresuid(),'gid':os.getresgid(),'caps':status['CapEff'].strip(),"
         "'env':sorted(os.environ)}, open('/sandbox/probe-%d.json' % os.getpid(),'w'))\n"
         "while True: time.sleep(1)\n")


@dataclass
class Made:
    """What the test made, by name, to remove whatever happens."""

    containers: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)

    def remove(self) -> None:
        for name in self.containers:
            podman("rm", "-f", "-t", "0", name, check=False)
        for name in self.volumes:
            podman("volume", "rm", "-f", name, check=False)


@pytest.fixture(scope="module")
def runtime_bin() -> Iterator[Path]:
    """The runtime extracted from runtime:1 where the rootless user's containers can bind it."""
    if os.geteuid() != 0:
        pytest.skip("drives the rootless test user's Podman: needs root")
    if not os.environ.get("PODMAN_ROOTLESS_SOCK"):
        pytest.skip("PODMAN_ROOTLESS_SOCK unset (eval \"$(bash tests/setup-podman.sh env)\")")
    for image in (RUNTIME_IMAGE, SUPERVISOR_IMAGE, WORKLOAD_IMAGE):
        if podman("image", "exists", image, check=False).returncode != 0:
            pytest.skip(f"{image} missing (tests/images/build.sh rootless)")
    root = Path(tempfile.mkdtemp(prefix="podmand-pairlife-", dir="/tmp"))
    os.chmod(root, 0o755)
    cache = root / "cache"
    cache.mkdir()
    os.chown(cache, host_id(0, "uid"), host_id(0, "gid"))  # podman cp writes as the rootless user
    name = f"pairlife-extract-{uuid.uuid4().hex[:8]}"
    podman("create", "--name", name, RUNTIME_IMAGE)
    try:
        podman("cp", f"{name}:/openshell-sandbox", str(cache / "openshell-sandbox"))
    finally:
        podman("rm", "-f", name, check=False)
    # the workload's /etc/resolv.conf (the driver writes it into the sandbox's state directory)
    (cache / names.RESOLVER_FILE).write_text(names.RESOLVER)
    os.chown(cache / names.RESOLVER_FILE, host_id(0, "uid"), host_id(0, "gid"))  # "U" chowns it as that user
    yield cache / "openshell-sandbox"
    shutil.rmtree(root, ignore_errors=True)


@functools.cache
def podman_features() -> versions.Features:
    """What this Podman's /info says it applies (its CLI prints the same document): a plan made
    here asks, as podmand's would, for no limit a cgroup v2 without controllers refuses (6.1)."""
    return versions.of(msgspec.convert(json.loads(podman("info", "--format", "json").stdout), Info, strict=False))


def image(ref: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(podman("image", "inspect", ref).stdout)[0]
    return found


class Sandbox:
    """One sandbox's pair, built from a real plan by ``pair.specs``, and its launches."""

    def __init__(self, runtime_bin: Path, *, launcher: bool = True, workload_over: dict[str, Any] | None = None
                 ) -> None:
        self.sandbox_id = f"pl{uuid.uuid4().hex[:10]}"
        self.first = Launch(uid=IDENTITY, gid=IDENTITY, sandbox_id=self.sandbox_id)
        self.sent: list[bytes] = []  # every bundle made (each holds its own freshly signed tokens)
        self.settings = Settings()
        sandbox = pb.DriverSandbox(id=self.sandbox_id, name="life", workspace="ws",
                                   spec=pb.DriverSandboxSpec(launch_authentication=self.bundle(self.first)))
        self.plan = sandbox_spec.validate(sandbox, self.settings, podman=podman_features())
        workload_image, supervisor_image = image(WORKLOAD_IMAGE), image(SUPERVISOR_IMAGE)
        self.image_env = tuple(workload_image["Config"].get("Env") or [])
        self.prov = Provision(
            image_id=workload_image["Id"], image_user=workload_image["Config"].get("User", ""),
            image_env=self.image_env, network="unused", supervisor_path=str(runtime_bin),
            secrets_dir=str(runtime_bin.parent), instance="i1",
            identity=Resolved(uid=IDENTITY, gid=IDENTITY, supplementary=(), source="image",
                              digest=workload_image["Id"]))
        # rootless=True: the launcher form upstream's driver picks on rootless Podman; False:
        # the direct form (what it picks on rootful Podman for an image with USER)
        workload = specs.workload_spec(self.plan, self.settings, self.prov, rootless=launcher)
        workload.update(workload_over or {})
        supervisor = specs.supervisor_spec(self.plan, self.settings, self.prov,
                                           supervisor_image_id=supervisor_image["Id"])
        supervisor["env"][names.ENV_MAIN_PROCESS] = json.dumps(
            {"version": 1, "command": ["/usr/bin/python3", "-c", PROBE], "tty": False})
        for built in (workload, supervisor):
            built["labels"] = {**built["labels"], names.OWNER: OWNER}
        self.pair = lifecycle.Pair(
            sandbox_id=self.sandbox_id, workload=workload, supervisor=supervisor,
            workspace_volume=self.plan.volume_name, workspace_path=self.prov.workspace,
            channel_labels={names.OWNER: OWNER, names.SANDBOX_ID: self.sandbox_id}, stop_timeout=STOP_TIMEOUT)
        self.made = Made([self.pair.supervisor_name, self.pair.workload_name],
                         [self.pair.channel_volume, self.pair.workspace_volume])

    def bundle(self, launch: Launch) -> bytes:
        self.sent.append(launch.bundle())
        return self.sent[-1]

    def session(self, launch: Launch) -> lifecycle.Session:
        data = self.bundle(launch)
        bundle = decode_launch_authentication(data, "launch_authentication", refuse=FailedPrecondition)
        return lifecycle.Session(bundle=bundle, host_gateway_ip="127.0.0.1", userns=self.plan.userns)

    async def create(self, client: PodmanClient) -> str:
        await client.create_volume(self.pair.workspace_volume, {names.OWNER: OWNER})
        identity = documents.identity_of(self.prov.identity)
        return await lifecycle.create(client, self.pair, self.session(self.first), identity,
                                      documents.child_env(self.image_env, {}))


def run(call: Callable[[PodmanClient], Awaitable[T]]) -> T:
    """``call`` with a client of its own on the rootless socket (its connections belong to one loop)."""
    async def main() -> T:
        client = PodmanClient(os.environ["PODMAN_ROOTLESS_SOCK"])
        try:
            return await call(client)
        finally:
            await client.close()

    return asyncio.run(main())


def logs(name: str) -> str:
    result = podman("logs", name, check=False)
    return result.stdout + result.stderr


def inspect(name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(podman("inspect", name).stdout)[0]
    return found


def exists(kind: str, name: str) -> bool:
    args = ("container", "exists", name) if kind == "container" else ("volume", "exists", name)
    return podman(*args, check=False).returncode == 0


def stats(container: str, *paths: str, user: str = "0:0") -> dict[str, tuple[int, int, str]]:
    """uid, gid and mode of each path that exists, as the container sees them (looked at as
    ``user``: root without capabilities cannot search the identity's 0700 directories)."""
    script = ("import json,os,sys\n"
              "print(json.dumps({p:[os.lstat(p).st_uid,os.lstat(p).st_gid,oct(os.lstat(p).st_mode & 0o7777)]"
              " for p in sys.argv[1:] if os.path.lexists(p)}))")
    out = podman("exec", "--user", user, container, "/usr/bin/python3", "-c", script, *paths).stdout
    return {k: tuple(v) for k, v in json.loads(out).items()}


def token_windows(bundles: list[bytes], width: int = 16) -> set[bytes]:
    """Every ``width``-byte window of the signatures of the bearer tokens of ``bundles``: the
    part of a JWT no other token shares (headers and much of the claims are alike in base64),
    and what a copy, or a piece, of a token must carry to be usable."""
    out: set[bytes] = set()
    for sent in bundles:
        doc = json.loads(sent)["supervisor"]
        for token in (doc["gateway_token"], doc["sandbox_token"]):
            data = token.rpartition(".")[2].encode()
            out |= {data[i:i + width] for i in range(len(data) - width + 1)}
    return out


def leaked(data: bytes, windows: set[bytes]) -> bool:
    return any(w in data for w in windows)


def volume_bytes(name: str) -> bytes:
    """Every byte of a volume's contents (names and data), as root on the host reads them."""
    mount = Path(podman("volume", "inspect", name, "--format", "{{.Mountpoint}}").stdout.strip())
    out = bytearray()
    for path in sorted(mount.rglob("*")):
        out += str(path).encode()
        if path.is_file() and not path.is_symlink():
            out += path.read_bytes()
    return bytes(out)


def finished_ns(container: str) -> int:
    stamp = inspect(container)["State"]["FinishedAt"]  # 2026-12-06T07:50:01.123456789Z (or +00:00)
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", stamp)
    assert match, stamp
    import datetime
    whole = datetime.datetime.fromisoformat(match[1] + ("+00:00" if match[3] == "Z" else match[3]))
    return int(whole.timestamp()) * 10**9 + int((match[2] or "0").ljust(9, "0")[:9])


def wait_log(name: str, text: str, count: int = 1, timeout: float = 90) -> None:
    wait_until(lambda: logs(name).count(text) >= count, timeout, f"{name}: {text!r} x{count}", lambda: logs(name))


def probes(workload: str) -> list[dict[str, Any]]:
    script = "import glob,json;print(json.dumps([json.load(open(p)) for p in sorted(glob.glob('/sandbox/probe-*'))]))"
    out = podman("exec", "--user", "0:0", workload, "/usr/bin/python3", "-c", script, check=False)
    return json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else []


def wait_probe(workload: str, timeout: float) -> dict[str, Any]:
    """The main process's first probe; at the deadline, what the workload shows instead:
    the reading's failure, its workspace's files and its log."""
    def seen() -> str:
        script = "import glob;[print(p, repr(open(p).read())) for p in glob.glob('/sandbox/probe-*')]"
        read = podman("exec", "--user", "0:0", workload, "/usr/bin/python3", "-c", script, check=False)
        listing = podman("exec", "--user", "0:0", workload, "/bin/ls", "-lan", "/sandbox", check=False)
        return (f"probe files (exit {read.returncode}): {read.stdout}{read.stderr}\n"
                f"/sandbox (exit {listing.returncode}): {listing.stdout}{listing.stderr}\n"
                f"state {inspect(workload)['State']}\nlog:\n{logs(workload)[-3000:]}")
    found: list[dict[str, Any]] = wait_until(lambda: probes(workload), timeout, "the main process's probe", seen)
    return found[0]


def channel_and_supervisor_files(box: Sandbox) -> tuple[dict[str, Any], dict[str, Any]]:
    channel = stats(box.pair.workload_name, "/.openshell/channel", "/.openshell/channel/sandbox",
                    "/.openshell/channel/sandbox/bootstrap.json", "/.openshell/channel/sandbox/server.crt",
                    "/.openshell/channel/sandbox/server.key", "/.openshell/channel/sandbox/control.sock", "/sandbox",
                    names.SUPERVISOR_CA_DIR)
    supervisor = stats(box.pair.supervisor_name, "/.openshell", "/.openshell/supervisor",
                       names.RUNTIME_DESCRIPTOR_PATH, names.AUTH_BUNDLE_PATH, names.RESTART_METADATA_PATH,
                       "/.openshell/channel/sandbox/control.sock", "/run", "/run/openshell",
                       user=f"{IDENTITY}:{IDENTITY}")
    return channel, supervisor


@pytest.mark.parametrize("launcher", [True, False], ids=["launcher-form", "direct-form"])
def test_pair_create_stop_start_delete(runtime_bin: Path, launcher: bool) -> None:
    box = Sandbox(runtime_bin, launcher=launcher)
    workload, supervisor = box.pair.workload_name, box.pair.supervisor_name
    try:
        run(box.create)
        # the pair runs: attach, confirm, the agent started, the health socket up
        wait_log(supervisor, "openshell-supervisor: ready: health socket")
        log = logs(supervisor)
        for said in ("attached: snapshot generation", "confirmed: generation, session, claims, fence",
                     "started the main process /usr/bin/python3"):
            assert said in log, log
        health = podman("exec", supervisor, names.SUPERVISOR_ENTRYPOINT, "health", "--socket",
                        names.SUPERVISOR_HEALTH_SOCKET, check=False)
        assert health.returncode == 0, health.stdout + health.stderr
        probe = wait_probe(workload, 30)
        assert probe["uid"] == [IDENTITY] * 3 and probe["gid"] == [IDENTITY] * 3, probe
        assert probe["caps"] == "0000000000000000", probe

        # the workload: fenced, bare, as §3.2 says for each form
        w = inspect(workload)
        assert w["HostConfig"]["NetworkMode"] == "none" and not w["HostConfig"]["Privileged"]
        if launcher:  # the launcher's four, dropped (the probe) before the runtime serves
            assert set(w["EffectiveCaps"] or []) <= {f"CAP_{c}" for c in specs.LAUNCHER_CAPS}, w["EffectiveCaps"]
            assert w["Config"]["User"] == "0:0"
        else:
            assert not w["EffectiveCaps"] and w["Config"]["User"] == f"{IDENTITY}:{IDENTITY}", w["EffectiveCaps"]
        # userns auto: Podman 4.3.1 reports it "private", with the map it picked
        assert w["HostConfig"]["UsernsMode"] in ("auto", "private")
        assert w["HostConfig"]["IDMappings"]["UidMap"], w["HostConfig"]["IDMappings"]
        env = {e.partition("=")[0] for e in w["Config"]["Env"] or []}
        image_keys = {e.partition("=")[0] for e in box.image_env}
        assert not env & image_keys and not any(k.startswith("OPENSHELL_") for k in env), env
        # not empty as the spec asks: Podman sets these four whatever "env" says
        assert env <= {"container", "TERM", "HOSTNAME", "HOME"}, env
        s = inspect(supervisor)
        assert s["HostConfig"]["NetworkMode"] == "host" and s["Config"]["User"] == f"{IDENTITY}:{IDENTITY}"
        assert not s["EffectiveCaps"], s["EffectiveCaps"]

        # §2.4 as Podman left it
        channel, sup = channel_and_supervisor_files(box)
        print("channel:", channel, "\nsupervisor:", sup)
        ident = (IDENTITY, IDENTITY)
        # the channel root: the archive's "." says root's (the contract's). Podman 4.3.1's first
        # mount of a new volume gives its root to the container's user (no such directory in the
        # image), so there it is the identity's in the direct form; 5.4.2 keeps root's
        version = podman("version", "--format", "{{.Server.Version}}").stdout.strip()
        owner = ident if not launcher and version.startswith("4.") else (0, 0)
        assert channel["/.openshell/channel"] == (*owner, "0o755"), version
        assert channel["/.openshell/channel/sandbox"] == (*ident, "0o711")
        assert "/.openshell/channel/sandbox/bootstrap.json" not in channel, "the runtime deletes it once read"
        for f in ("server.crt", "server.key"):
            assert channel[f"/.openshell/channel/sandbox/{f}"] == (*ident, "0o600"), channel
        # not the archive's 0700: Podman's first mount of a new volume gives its root the owner and
        # mode of the image's directory there (workload:1's /sandbox: 0755), after the upload; the
        # rootless launcher then chowns it to the identity
        assert channel["/sandbox"] == (*ident, "0o755")
        assert sup["/.openshell"] == (0, 0, "0o755") and sup["/.openshell/supervisor"] == (*ident, "0o700")
        for path in (names.RUNTIME_DESCRIPTOR_PATH, names.AUTH_BUNDLE_PATH, names.RESTART_METADATA_PATH):
            assert sup[path] == (*ident, "0o600"), (path, sup)

        # no byte of a token but in the supervisor's auth.json
        windows = token_windows(box.sent)
        auth = podman("exec", supervisor, "/bin/cat", names.AUTH_BUNDLE_PATH).stdout.encode()
        assert auth == json.dumps(json.loads(box.sent[-1])["supervisor"], separators=(",", ":")).encode()
        assert leaked(auth, windows), "the scan finds the tokens where they are"
        for where, data in (("channel volume", volume_bytes(box.pair.channel_volume)),
                            ("workspace volume", volume_bytes(box.pair.workspace_volume)),
                            ("workload inspect", json.dumps(w).encode()),
                            ("supervisor inspect", json.dumps(s).encode()),
                            ("workload log", logs(workload).encode()), ("supervisor log", logs(supervisor).encode())):
            assert not leaked(data, windows), f"a token in the {where}"

        first_windows, first_cert = token_windows(box.sent[:]), channel_cert(box)
        assert "BEGIN CERTIFICATE" in first_cert

        # stop: the supervisor first, both exited
        assert run(lambda c: lifecycle.stop(c, box.pair)) is True
        assert inspect(supervisor)["State"]["Status"] == inspect(workload)["State"]["Status"] == "exited"
        assert finished_ns(supervisor) <= finished_ns(workload), "the supervisor stops first"

        # start with a fresh bundle: a new session, new TLS, the old tokens gone
        second = Launch(uid=IDENTITY, gid=IDENTITY, sandbox_id=box.sandbox_id)
        session = box.session(second)
        run(lambda c: lifecycle.start(c, box.pair, session, "g00000000000000a2"))
        wait_log(supervisor, f"auth bundle accepted: session {second.session_id}")
        wait_log(supervisor, "openshell-supervisor: ready: health socket", count=2)
        assert channel_cert(box) != first_cert, "new channel TLS"
        meta = json.loads(podman("exec", supervisor, "/bin/cat", names.RESTART_METADATA_PATH).stdout)
        assert meta["generation"] == "g00000000000000a2"
        auth = podman("exec", supervisor, "/bin/cat", names.AUTH_BUNDLE_PATH).stdout.encode()
        assert json.loads(auth)["session_id"] == second.session_id and not leaked(auth, first_windows)
        for where, data in (("channel volume", volume_bytes(box.pair.channel_volume)),
                            ("workload inspect", json.dumps(inspect(workload)).encode()),
                            ("supervisor inspect", json.dumps(inspect(supervisor)).encode())):
            assert not leaked(data, token_windows(box.sent)), f"a token in the {where}"

        # delete: nothing left
        assert run(lambda c: lifecycle.delete(c, box.pair)) is True
        for kind, name in (("container", supervisor), ("container", workload),
                           ("volume", box.pair.channel_volume), ("volume", box.pair.workspace_volume)):
            assert not exists(kind, name), f"{kind} {name} left"
    finally:
        box.made.remove()


def channel_cert(box: Sandbox) -> str:
    return podman("exec", "--user", f"{IDENTITY}:{IDENTITY}", box.pair.workload_name, "/bin/cat",
                  "/.openshell/channel/sandbox/server.crt").stdout


def test_refused_fence_leaves_nothing(runtime_bin: Path) -> None:
    # a workload given the rootless network of this Podman (Podman 6 has no slirp4netns)
    mode = "pasta" if podman_features().has((5, 0, 0)) else "slirp4netns"
    box = Sandbox(runtime_bin, workload_over={"netns": {"nsmode": mode}})
    try:
        with pytest.raises(FailedPrecondition, match=f"the outer fence does not hold: network mode is '{mode}'"):
            run(box.create)
        for kind, name in (("container", box.pair.supervisor_name), ("container", box.pair.workload_name),
                           ("volume", box.pair.channel_volume)):
            assert not exists(kind, name), f"{kind} {name} left"
    finally:
        box.made.remove()
