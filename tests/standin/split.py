"""Harness for the split-topology stand-ins (tests/images/runtime/openshell-sandbox and
tests/images/supervisor2/openshell-supervisor), run as real processes on this host
without podmand.

Each side runs in a mount namespace of its own, chrooted into the Python rootfs the
test images are made from (tests/images/build.sh's python-standin.tar: bookworm,
python3, grpcio, cryptography), as an unprivileged identity with no capabilities and
no_new_privs (setpriv), with the files a driver would give it bind-mounted at the
contract's paths: the runtime gets the channel directory at /.openshell/channel, the
workspace at /sandbox and its script at /opt/openshell/bin/openshell-sandbox, in a
network namespace of its own holding only ``lo`` with ip_unprivileged_port_start 0
(the workload's ``--network none`` and sysctl); the supervisor stays on the host
network with the channel read-only, its own files at /.openshell/supervisor and a /run
of its own. tests/standin/test_split_podman.py runs the same stand-ins in real rootless
Podman containers. Needs root.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.standin.launch import Launch
from tests.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path("/var/cache/podmand-test")
RUNTIME_SRC = ROOT / "tests/images/runtime/openshell-sandbox"
SUPERVISOR_SRC = ROOT / "tests/images/supervisor2/openshell-supervisor"
RUNTIME_BIN = "/opt/openshell/bin/openshell-sandbox"
SUPERVISOR_ARGS = ("--workdir", "/sandbox", "--backend-descriptor-file=/.openshell/supervisor/runtime-descriptor.json",
                   "--auth-bundle-file=/.openshell/supervisor/auth.json",
                   "--health-socket-path=/run/openshell/supervisor-health.sock")
Document = dict[str, Any] | bytes
METHOD = "/openshell.sandbox.protocol.v1.IsolationBoundary/Exchange"


def rootfs_for_tests(base: Path) -> Path:
    """The Python stand-in rootfs, extracted once, with the mount points the harness binds onto."""
    subprocess.run(["bash", str(ROOT / "tests/images/build.sh"), "cache"], check=True, capture_output=True)
    root = base / "rootfs"
    root.mkdir()
    subprocess.run(["tar", "-C", str(root), "-xf", str(CACHE / "python-standin.tar")], check=True)
    os.chmod(root, 0o755)
    for d in (".openshell/channel", ".openshell/supervisor", "opt/openshell/bin"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / RUNTIME_BIN.lstrip("/")).touch()
    return root


class Side:
    """One stand-in process; its stderr goes to a file the test reads."""

    def __init__(self, proc: subprocess.Popen[bytes], stderr: Path) -> None:
        self.proc, self._stderr = proc, stderr

    @property
    def log(self) -> str:
        return self._stderr.read_text(errors="replace")

    def wait(self, timeout: float = 30.0) -> int:
        wait_until(lambda: self.proc.poll() is not None, timeout, "the stand-in to exit", lambda: self.log)
        return self.proc.returncode

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        wait_until(lambda: text in self.log or self.proc.poll() is not None, timeout, repr(text), lambda: self.log)
        assert text in self.log, self.log

    def refused(self, message: str, code: int = 1) -> None:
        """The stand-in exited with ``code`` after one error line carrying ``message``."""
        assert self.wait() == code, self.log
        errors = [line for line in self.log.splitlines() if ": error: " in line]
        assert len(errors) == 1 and message in errors[0], self.log

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def setpriv(uid: int, gid: int, groups: Sequence[int] | None, *, nnp: bool, bounding: str) -> list[str]:
    return ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={gid}",
            "--clear-groups" if not groups else "--groups=" + ",".join(map(str, groups)),
            "--inh-caps=-all", f"--bounding-set={bounding}", *(["--no-new-privs"] if nnp else [])]


def env_args(env: dict[str, str]) -> list[str]:
    return ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items())]


class Pair:
    """The files of one launch, laid out as a driver would, and the stand-ins started on them."""

    def __init__(self, rootfs: Path, tmp: Path, launch: Launch) -> None:
        self.rootfs, self.tmp, self.launch = rootfs, tmp, launch
        self.channel = tmp / "channel"
        self.sandbox = self.channel / "sandbox"
        self.supdir = tmp / "supervisor"
        self.workspace = tmp / "workspace"
        self.run_dir = tmp / "run"
        self.sides: list[Side] = []
        for d, mode in ((self.channel, 0o755), (self.sandbox, 0o711), (self.supdir, 0o700),
                        (self.workspace, 0o700), (self.run_dir, 0o777)):
            d.mkdir()
            os.chmod(d, mode)
        for d in (self.sandbox, self.supdir, self.workspace):
            os.chown(d, launch.uid, launch.gid)

    # ---------------------------------------------------------------- files (§2.4)
    def put(self, path: Path, data: bytes | str | dict[str, Any], *, owner: tuple[int, int] | None = None,
            mode: int = 0o600) -> None:
        raw = data if isinstance(data, bytes) else (json.dumps(data) if isinstance(data, dict) else data).encode()
        path.write_bytes(raw)
        os.chmod(path, mode)
        uid, gid = owner or (self.launch.uid, self.launch.gid)
        os.chown(path, uid, gid)

    def write(self, *, bootstrap: Document | None = None, descriptor: Document | None = None,
              auth: Document | None = None) -> None:
        """Every file of the launch; a document given replaces the launch's own."""
        launch = self.launch
        self.put(self.sandbox / "bootstrap.json", bootstrap if bootstrap is not None else launch.bootstrap())
        self.put(self.sandbox / "server.crt", launch.tls.chain_pem)
        self.put(self.sandbox / "server.key", launch.tls.key_pem)
        self.put(self.supdir / "runtime-descriptor.json",
                 descriptor if descriptor is not None else launch.descriptor())
        self.put(self.supdir / "auth.json", auth if auth is not None else launch.auth())

    @property
    def socket(self) -> Path:
        return self.sandbox / "control.sock"

    # ---------------------------------------------------------------- the runtime
    def runtime(self, args: Sequence[str] | None = None, *, uid: int | None = None, gid: int | None = None,
                groups: Sequence[int] | None = None, nnp: bool = True, bounding: str = "-all", netns: bool = True,
                port_start: int = 0, net_setup: str = "",
                env: dict[str, str] | None = None) -> Side:
        launch = self.launch
        args = list(args) if args is not None else ["--bootstrap", "/.openshell/channel/sandbox/bootstrap.json"]
        net = ""
        if netns:
            net = f"ip link set lo up\necho {port_start} > /proc/sys/net/ipv4/ip_unprivileged_port_start\n{net_setup}"
        script = ('set -e\nR=$0\nmount --rbind /proc "$R/proc"\nmount --rbind /dev "$R/dev"\n'
                  'mount --bind "$1" "$R/.openshell/channel"\nmount --bind "$2" "$R/sandbox"\n'
                  f'mount --bind "$3" "$R{RUNTIME_BIN}"\nmount -o remount,bind,ro "$R{RUNTIME_BIN}"\n'
                  + net + 'shift 3\nexec chroot "$R" "$@"')
        cmd = ["unshare", "--mount", *(["--net"] if netns else []), "/bin/sh", "-c", script, str(self.rootfs),
               str(self.channel), str(self.workspace), str(RUNTIME_SRC),
               *setpriv(uid if uid is not None else launch.uid, gid if gid is not None else launch.gid,
                        groups if groups is not None else launch.groups, nnp=nnp, bounding=bounding),
               *env_args(env or {}), RUNTIME_BIN, *args]
        return self.start(cmd, "runtime")

    # ---------------------------------------------------------------- the supervisor
    def supervisor(self, args: Sequence[str] = SUPERVISOR_ARGS, *, command: Sequence[str] | None = None,
                   uid: int | None = None, gid: int | None = None, groups: Sequence[int] | None = None,
                   env: dict[str, str] | None = None, pass_fds: Sequence[int] = ()) -> Side:
        launch = self.launch
        spec = {"version": 1, "command": list(command or ["/bin/sh", "-c", "exit 0"]), "tty": False}
        base = {"OPENSHELL_SANDBOX_ID": launch.sandbox_id, "OPENSHELL_SANDBOX": "box",
                "OPENSHELL_ENDPOINT": "http://127.0.0.1:8080",
                "OPENSHELL_ADMITTED_ISOLATION_BACKEND": "openshell-sandbox",
                "OPENSHELL_MAIN_PROCESS_SPEC": json.dumps(spec), "STANDIN_SUPERVISOR_CONNECT_TIMEOUT": "20"}
        merged = {k: v for k, v in {**base, **(env or {})}.items() if v is not None}
        script = ('set -e\nR=$0\nmount --rbind /proc "$R/proc"\nmount --rbind /dev "$R/dev"\n'
                  'mount --bind "$1" "$R/.openshell/channel"\nmount -o remount,bind,ro "$R/.openshell/channel"\n'
                  'mount --bind "$2" "$R/.openshell/supervisor"\nmount --bind "$3" "$R/run"\n'
                  'mount --bind "$4" "$R/openshell-supervisor"\nmount -o remount,bind,ro "$R/openshell-supervisor"\n'
                  'shift 4\nexec chroot "$R" "$@"')
        cmd = ["unshare", "--mount", "/bin/sh", "-c", script, str(self.rootfs), str(self.channel), str(self.supdir),
               str(self.run_dir), str(SUPERVISOR_SRC),
               *setpriv(uid if uid is not None else launch.uid, gid if gid is not None else launch.gid,
                        groups if groups is not None else launch.groups, nnp=True, bounding="-all"),
               *env_args(merged), "/openshell-supervisor", *args]
        return self.start(cmd, "supervisor", pass_fds)

    def health(self, path: str = "/run/openshell/supervisor-health.sock") -> subprocess.CompletedProcess[str]:
        """``openshell-supervisor health --socket P`` in the supervisor's view of /run."""
        script = ('set -e\nR=$0\nmount --rbind /proc "$R/proc"\nmount --rbind /dev "$R/dev"\n'
                  'mount --bind "$1" "$R/run"\nmount --bind "$2" "$R/openshell-supervisor"\n'
                  'shift 2\nexec chroot "$R" "$@"')
        cmd = ["unshare", "--mount", "/bin/sh", "-c", script, str(self.rootfs), str(self.run_dir), str(SUPERVISOR_SRC),
               *setpriv(self.launch.uid, self.launch.gid, None, nnp=True, bounding="-all"),
               *env_args({}), "/openshell-supervisor", "health", "--socket", path]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30)

    def start(self, cmd: list[str], name: str, pass_fds: Sequence[int] = ()) -> Side:
        stderr = self.tmp / f"{name}.{len(self.sides)}.log"
        with open(stderr, "wb") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, pass_fds=tuple(pass_fds),
                                    env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        side = Side(proc, stderr)
        self.sides.append(side)
        return side

    def listening(self, runtime: Side) -> None:
        runtime.wait_for("openshell-sandbox: listening on")

    def close(self) -> None:
        for side in self.sides:
            side.stop()


@pytest.fixture(scope="session")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.skip("the stand-ins run chrooted in fresh namespaces as other users: needs root")
    return rootfs_for_tests(tmp_path_factory.mktemp("split"))


@pytest.fixture
def pair(rootfs: Path, tmp_path: Path) -> Iterator[Pair]:
    os.chmod(tmp_path, 0o755)
    p = Pair(rootfs, tmp_path, Launch())
    yield p
    p.close()


# ------------------------------------------------------------------ a test client of the runtime

class Bridge:
    """TLS 1.3 to the runtime's control socket, for grpc: grpc (BoringSSL) negotiates no Ed25519,
    so Python's ssl carries each grpc connection from a private plaintext socket."""

    def __init__(self, target: Path, ctx: ssl.SSLContext, server_name: str) -> None:
        self.target, self.ctx, self.server_name = target, ctx, server_name
        self.dir = tempfile.mkdtemp(prefix="standin-client-")
        self.local = os.path.join(self.dir, "c.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.local)
        sock.listen(8)
        sock.setblocking(False)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_until_complete, args=(self.serve(sock),), daemon=True).start()

    async def serve(self, sock: socket.socket) -> None:
        server = await asyncio.start_unix_server(self.carry, sock=sock)
        async with server:
            await server.serve_forever()

    async def carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            r2, w2 = await asyncio.open_unix_connection(str(self.target), ssl=self.ctx,
                                                        server_hostname=self.server_name)
        except (OSError, ssl.SSLError):
            writer.close()
            return

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, ssl.SSLError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, w2), pump(r2, writer))

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def client_context(anchor_pem: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(cadata=anchor_pem)
    ctx.set_alpn_protocols(["h2"])
    return ctx


def chunk(data: bytes) -> bytes:
    out, n = bytearray(b"\x0a"), len(data)
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out) + data


def unchunk(message: bytes) -> bytes:
    """BoundaryChunk's field 1 (the runtime sends one field per message)."""
    i, length, shift = 1, 0, 0
    while True:
        byte = message[i]
        i += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return message[i:i + length]


def envelope(request: dict[str, Any], **override: Any) -> dict[str, Any]:
    import hashlib
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":")).encode()
    return {"request_id": str(uuid.uuid4()), "payload_digest": hashlib.sha256(canonical).hexdigest(),
            "request": request, **override}


class Client:
    """Exchange calls with any metadata, to show the runtime refusing bad ones."""

    def __init__(self, pair: Pair) -> None:
        launch = pair.launch
        self.bridge = Bridge(pair.socket, client_context(launch.tls.anchor_pem), launch.server_name)
        self.channel = grpc.insecure_channel(f"unix:{self.bridge.local}")
        self.stub = self.channel.stream_stream(METHOD, request_serializer=chunk, response_deserializer=unchunk)
        self.launch = launch

    def raw(self, body: bytes, metadata: Sequence[tuple[str, str]]) -> dict[str, Any]:
        received = b"".join(self.stub(iter([body]), metadata=list(metadata), timeout=20))
        (length,) = struct.unpack(">I", received[:4])
        return dict(json.loads(received[4:4 + length]))

    def call(self, request: dict[str, Any], token: str | None = None, *,
             metadata: Sequence[tuple[str, str]] | None = None, **override: Any) -> dict[str, Any]:
        payload = json.dumps(envelope(request, **override)).encode()
        if metadata is None:
            metadata = [("authorization", f"Bearer {token or self.launch.token()}")]
        return self.raw(struct.pack(">I", len(payload)) + payload, metadata)["response"]

    def attach(self, instance: str | None = None, **kw: Any) -> dict[str, Any]:
        return self.call({"operation": "attach", "supervisor_instance_id": instance or str(uuid.uuid4()),
                          "policy": POLICY, "resource_claims": self.launch.claims()}, **kw)

    def close(self) -> None:
        self.channel.close()
        self.bridge.close()


POLICY = {"version": 1, "read_only": [], "read_write": [], "include_workdir": True, "network": "block",
          "proxy_addr": None, "landlock": "best_effort", "run_as_user": None, "run_as_group": None}
