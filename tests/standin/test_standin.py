"""The supervisor stand-in against the OpenShell supervisor contract (upstream
NVIDIA/OpenShell 2f7fb65): every violation a driver can commit fails with
upstream's message and exit code, in upstream's order, and a correct launch runs
the main process with upstream's identity, environment and signal handling.

The compiled binary runs directly, without Podman: PID 1 of a fresh PID and mount
namespace (``unshare``), chrooted into a copy of the test sandbox rootfs, with an
``env -i`` environment shaped like a driver's and, where a test needs it, fewer
capabilities (``setpriv``). Needs root.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path("/var/cache/podmand-test")
SUPERVISOR = "/opt/openshell/bin/openshell-sandbox"
TOKEN = "header.s3cr3t-payload.signature"
TLS_DIR = "/etc/openshell/tls/client"
TOKEN_FILE = "/etc/openshell/auth/sandbox.jwt"
PROXY_AUTH = "/etc/openshell/auth/upstream-proxy"
PROXY_CA = "/etc/openshell/tls/proxy/ca-bundle.pem"
PROXY_SECRET = "proxyuser:pr0xy-s3cret"
PROXY_ARGS = ("--workdir", "/sandbox", "--upstream-proxy", "http://proxy.corp:3128")
PROXY_INVALID = "invalid upstream corporate proxy configuration: "
PROXY_CA_ARG = f"--upstream-proxy-ca-bundle={PROXY_CA}"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
NEWER = {"STANDIN_SUPERVISOR_NEWER": "1"}    # stand in for a supervisor after 2f7fb65 (it has PROXY_CA_ARG)
CLEARTEXT = ("--upstream-proxy-auth-file sends the credential as cleartext Basic auth over the plain-TCP proxy "
             "connection; refusing without --upstream-proxy-auth-allow-insecure")
# the main process records what it is and sees, then exits 0
PROBE = ("cat /proc/$$/status > /tmp/probe.status; cat /proc/$$/environ > /tmp/probe.environ; "
         "pwd > /tmp/probe.cwd; readlink /proc/$$/fd/0 > /tmp/probe.stdin")
POLICY_REQUIRED = (
    "Sandbox policy required. Provide one of:\n"
    " - --policy-rules and --policy-data (or OPENSHELL_POLICY_RULES and OPENSHELL_POLICY_DATA env vars)\n"
    " - --sandbox-id and --openshell-endpoint (or OPENSHELL_SANDBOX_ID and OPENSHELL_ENDPOINT env vars)")
NO_TOKEN = ("no sandbox token source available \u2014 set one of OPENSHELL_SANDBOX_TOKEN, "
            "OPENSHELL_SANDBOX_TOKEN_FILE, or OPENSHELL_K8S_SA_TOKEN_FILE")
NETNS = ("Network namespace creation failed and proxy mode requires isolation. Ensure CAP_NET_ADMIN and "
         "CAP_SYS_ADMIN are available and iproute2 is installed. Error: ")
NO_TCP = ("policy contains protocol: tcp endpoints, but the selected runtime does not advertise policy DNS "
          "and transparent TCP support")
PIDS = "; configure the compute driver or container runtime to enforce a PID limit"
EINVAL = "Error:   \u00d7 Invalid argument (os error 22)"
ENOENT = "Error:   \u00d7 No such file or directory (os error 2)"
SUPERVISOR_ONLY = ("OPENSHELL_OCI_IMAGE_USER", "OPENSHELL_SANDBOX_UID", "OPENSHELL_SANDBOX_GID",
                   "OPENSHELL_SANDBOX_TOKEN", "OPENSHELL_SANDBOX_TOKEN_FILE", "OPENSHELL_K8S_SA_TOKEN_FILE",
                   "OPENSHELL_TLS_CA", "OPENSHELL_TLS_CERT", "OPENSHELL_TLS_KEY",
                   "OPENSHELL_PROVIDER_SPIFFE_WORKLOAD_API_SOCKET", "OPENSHELL_NETWORK_RUNTIME_CAPABILITIES")

Env = dict[str, "str | bytes | None"]   # None removes a variable
Setup = Callable[["Box"], object]       # prepares the rootfs copy before a launch


def spec(command: list[str], tty: bool = False) -> str:
    return json.dumps({"version": 1, "command": command, "tty": tty}, separators=(",", ":"))


def b64(data: bytes, pad: bool = False) -> str:
    text = base64.urlsafe_b64encode(data).decode()
    return "base64url:" + (text if pad else text.rstrip("="))


# What an upstream-shaped driver passes (Podman V1: OCI identity from Config.User).
BASE_ENV: Env = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "OPENSHELL_SANDBOX": "box",
    "OPENSHELL_SANDBOX_ID": "sb-standin",
    "OPENSHELL_ENDPOINT": "http://host.openshell.internal:8080",
    "OPENSHELL_SSH_SOCKET_PATH": "/run/openshell/ssh.sock",
    "OPENSHELL_SANDBOX_TOKEN_FILE": TOKEN_FILE,
    "OPENSHELL_OCI_IMAGE_USER": "sandbox",
    "OPENSHELL_SANDBOX_UID": "",
    "OPENSHELL_SANDBOX_GID": "",
    "OPENSHELL_NETWORK_RUNTIME_CAPABILITIES": "policy-dns-transparent-tcp",
    "OPENSHELL_MAIN_PROCESS_SPEC": spec(["/bin/sh", "-c", PROBE]),
}
RESOLVED: Env = {"OPENSHELL_OCI_IMAGE_USER": None, "OPENSHELL_SANDBOX_UID": "1500", "OPENSHELL_SANDBOX_GID": "1600"}
NONE_MODE: Env = {"OPENSHELL_OCI_IMAGE_USER": None, "OPENSHELL_SANDBOX_UID": None, "OPENSHELL_SANDBOX_GID": None}
HTTPS: Env = {"OPENSHELL_ENDPOINT": "https://host.openshell.internal:8443", "OPENSHELL_TLS_CA": f"{TLS_DIR}/ca.crt",
              "OPENSHELL_TLS_CERT": f"{TLS_DIR}/tls.crt", "OPENSHELL_TLS_KEY": f"{TLS_DIR}/tls.key"}


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def state(pid: int) -> str:
    """The process's state letter ('' once it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return ""


@dataclass
class Probe:
    uid: int
    gid: int
    groups: set[int]
    cap_bnd: int
    env: dict[str, str]
    cwd: str
    stdin: str


class Run:
    """One stand-in launch; its stderr goes to a file the test reads."""

    def __init__(self, proc: subprocess.Popen[bytes], stderr: Path) -> None:
        self.proc, self._stderr = proc, stderr

    @property
    def stderr(self) -> str:
        return self._stderr.read_text(errors="replace")

    def wait(self, timeout: float = 30.0) -> int:
        wait_until(lambda: self.proc.poll() is not None, timeout, "the stand-in to exit", lambda: self.stderr)
        return self.proc.returncode

    def wait_for(self, text: str) -> None:
        wait_until(lambda: text in self.stderr or self.proc.poll() is not None, 30, repr(text), lambda: self.stderr)
        assert text in self.stderr, self.stderr

    def supervisor(self) -> int:
        """Host pid of the stand-in (PID 1 of its namespace)."""
        return int(wait_until(lambda: (children(self.proc.pid) or [0])[0], 30, "the supervisor pid"))

    def main(self) -> int:
        """Host pid of the main process."""
        return int(wait_until(lambda: (children(self.supervisor()) or [0])[0], 30, "the main process pid"))

    def signal(self, sig: int) -> None:
        os.kill(self.supervisor(), sig)


class Box:
    """A private copy of the sandbox rootfs and the launches made in it."""

    def __init__(self, root: Path, tmp: Path) -> None:
        self.root, self.tmp = root, tmp
        self.runs: list[subprocess.Popen[bytes]] = []

    def path(self, inside: str) -> Path:
        return self.root / inside.lstrip("/")

    def start(self, env: Env | None = None, args: tuple[str, ...] = ("--workdir", "/sandbox"), *,
              drop: tuple[str, ...] = (), groups: tuple[int, ...] | None = None,
              userspec: str | None = None) -> Run:
        merged = {**BASE_ENV, **(env or {})}
        assignments = [k.encode() + b"=" + (v if isinstance(v, bytes) else v.encode())
                       for k, v in merged.items() if v is not None]
        priv: list[str] = []
        if drop:
            priv.append("--bounding-set=" + ",".join("-" + cap for cap in drop))
        if groups is not None:
            priv.append("--groups=" + ",".join(map(str, groups)))
        chroot = ["/usr/sbin/chroot", *([f"--userspec={userspec}"] if userspec else []), str(self.root)]
        argv: list[str | bytes] = [
                "unshare", "--mount", "--pid", "--fork", "--kill-child", f"--mount-proc={self.root}/proc",
                "/bin/sh", "-c", 'mount --rbind /dev "$0/dev" && exec "$@"', str(self.root),
                *(["/usr/bin/setpriv", *priv] if priv else []),
                "/usr/bin/env", "-i", *assignments, *chroot, SUPERVISOR, *args]
        stderr = self.tmp / f"stderr.{len(self.runs)}"
        with open(stderr, "wb") as err:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                    env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        self.runs.append(proc)
        return Run(proc, stderr)

    def run(self, env: Env | None = None, args: tuple[str, ...] = ("--workdir", "/sandbox"), *,
            drop: tuple[str, ...] = (), groups: tuple[int, ...] | None = None, userspec: str | None = None) -> Run:
        launch = self.start(env, args, drop=drop, groups=groups, userspec=userspec)
        launch.wait()
        return launch

    def probe(self) -> Probe:
        status = dict(line.split(":", 1) for line in self.path("/tmp/probe.status").read_text().splitlines())
        environ = self.path("/tmp/probe.environ").read_bytes().split(b"\0")
        return Probe(
            uid=int(status["Uid"].split()[1]),
            gid=int(status["Gid"].split()[1]),
            groups={int(g) for g in status["Groups"].split()},
            cap_bnd=int(status["CapBnd"], 16),
            env=dict(e.decode().split("=", 1) for e in environ if e),
            cwd=self.path("/tmp/probe.cwd").read_text().strip(),
            stdin=self.path("/tmp/probe.stdin").read_text().strip(),
        )

    def owner(self, inside: str) -> tuple[int, int]:
        st = os.lstat(self.path(inside))
        return st.st_uid, st.st_gid

    def close(self) -> None:
        for proc in self.runs:
            if proc.poll() is None:
                proc.kill()     # --kill-child takes the namespace's PID 1, and so the namespace, along
                proc.wait()


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sandbox image's rootfs plus the stand-in, a token and TLS files, as a driver mounts them."""
    if os.geteuid() != 0:
        pytest.skip("the stand-in runs as PID 1 of a chroot in fresh namespaces: needs root")
    subprocess.run(["bash", str(ROOT / "tests/images/build.sh"), "cache"], check=True, capture_output=True)
    root = tmp_path_factory.mktemp("standin") / "rootfs"
    root.mkdir()
    subprocess.run(["tar", "-C", str(root), "-xf", str(CACHE / "sandbox.tar")], check=True)
    (root / "opt/openshell/bin").mkdir(parents=True)
    shutil.copy2(CACHE / "openshell-sandbox", root / SUPERVISOR.lstrip("/"))
    (root / "etc/openshell/auth").mkdir(parents=True)
    (root / TOKEN_FILE.lstrip("/")).write_text(TOKEN + "\n")
    os.chmod(root / TOKEN_FILE.lstrip("/"), 0o400)
    (root / TLS_DIR.lstrip("/")).mkdir(parents=True)
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (root / TLS_DIR.lstrip("/") / name).write_text("-----BEGIN PEM-----\n")
    keep = root / "sandbox/keep"
    keep.write_text("image content\n")
    os.chown(keep, 1000, 1000)
    return root


@pytest.fixture
def box(template: Path, tmp_path: Path) -> Iterator[Box]:
    root = tmp_path / "rootfs"
    subprocess.run(["cp", "-a", str(template), str(root)], check=True)
    sandbox = Box(root, tmp_path)
    yield sandbox
    sandbox.close()


# ------------------------------------------------------------------ helpers for setups

def append(inside: str, text: str) -> Setup:
    return lambda b: b.path(inside).write_text(b.path(inside).read_text() + text)


def replace(inside: str, old: str, new: str) -> Callable[[Box], None]:
    def edit(b: Box) -> None:
        content = b.path(inside).read_text()
        assert old in content
        b.path(inside).write_text(content.replace(old, new))
    return edit


def write(inside: str, data: str | bytes) -> Callable[[Box], None]:
    def put(b: Box) -> None:
        b.path(inside).parent.mkdir(parents=True, exist_ok=True)
        b.path(inside).write_bytes(data if isinstance(data, bytes) else data.encode())
    return put


def remove(inside: str) -> Callable[[Box], None]:
    def rm(b: Box) -> None:
        target = b.path(inside)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    return rm


def symlink(inside: str, to: str) -> Callable[[Box], None]:
    def link(b: Box) -> None:
        remove(inside)(b)
        b.path(inside).symlink_to(to)
    return link


def mkdir(inside: str) -> Callable[[Box], None]:
    def make(b: Box) -> None:
        remove(inside)(b)
        b.path(inside).mkdir()
    return make


def both(*steps: Setup) -> Callable[[Box], None]:
    def run(b: Box) -> None:
        for step in steps:
            step(b)
    return run


OP_LINE = "op:x:1500:0::/:/bin/sh\n"                                          # a user whose primary GID is 0
LONG_SOCKET = "/run/openshell/" + "s" * (108 - len("/run/openshell/"))      # 108 bytes: one too many


# ------------------------------------------------------------------ violations

def case(name: str, env: Env | None = None, message: str = "", *, code: int = 1,
         args: tuple[str, ...] = ("--workdir", "/sandbox"), setup: Setup | None = None,
         drop: tuple[str, ...] = (), userspec: str | None = None) -> object:
    return pytest.param(env or {}, args, setup, drop, userspec, code, message, id=name)


VIOLATIONS = [
    # argv and env-backed options: clap, exit 2 (contract 0, 2, 18)
    case("unknown-flag", None, "error: unexpected argument '--timeout' found", code=2,
         args=("--workdir", "/sandbox", "--timeout", "5")),
    case("unknown-short-flag", None, "error: unexpected argument '-i' found", code=2, args=("-i",)),
    case("workdir-without-value", None,
         "error: a value is required for '--workdir <WORKDIR>' but none was supplied", code=2, args=("--workdir",)),
    case("workdir-twice", None, "error: the argument '--workdir <WORKDIR>' cannot be used multiple times",
         code=2, args=("--workdir", "/sandbox", "--workdir=/tmp")),
    case("mode-unknown", None, "error: invalid value 'bogus' for '--mode <MODE>': unknown mode component "
         "'bogus' (expected 'network', 'process', or 'network-init')", code=2, args=("--mode", "bogus")),
    case("mode-combined", None, "--mode=network-init cannot be combined with other components",
         code=2, args=("--mode=network-init,process",)),
    case("mode-empty", None, "--mode must enable at least one of: network, process, network-init",
         code=2, args=("--mode", " , ")),
    case("flag-with-value", None, "error: unexpected value 'yes' for '--upstream-proxy-auth-allow-insecure' "
         "found; no more were expected", code=2, args=("--upstream-proxy-auth-allow-insecure=yes",)),
    case("proxy-uid-text", {"OPENSHELL_PROXY_UID": "abc"},
         "error: invalid value 'abc' for '--proxy-uid <PROXY_UID>': invalid digit found in string", code=2),
    case("proxy-gid-empty", {"OPENSHELL_PROXY_GID": ""},
         "error: invalid value '' for '--proxy-gid <PROXY_GID>': cannot parse integer from empty string", code=2),
    case("proxy-uid-negative", {"OPENSHELL_PROXY_UID": "-1"},
         "error: invalid value '-1' for '--proxy-uid <PROXY_UID>': -1 is not in 0..=4294967295", code=2),
    case("proxy-uid-huge", {"OPENSHELL_PROXY_UID": "99999999999999999999"},
         "'--proxy-uid <PROXY_UID>': number too large to fit in target type", code=2),
    case("env-not-utf8", {"OPENSHELL_SANDBOX_ID": b"sb-\xff"},
         "error: invalid UTF-8 was detected in one or more arguments", code=2),
    # the main-process spec, decoded before any gateway contact (contract 11)
    case("spec-empty", {"OPENSHELL_MAIN_PROCESS_SPEC": ""},
         "invalid OPENSHELL_MAIN_PROCESS_SPEC: EOF while parsing a value at line 1 column 0"),
    case("spec-not-json", {"OPENSHELL_MAIN_PROCESS_SPEC": "/bin/sh -c true"},
         "invalid OPENSHELL_MAIN_PROCESS_SPEC: expected value at line 1 column 1"),
    case("spec-missing-tty", {"OPENSHELL_MAIN_PROCESS_SPEC": '{"version":1,"command":["/bin/true"]}'},
         "invalid OPENSHELL_MAIN_PROCESS_SPEC: missing field `tty` at line 1 column 37"),
    case("spec-missing-version", {"OPENSHELL_MAIN_PROCESS_SPEC": '{"command":["/bin/true"],"tty":true}'},
         "invalid OPENSHELL_MAIN_PROCESS_SPEC: missing field `version`"),
    case("spec-version-string", {"OPENSHELL_MAIN_PROCESS_SPEC": '{"version":"1","command":["x"],"tty":true}'},
         'invalid OPENSHELL_MAIN_PROCESS_SPEC: invalid type: string "1", expected u32 at line 1 column 14'),
    case("spec-command-string", {"OPENSHELL_MAIN_PROCESS_SPEC": '{"version":1,"command":"/bin/sh","tty":true}'},
         'invalid OPENSHELL_MAIN_PROCESS_SPEC: invalid type: string "/bin/sh", expected a sequence'),
    case("spec-duplicate", {"OPENSHELL_MAIN_PROCESS_SPEC": '{"tty":true,"tty":false}'},
         "invalid OPENSHELL_MAIN_PROCESS_SPEC: duplicate field `tty`"),
    case("spec-trailing", {"OPENSHELL_MAIN_PROCESS_SPEC": spec(["/bin/true"]) + " x"},
         "invalid OPENSHELL_MAIN_PROCESS_SPEC: trailing characters"),
    case("spec-version-2", {"OPENSHELL_MAIN_PROCESS_SPEC": '{"version":2,"command":["/bin/true"],"tty":false}'},
         "unsupported OPENSHELL_MAIN_PROCESS_SPEC version 2"),
    case("spec-command-empty", {"OPENSHELL_MAIN_PROCESS_SPEC": spec([])},
         "OPENSHELL_MAIN_PROCESS_SPEC command must not be empty"),
    case("spec-argv0-empty", {"OPENSHELL_MAIN_PROCESS_SPEC": spec(["", "x"])},
         "OPENSHELL_MAIN_PROCESS_SPEC command must not be empty"),
    case("spec-base64-symbol", {"OPENSHELL_MAIN_PROCESS_SPEC": "base64url:!!"},
         "invalid OPENSHELL_MAIN_PROCESS_SPEC base64url: Invalid symbol 33, offset 0."),
    case("spec-base64-padded", {"OPENSHELL_MAIN_PROCESS_SPEC": b64(b'{"version":1}', pad=True)},
         "invalid OPENSHELL_MAIN_PROCESS_SPEC base64url: Invalid padding"),
    case("spec-base64-utf8", {"OPENSHELL_MAIN_PROCESS_SPEC": b64(b"\xff")},
         "invalid OPENSHELL_MAIN_PROCESS_SPEC UTF-8: invalid utf-8 sequence of 1 bytes from index 0"),
    case("spec-base64-version", {"OPENSHELL_MAIN_PROCESS_SPEC": b64(b'{"version":7,"command":["x"],"tty":false}')},
         "unsupported OPENSHELL_MAIN_PROCESS_SPEC version 7"),
    # the policy source (contract 4)
    case("no-sandbox-id", {"OPENSHELL_SANDBOX_ID": None}, POLICY_REQUIRED),
    case("no-endpoint", {"OPENSHELL_ENDPOINT": None}, POLICY_REQUIRED),
    case("policy-rules-alone", {"OPENSHELL_ENDPOINT": None, "OPENSHELL_POLICY_RULES": "/etc/rules.rego"},
         POLICY_REQUIRED),
    # the gateway connection, retried upstream (contract 0, 4, 6, 7)
    case("endpoint-empty", {"OPENSHELL_ENDPOINT": ""}, "Policy fetch failed after 5 attempts: invalid gRPC endpoint"),
    case("endpoint-space", {"OPENSHELL_ENDPOINT": "http://gw :8080"},
         "Policy fetch failed after 5 attempts: invalid gRPC endpoint"),
    case("endpoint-port", {"OPENSHELL_ENDPOINT": "http://gw:99999"},
         "Policy fetch failed after 5 attempts: invalid gRPC endpoint"),
    case("endpoint-no-scheme", {"OPENSHELL_ENDPOINT": "gw:8080"},
         "Policy fetch failed after 5 attempts: failed to connect to OpenShell server"),
    case("tls-ca-unset", {**HTTPS, "OPENSHELL_TLS_CA": None},
         "Policy fetch failed after 5 attempts: OPENSHELL_TLS_CA is required"),
    case("tls-cert-unset", {**HTTPS, "OPENSHELL_TLS_CERT": None},
         "Policy fetch failed after 5 attempts: OPENSHELL_TLS_CERT is required"),
    case("tls-key-unset", {**HTTPS, "OPENSHELL_TLS_KEY": None},
         "Policy fetch failed after 5 attempts: OPENSHELL_TLS_KEY is required"),
    case("tls-ca-missing", {**HTTPS, "OPENSHELL_TLS_CA": f"{TLS_DIR}/nope.crt"},
         f"Policy fetch failed after 5 attempts: failed to read CA cert from {TLS_DIR}/nope.crt"),
    case("tls-cert-missing", {**HTTPS, "OPENSHELL_TLS_CERT": f"{TLS_DIR}/nope.crt"},
         f"Policy fetch failed after 5 attempts: failed to read client cert from {TLS_DIR}/nope.crt"),
    case("tls-key-missing", {**HTTPS, "OPENSHELL_TLS_KEY": f"{TLS_DIR}/nope.key"},
         f"Policy fetch failed after 5 attempts: failed to read client key from {TLS_DIR}/nope.key"),
    case("no-token", {"OPENSHELL_SANDBOX_TOKEN_FILE": None}, f"Policy fetch failed after 5 attempts: {NO_TOKEN}"),
    case("empty-token-sources", {"OPENSHELL_SANDBOX_TOKEN": "", "OPENSHELL_SANDBOX_TOKEN_FILE": "",
                                 "OPENSHELL_K8S_SA_TOKEN_FILE": ""}, NO_TOKEN),
    case("token-file-missing", {"OPENSHELL_SANDBOX_TOKEN_FILE": "/etc/openshell/auth/nope.jwt"},
         "Policy fetch failed after 5 attempts: failed to read sandbox token from /etc/openshell/auth/nope.jwt"),
    case("token-file-not-utf8", None, f"failed to read sandbox token from {TOKEN_FILE}",
         setup=write(TOKEN_FILE, b"\xff\xfe")),
    case("token-file-directory", {"OPENSHELL_SANDBOX_TOKEN_FILE": "/etc/openshell/auth"},
         "failed to read sandbox token from /etc/openshell/auth"),
    case("token-control-char", None,
         "Policy fetch failed after 5 attempts: sandbox JWT contained characters not valid for a header value",
         setup=write(TOKEN_FILE, "head\x01er.payload\n")),
    case("token-env-non-ascii", {"OPENSHELL_SANDBOX_TOKEN": "t\u00f6ken"},
         "sandbox JWT contained characters not valid for a header value"),
    case("k8s-token-missing", {"OPENSHELL_SANDBOX_TOKEN_FILE": None, "OPENSHELL_K8S_SA_TOKEN_FILE": "/var/sa"},
         "Policy fetch failed after 5 attempts: failed to read K8s SA token from /var/sa"),
    # identity selection (contract 8)
    case("identity-conflict", {"OPENSHELL_SANDBOX_UID": "1000", "OPENSHELL_SANDBOX_GID": "1000"},
         "OPENSHELL_OCI_IMAGE_USER conflicts with non-empty OPENSHELL_SANDBOX_UID/OPENSHELL_SANDBOX_GID "
         "driver identity"),
    case("identity-conflict-uid-only", {"OPENSHELL_SANDBOX_UID": "1000"},
         "OPENSHELL_OCI_IMAGE_USER conflicts with non-empty"),
    case("uid-without-gid", {"OPENSHELL_OCI_IMAGE_USER": None, "OPENSHELL_SANDBOX_UID": "1000",
                             "OPENSHELL_SANDBOX_GID": None},
         "OPENSHELL_SANDBOX_UID and OPENSHELL_SANDBOX_GID must be supplied together"),
    case("gid-without-uid-empty-declaration", {"OPENSHELL_OCI_IMAGE_USER": "", "OPENSHELL_SANDBOX_GID": "1000"},
         "OPENSHELL_SANDBOX_UID and OPENSHELL_SANDBOX_GID must be supplied together"),
    case("resolved-uid-zero", {**RESOLVED, "OPENSHELL_SANDBOX_UID": "0"},
         "driver UID/GID must be numeric identities in range [1, 4294967294]"),
    case("resolved-uid-max", {**RESOLVED, "OPENSHELL_SANDBOX_UID": "4294967295"},
         "driver UID/GID must be numeric identities in range [1, 4294967294]"),
    case("resolved-gid-space", {**RESOLVED, "OPENSHELL_SANDBOX_GID": " 1600"},
         "driver UID/GID must be numeric identities in range [1, 4294967294]"),
    case("resolved-gid-name", {**RESOLVED, "OPENSHELL_SANDBOX_GID": "sandbox"},
         "driver UID/GID must be numeric identities in range [1, 4294967294]"),
    case("declaration-not-utf8", {"OPENSHELL_OCI_IMAGE_USER": b"\xff"}, "OPENSHELL_OCI_IMAGE_USER is not valid UTF-8"),
    # OCI USER resolution (contract 9)
    case("oci-user-empty", {"OPENSHELL_OCI_IMAGE_USER": ""}, "OCI USER is required because run_as_user is omitted"),
    case("oci-root", {"OPENSHELL_OCI_IMAGE_USER": "root"}, "OCI USER 'root' selects root"),
    case("oci-uid-0", {"OPENSHELL_OCI_IMAGE_USER": "0:1000"}, "OCI USER '0:1000' selects UID 0"),
    case("oci-name-unknown", {"OPENSHELL_OCI_IMAGE_USER": "ghost"},
         "OCI USER name 'ghost' was not found in /etc/passwd"),
    case("oci-group-empty", {"OPENSHELL_OCI_IMAGE_USER": "sandbox:"},
         "OCI USER 'sandbox:' has an empty group component"),
    case("oci-group-root", {"OPENSHELL_OCI_IMAGE_USER": "sandbox:root"}, "OCI USER 'sandbox:root' selects root group"),
    case("oci-gid-0", {"OPENSHELL_OCI_IMAGE_USER": "sandbox:0"}, "OCI USER 'sandbox:0' resolves to prohibited GID 0"),
    case("oci-group-unknown", {"OPENSHELL_OCI_IMAGE_USER": "sandbox:ghosts"},
         "OCI group 'ghosts' was not found in /etc/group"),
    case("oci-numeric-without-group", {"OPENSHELL_OCI_IMAGE_USER": "2345"},
         "OCI USER '2345' uses a numeric UID without an explicit group, but /etc/passwd has no matching primary GID"),
    case("oci-user-whitespace", {"OPENSHELL_OCI_IMAGE_USER": " sandbox"}, "OCI user component ' sandbox' is malformed"),
    case("oci-group-control", {"OPENSHELL_OCI_IMAGE_USER": "sandbox:a\tb"}, "OCI group component 'a\tb' is malformed"),
    case("oci-name-uid-0", {"OPENSHELL_OCI_IMAGE_USER": "toor"}, "OCI USER 'toor' resolves to prohibited UID 0",
         setup=append("/etc/passwd", "toor:x:0:1000::/root:/bin/sh\n")),
    case("oci-name-primary-gid-0", {"OPENSHELL_OCI_IMAGE_USER": "op"},
         "OCI USER 'op' resolves to prohibited primary GID 0", setup=append("/etc/passwd", OP_LINE)),
    case("oci-uid-primary-gid-0", {"OPENSHELL_OCI_IMAGE_USER": "1500"},
         "OCI USER '1500' resolves to prohibited primary GID 0", setup=append("/etc/passwd", OP_LINE)),
    case("passwd-symlink", None,
         "failed to open '/etc/passwd': Too many levels of symbolic links (os error 40)",
         setup=both(lambda b: b.path("/etc/passwd").rename(b.path("/etc/passwd.real")),
                    symlink("/etc/passwd", "passwd.real"))),
    case("passwd-missing", None, "failed to open '/etc/passwd': No such file or directory (os error 2)",
         setup=remove("/etc/passwd")),
    case("passwd-directory", None, "account path '/etc/passwd' is not a regular file", setup=mkdir("/etc/passwd")),
    case("passwd-too-big", None, "account file '/etc/passwd' exceeds 1048576 bytes",
         setup=append("/etc/passwd", ("#" * 1023 + "\n") * 1025)),
    case("passwd-not-utf8", None, "account file '/etc/passwd' is not valid UTF-8",
         setup=lambda b: b.path("/etc/passwd").write_bytes(b.path("/etc/passwd").read_bytes() + b"x:\xff\n")),
    case("passwd-ambiguous", None, "account identity is ambiguous in '/etc/passwd'",
         setup=append("/etc/passwd", "sandbox:x:1002:1002::/sandbox:/bin/sh\n")),
    case("passwd-six-fields", None, "matching /etc/passwd entry is malformed",
         setup=replace("/etc/passwd", "sandbox user:/sandbox:/bin/sh", "/sandbox:/bin/sh")),
    case("passwd-uid-malformed", None, "matching /etc/passwd UID is malformed",
         setup=replace("/etc/passwd", "sandbox:x:1000:", "sandbox:x:10OO:")),
    case("passwd-long-line", None, "account file '/etc/passwd' contains an oversized line",
         setup=append("/etc/passwd", "x" * 8193 + "\n")),
    case("passwd-long-field", None, "account file '/etc/passwd' contains an oversized field",
         setup=append("/etc/passwd", "long:x:7:7:" + "g" * 1025 + ":/:/bin/sh\n")),
    case("group-line-malformed", None, "group membership entry in '/etc/group' is malformed",
         setup=append("/etc/group", "broken:x:5\n")),
    case("group-member-of-root", None, "OCI user 'sandbox' is a member of prohibited GID 0",
         setup=replace("/etc/group", "root:x:0:", "root:x:0:sandbox")),
    case("group-file-ambiguous", {"OPENSHELL_OCI_IMAGE_USER": "sandbox:extra"},
         "account identity is ambiguous in '/etc/group'", setup=append("/etc/group", "extra:x:1003:\n")),
    # the completed identity, checked again: policy-supplied components (contract 9)
    case("policy-user-zero", {"STANDIN_POLICY_RUN_AS_USER": "0"}, "process user UID must be in range [1, 4294967294]"),
    case("policy-group-max", {"STANDIN_POLICY_RUN_AS_GROUP": "4294967295"},
         "process group GID must be in range [1, 4294967294]"),
    case("policy-user-unknown", {"STANDIN_POLICY_RUN_AS_USER": "ghost"},
         "unrecognized sandbox identity 'ghost'; expected 'sandbox' or a numeric UID in range [1, 4294967294]"),
    case("policy-group-unknown", {"STANDIN_POLICY_RUN_AS_GROUP": "ghosts"},
         "unrecognized sandbox group identity 'ghosts'; expected 'sandbox' or a numeric GID in range [1, 4294967294]"),
    case("none-mode-without-sandbox-user", NONE_MODE, "explicit process user 'sandbox' was not found in the image",
         setup=replace("/etc/passwd", "sandbox:x:1000:1000:sandbox user:/sandbox:/bin/sh\n", "")),
    case("none-mode-without-sandbox-group", NONE_MODE, "explicit process group 'sandbox' was not found in the image",
         setup=replace("/etc/group", "sandbox:x:1000:\n", "")),
    # workspace and account-file preparation (contract 10)
    case("oci-workspace-symlink", None, "workspace path component '/sandbox' is a symlink \u2014 refusing to "
         "follow it", setup=symlink("/sandbox", "tmp")),
    case("oci-workspace-file", None, "workspace path component '/sandbox' is not a directory",
         setup=both(remove("/sandbox"), write("/sandbox", "x"))),
    case("oci-without-workdir", None, "local container driver did not supply a workspace workdir", args=()),
    case("oci-image-workdir-missing", None, "image workspace validation failed: Error:   \u00d7 image workspace "
         "path component '/srv' does not exist", args=("--workdir", "/srv/app")),
    case("oci-image-workdir-not-writable", None, "image workspace validation failed: Error:   \u00d7 workspace "
         "path component '/usr' is not writable by the sandbox identity in the image", args=("--workdir", "/usr")),
    case("oci-image-workdir-proc", None, "image workspace validation failed: Error:   \u00d7 OCI WorkingDir "
         "'/proc/self' conflicts with OCI runtime mount '/proc'", args=("--workdir", "/proc/self")),
    case("oci-image-workdir-control-root", None, "image workspace validation failed: Error:   \u00d7 OCI "
         "WorkingDir '/etc' conflicts with OpenShell control path '/etc/openshell'", args=("--workdir", "/etc")),
    # a supervisor after 2f7fb65 (PR #2715): the workdir's structure at start, in every identity mode
    case("newer-workdir-system-root", {**NEWER, **RESOLVED}, "OCI WorkingDir '/usr/bin/app' conflicts with "
         "forbidden workspace root '/usr/bin'", args=("--workdir", "/usr/bin/app")),
    case("newer-workdir-dev", NEWER, "OCI WorkingDir '/dev' conflicts with forbidden workspace root '/dev'",
         args=("--workdir", "/dev")),
    case("newer-workdir-missing", {**NEWER, **NONE_MODE}, "image workspace path component '/srv' does not exist",
         args=("--workdir", "/srv/app")),
    case("newer-workdir-symlink", NEWER, "workspace path component '/srv' is a symlink \u2014 refusing to follow it",
         args=("--workdir", "/srv/app"), setup=symlink("/srv", "tmp")),
    case("newer-workdir-fallback", NEWER, "workspace path '/sandbox/' must be a normalized absolute non-fallback "
         "path", args=("--workdir", "/sandbox/")),
    case("resolved-sandbox-symlink", RESOLVED,
         "path '/sandbox' is a symlink \u2014 refusing to chown (potential privilege escalation)",
         setup=symlink("/sandbox", "tmp")),
    case("resolved-passwd-missing", RESOLVED, ENOENT, setup=remove("/etc/passwd")),
    # network namespace prerequisites (contract 20, 22)
    case("no-cap-net-admin", None, NETNS + "/sbin/ip netns add failed", drop=("net_admin",)),
    case("no-cap-sys-admin", None, NETNS + "/sbin/ip netns add failed", drop=("sys_admin",)),
    case("no-ip-helper", None, NETNS + "trusted ip helper not found; checked /usr/sbin/ip, /sbin/ip, /usr/bin/ip, "
         "/bin/ip", setup=remove("/sbin/ip")),
    case("no-nsenter-helper", None, NETNS + "trusted nsenter helper not found; checked /usr/bin/nsenter, "
         "/bin/nsenter, /usr/sbin/nsenter, /sbin/nsenter", setup=remove("/usr/bin/nsenter")),
    case("not-root", {"OPENSHELL_SANDBOX_TOKEN_FILE": None, "OPENSHELL_SANDBOX_TOKEN": TOKEN},
         NETNS + "/sbin/ip netns add failed: the supervisor must run as root (euid 0)", userspec="1000:1000"),
    # TCP policies need the runtime capability (contract 13)
    case("tcp-without-capability", {"STANDIN_POLICY_TCP": "1", "OPENSHELL_NETWORK_RUNTIME_CAPABILITIES": None}, NO_TCP),
    case("tcp-other-capability", {"STANDIN_POLICY_TCP": "1", "OPENSHELL_NETWORK_RUNTIME_CAPABILITIES": "dns,tcp"},
         NO_TCP),
    case("tcp-process-only", {"STANDIN_POLICY_TCP": "1"},
         "policy DNS and transparent TCP require a workload network namespace",
         args=("--mode", "process", "--workdir", "/sandbox")),
    # sidecar hazards that must not reach the supervisor (contract 18)
    case("sidecar-nftables", {"OPENSHELL_NETWORK_ENFORCEMENT_MODE": "sidecar-nftables"},
         "OPENSHELL_SIDECAR_CONTROL_SOCKET is required for sidecar topology"),
    case("sidecar-nftables-process-only", {"OPENSHELL_NETWORK_ENFORCEMENT_MODE": "sidecar-nftables"},
         "OPENSHELL_SIDECAR_CONTROL_SOCKET is required for process-only sidecar topology",
         args=("--mode=process", "--workdir", "/sandbox")),
    case("sidecar-nftables-tcp", {"OPENSHELL_NETWORK_ENFORCEMENT_MODE": "sidecar-nftables", "STANDIN_POLICY_TCP": "1"},
         "policy DNS and transparent TCP are not yet supported by the sidecar topology"),
    case("spiffe-socket", {"OPENSHELL_PROVIDER_SPIFFE_WORKLOAD_API_SOCKET": "/spiffe/agent.sock"},
         "Failed to prepare supervisor identity isolation: supervisor identity mount namespace was not prepared "
         "before startup hardening"),
    # runtime PID limit (contract 23)
    case("pid-limit-unavailable", {"OPENSHELL_REQUIRE_RUNTIME_PID_LIMIT": ""},
         "runtime cgroup pids.max is unavailable (No such file or directory (os error 2))" + PIDS),
    case("pid-limit-unlimited", {"OPENSHELL_REQUIRE_RUNTIME_PID_LIMIT": "1"},
         "runtime cgroup pids.max is unlimited" + PIDS, setup=write("/sys/fs/cgroup/pids.max", "max\n")),
    case("pid-limit-garbage", {"OPENSHELL_REQUIRE_RUNTIME_PID_LIMIT": "1"},
         'runtime cgroup pids.max is unavailable (invalid pids.max value "lots": invalid digit found in string)',
         setup=write("/sys/fs/cgroup/pids.max", "lots\n")),
    # the privilege drop fails inside pre_exec: only EINVAL reaches the supervisor (contract 0, 10, 20)
    case("no-cap-setuid", None, EINVAL, drop=("setuid",)),
    case("no-cap-setgid", None, EINVAL, drop=("setgid",)),
    case("no-cap-setpcap", None, EINVAL, drop=("setpcap",)),
    case("resolved-no-cap-setuid", RESOLVED, EINVAL, drop=("setuid",)),
    case("oci-no-cap-chown", None, "Error:   \u00d7 EPERM: Operation not permitted", drop=("chown",),
         setup=lambda b: os.chown(b.path("/sandbox"), 0, 0)),
    # the main process is spawned without a shell (contract 11)
    case("exec-missing", {"OPENSHELL_MAIN_PROCESS_SPEC": spec(["/nonexistent"])}, ENOENT),
    case("exec-not-executable", {"OPENSHELL_MAIN_PROCESS_SPEC": spec(["/etc/passwd"])},
         "Error:   \u00d7 Permission denied (os error 13)"),
    case("scratch-needs-bash", {"OPENSHELL_MAIN_PROCESS_SPEC": None}, ENOENT),
    case("workdir-missing", RESOLVED, ENOENT, args=("--workdir", "/nope")),
    # the SSH socket (contract 12)
    case("ssh-path-too-long", {"OPENSHELL_SSH_SOCKET_PATH": LONG_SOCKET},
         "Error:   \u00d7 SSH server failed during startup\n  \u2570\u2500\u25b6 path must be shorter than SUN_LEN"),
    case("ssh-path-directory", {"OPENSHELL_SSH_SOCKET_PATH": "/run/openshell/sock"},
         "SSH server failed during startup\n  \u2570\u2500\u25b6 Is a directory (os error 21)",
         setup=write("/run/openshell/sock/.keep", "")),
    case("ssh-path-empty", {"OPENSHELL_SSH_SOCKET_PATH": ""},
         "SSH server failed during startup\n  \u2570\u2500\u25b6 No such file or directory (os error 2)"),
    # the operator's corporate proxy, argv only, fail-closed (contract 2)
    case("proxy-blank", None, PROXY_INVALID + "--upstream-proxy must not be empty when set",
         args=("--workdir", "/sandbox", "--upstream-proxy", " ")),
    case("proxy-socks", None, PROXY_INVALID + "--upstream-proxy is invalid: unsupported proxy scheme 'socks5': "
         "only http:// forward proxies are supported by the sandbox supervisor",
         args=("--workdir", "/sandbox", "--upstream-proxy=socks5://proxy.corp:1080")),
    case("proxy-no-port", None, "--upstream-proxy is invalid: proxy URL must include an explicit proxy port",
         args=("--workdir", "/sandbox", "--upstream-proxy=http://proxy.corp")),
    case("proxy-inline-credentials", None,
         "--upstream-proxy is invalid: proxy URL must not embed credentials; supply them via the proxy auth file",
         args=("--workdir", "/sandbox", "--upstream-proxy=http://u:p@proxy.corp:3128")),
    case("proxy-path", None, "--upstream-proxy is invalid: proxy URL must not contain a path",
         args=("--workdir", "/sandbox", "--upstream-proxy=http://proxy.corp:3128/x")),
    case("no-proxy-blank", None, PROXY_INVALID + "--upstream-no-proxy must not be empty when set",
         args=(*PROXY_ARGS, "--upstream-no-proxy=")),
    case("no-proxy-without-proxy", None,
         PROXY_INVALID + "--upstream-no-proxy is set but no upstream proxy is configured",
         args=("--workdir", "/sandbox", "--upstream-no-proxy=internal.corp")),
    case("ca-bundle-flag-knob-not-1", {"STANDIN_SUPERVISOR_NEWER": "0"},
         "error: unexpected argument '--upstream-proxy-ca-bundle' found", code=2,
         args=(*PROXY_ARGS, PROXY_CA_ARG), setup=write(PROXY_CA, PEM)),
    case("ca-without-proxy", NEWER,
         PROXY_INVALID + "--upstream-proxy-ca-bundle is set but no upstream proxy is configured",
         args=("--workdir", "/sandbox", PROXY_CA_ARG)),
    case("auth-without-acknowledgement", None, PROXY_INVALID + CLEARTEXT,
         args=(*PROXY_ARGS, f"--upstream-proxy-auth-file={PROXY_AUTH}")),
    case("acknowledgement-without-auth", None, PROXY_INVALID + "--upstream-proxy-auth-allow-insecure is set but "
         "no --upstream-proxy-auth-file is configured", args=(*PROXY_ARGS, "--upstream-proxy-auth-allow-insecure")),
    case("auth-file-missing", None, PROXY_INVALID + "failed to open proxy auth file '/etc/openshell/auth/nope': "
         "No such file or directory (os error 2)", args=(*PROXY_ARGS, "--upstream-proxy-auth-allow-insecure",
                                                         "--upstream-proxy-auth-file=/etc/openshell/auth/nope")),
    case("auth-file-directory", None, "proxy auth file '/etc/openshell/auth' is not a regular file",
         args=(*PROXY_ARGS, "--upstream-proxy-auth-allow-insecure", "--upstream-proxy-auth-file=/etc/openshell/auth")),
    case("auth-file-too-big", None, f"proxy auth file '{PROXY_AUTH}' exceeds the 4096-byte limit",
         args=(*PROXY_ARGS, "--upstream-proxy-auth-allow-insecure", f"--upstream-proxy-auth-file={PROXY_AUTH}"),
         setup=write(PROXY_AUTH, "u:" + "p" * 4095)),
    case("auth-credential-malformed", None, PROXY_INVALID + f"invalid credential in upstream proxy auth file "
         f"'{PROXY_AUTH}': credential must use the user:pass form (missing ':')",
         args=(*PROXY_ARGS, "--upstream-proxy-auth-allow-insecure", f"--upstream-proxy-auth-file={PROXY_AUTH}"),
         setup=write(PROXY_AUTH, "proxyuser\n")),
    case("auth-credential-control", None, "credential contains control characters",
         args=(*PROXY_ARGS, "--upstream-proxy-auth-allow-insecure", f"--upstream-proxy-auth-file={PROXY_AUTH}"),
         setup=write(PROXY_AUTH, "proxy\ruser:x\n")),
    case("ca-bundle-missing", NEWER, f"--upstream-proxy-ca-bundle '{PROXY_CA}' could not be read: No such file",
         args=(*PROXY_ARGS, PROXY_CA_ARG)),
    case("ca-bundle-not-pem", NEWER, f"--upstream-proxy-ca-bundle '{PROXY_CA}' contains no PEM certificate blocks",
         args=(*PROXY_ARGS, PROXY_CA_ARG), setup=write(PROXY_CA, "hello\n")),
    # upstream's order: the first failing stage wins
    case("order-clap-before-spec", {"OPENSHELL_MAIN_PROCESS_SPEC": "", "OPENSHELL_PROXY_UID": "x"},
         "error: invalid value 'x'", code=2),
    case("order-spec-before-policy", {"OPENSHELL_MAIN_PROCESS_SPEC": "", "OPENSHELL_SANDBOX_ID": None},
         "invalid OPENSHELL_MAIN_PROCESS_SPEC"),
    case("order-policy-before-identity", {"OPENSHELL_SANDBOX_ID": None, "OPENSHELL_SANDBOX_UID": "1"},
         "Sandbox policy required"),
    case("order-tls-before-token", {**HTTPS, "OPENSHELL_TLS_CA": None, "OPENSHELL_SANDBOX_TOKEN_FILE": None},
         "OPENSHELL_TLS_CA is required"),
    case("order-token-before-identity", {"OPENSHELL_SANDBOX_TOKEN_FILE": None, "OPENSHELL_SANDBOX_UID": "1"},
         NO_TOKEN),
    case("order-identity-before-netns", {"OPENSHELL_SANDBOX_UID": "1"}, "conflicts with non-empty",
         drop=("net_admin",)),
    case("order-netns-before-tcp", {"STANDIN_POLICY_TCP": "1", "OPENSHELL_NETWORK_RUNTIME_CAPABILITIES": None},
         NETNS, drop=("net_admin",)),
    case("order-tcp-before-pid-limit", {"STANDIN_POLICY_TCP": "1", "OPENSHELL_NETWORK_RUNTIME_CAPABILITIES": None,
                                        "OPENSHELL_REQUIRE_RUNTIME_PID_LIMIT": ""}, NO_TCP),
    case("order-pid-limit-before-exec", {"OPENSHELL_REQUIRE_RUNTIME_PID_LIMIT": "",
                                         "OPENSHELL_MAIN_PROCESS_SPEC": spec(["/nonexistent"])}, "pids.max"),
    case("order-exec-before-ssh", {"OPENSHELL_MAIN_PROCESS_SPEC": spec(["/nonexistent"]),
                                   "OPENSHELL_SSH_SOCKET_PATH": LONG_SOCKET}, ENOENT),
]


@pytest.mark.parametrize(("env", "args", "setup", "drop", "userspec", "code", "message"), VIOLATIONS)
def test_violation(box: Box, env: Env, args: tuple[str, ...], setup: Setup | None,
                   drop: tuple[str, ...], userspec: str | None, code: int, message: str) -> None:
    """Each contract violation ends the run with upstream's exit code and message."""
    if setup:
        setup(box)
    run = box.run(env, args, drop=drop, userspec=userspec)
    assert run.proc.returncode == code, run.stderr
    assert message in run.stderr
    lines = run.stderr.splitlines()
    assert sum(line.startswith("Error:   \u00d7 ") for line in lines) == (code == 1)   # miette's report, once
    assert sum(line.startswith("error: ") for line in lines) == (code == 2)            # or clap's
    assert "openshell-sandbox: ready" not in run.stderr
    assert TOKEN not in run.stderr


# ------------------------------------------------------------------ a correct launch

def test_upstream_shaped_launch(box: Box) -> None:
    """Podman V1's shape (OCI USER sandbox): the main process runs as the image's user with its
    /etc/group memberships, no capabilities, in /sandbox, and the SSH socket is private."""
    run = box.run()
    assert run.proc.returncode == 0, run.stderr
    assert f"openshell-sandbox: token source file {TOKEN_FILE}" in run.stderr
    assert "openshell-sandbox: identity mode=oci uid=1000 gid=1000 groups=1000,1001" in run.stderr
    assert "openshell-sandbox: ready" in run.stderr
    assert TOKEN not in run.stderr
    probe = box.probe()
    assert (probe.uid, probe.gid, probe.groups, probe.cap_bnd) == (1000, 1000, {1000, 1001}, 0)
    assert (probe.cwd, probe.env["HOME"], probe.env["USER"]) == ("/sandbox", "/sandbox", "sandbox")
    sock = os.lstat(box.path("/run/openshell/ssh.sock"))
    assert oct(sock.st_mode & 0o7777) == "0o600" and (sock.st_uid, sock.st_gid) == (0, 0)
    assert oct(os.lstat(box.path("/run/openshell")).st_mode & 0o7777) == "0o700"
    assert box.path("/etc/passwd").read_text().count("sandbox:x:1000:1000:") == 1


@dataclass
class Identity:
    uid: int
    gid: int
    groups: set[int]
    user: str
    home: str
    mode: str


IDENTITIES = [
    pytest.param({}, Identity(1000, 1000, {1000, 1001}, "sandbox", "/sandbox", "oci"), id="oci-named"),
    pytest.param({"OPENSHELL_OCI_IMAGE_USER": "2345:2346"}, Identity(2345, 2346, set(), "2345", "/sandbox", "oci"),
                 id="oci-numeric"),
    pytest.param({"OPENSHELL_OCI_IMAGE_USER": "1000"}, Identity(1000, 1000, set(), "1000", "/sandbox", "oci"),
                 id="oci-numeric-passwd-primary"),
    pytest.param({"OPENSHELL_OCI_IMAGE_USER": "sandbox:extra"}, Identity(1000, 1001, {1001}, "sandbox", "/sandbox",
                                                                         "oci"), id="oci-named-group"),
    pytest.param({"OPENSHELL_OCI_IMAGE_USER": "root", "STANDIN_POLICY_RUN_AS_USER": "sandbox",
                  "STANDIN_POLICY_RUN_AS_GROUP": "sandbox"},
                 Identity(1000, 1000, {1000, 1001}, "sandbox", "/sandbox", "oci"), id="oci-root-policy-wins"),
    pytest.param({"OPENSHELL_OCI_IMAGE_USER": "", "STANDIN_POLICY_RUN_AS_USER": "4242",
                  "STANDIN_POLICY_RUN_AS_GROUP": "4343"},
                 Identity(4242, 4343, {5, 6}, "4242", "/sandbox", "oci"), id="oci-empty-policy-numeric"),
    pytest.param({"OPENSHELL_OCI_IMAGE_USER": "2345:2346", "STANDIN_POLICY_RUN_AS_USER": "sandbox"},
                 Identity(1000, 2346, {1001, 2346}, "sandbox", "/sandbox", "oci"), id="oci-policy-user-oci-group"),
    pytest.param({**RESOLVED, "STANDIN_POLICY_RUN_AS_USER": "7"},
                 Identity(1500, 1600, {5, 6}, "1500", "/sandbox", "resolved"), id="resolved-overrides-policy"),
    pytest.param({**RESOLVED, "OPENSHELL_OCI_IMAGE_USER": ""},
                 Identity(1500, 1600, {5, 6}, "1500", "/sandbox", "resolved"), id="resolved-clearing-rule"),
    pytest.param({**RESOLVED, "OPENSHELL_SANDBOX_UID": "+0100", "OPENSHELL_SANDBOX_GID": "0200"},
                 Identity(100, 200, {5, 6}, "100", "/sandbox", "resolved"), id="resolved-rust-u32"),
    pytest.param(NONE_MODE, Identity(1000, 1000, {1000, 1001}, "sandbox", "/sandbox", "none"), id="none"),
    pytest.param({**NONE_MODE, "STANDIN_POLICY_RUN_AS_USER": "4242"},
                 Identity(4242, 1000, {5, 6}, "4242", "/sandbox", "none"), id="none-policy-numeric-user"),
]


@pytest.mark.parametrize(("env", "want"), IDENTITIES)
def test_identity(box: Box, env: Env, want: Identity) -> None:
    """OCI, Resolved and None modes give upstream's uid, gid, supplementary groups, USER and HOME;
    groups are only replaced where upstream replaces them (supervisor's here: 5,6)."""
    run = box.run(env, groups=(5, 6))
    assert run.proc.returncode == 0, run.stderr
    probe = box.probe()
    assert (probe.uid, probe.gid, probe.groups) == (want.uid, want.gid, want.groups)
    assert (probe.env["USER"], probe.env["HOME"], probe.cwd, probe.cap_bnd) == (want.user, want.home, "/sandbox", 0)
    groups = ",".join(map(str, sorted(want.groups)))
    assert f"identity mode={want.mode} uid={want.uid} gid={want.gid} groups={groups}" in run.stderr


def test_oci_workspace_prepared_not_recursed(box: Box) -> None:
    """OCI mode prepares only /sandbox itself: chowned to the identity, owner wx added; contents keep theirs."""
    os.chmod(box.path("/sandbox"), 0o455)
    assert box.run({"OPENSHELL_OCI_IMAGE_USER": "2345:2346"}).proc.returncode == 0
    assert box.owner("/sandbox") == (2345, 2346)
    assert oct(os.lstat(box.path("/sandbox")).st_mode & 0o777) == "0o755"
    assert box.owner("/sandbox/keep") == (1000, 1000)
    assert "sandbox:x:1000:1000:" in box.path("/etc/passwd").read_text()


def test_oci_workspace_created(box: Box) -> None:
    remove("/sandbox")(box)
    assert box.run().proc.returncode == 0
    st = os.lstat(box.path("/sandbox"))
    assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o777)) == (1000, 1000, "0o755")


def test_resolved_rewrites_accounts_and_chowns(box: Box) -> None:
    """Resolved mode rewrites the image's sandbox entries and chowns /sandbox recursively, skipping symlinks."""
    box.path("/sandbox/sub").mkdir()
    box.path("/sandbox/sub/file").write_text("x")
    box.path("/sandbox/link").symlink_to("/etc/hostname-target")
    box.path("/etc/hostname-target").write_text("x")
    run = box.run(RESOLVED)
    assert run.proc.returncode == 0, run.stderr
    assert "sandbox:x:1500:1600:sandbox user:/sandbox:/bin/sh\n" in box.path("/etc/passwd").read_text()
    assert "sandbox:x:1600:\n" in box.path("/etc/group").read_text()
    for path in ("/sandbox", "/sandbox/keep", "/sandbox/sub", "/sandbox/sub/file"):
        assert box.owner(path) == (1500, 1600), path
    assert box.owner("/sandbox/link") == (0, 0)
    assert box.owner("/etc/hostname-target") == (0, 0)


def test_resolved_appends_missing_entries(box: Box) -> None:
    replace("/etc/passwd", "sandbox:x:1000:1000:sandbox user:/sandbox:/bin/sh\n", "")(box)
    replace("/etc/group", "sandbox:x:1000:\n", "")(box)
    assert box.run({**RESOLVED, "OPENSHELL_SANDBOX_UID": "+0100"}).proc.returncode == 0
    assert box.path("/etc/passwd").read_text().endswith("sandbox:x:+0100:1600::/sandbox:/bin/sh\n")
    assert box.path("/etc/group").read_text().endswith("sandbox:x:1600:\n")


def test_sidecar_topology_skips_privilege_drop(box: Box) -> None:
    """OPENSHELL_SUPERVISOR_TOPOLOGY=sidecar means network-only enforcement: the main process stays root."""
    run = box.run({"OPENSHELL_SUPERVISOR_TOPOLOGY": "sidecar"})
    assert run.proc.returncode == 0, run.stderr
    assert "no privilege drop" in run.stderr
    assert box.probe().uid == 0
    assert oct(os.lstat(box.path("/run/openshell")).st_mode & 0o777) != "0o700"


def test_image_workdir_validated_as_identity(box: Box) -> None:
    """An OCI workdir other than /sandbox is used only if the identity can already write it."""
    box.path("/srv/app").mkdir(parents=True)
    os.chown(box.path("/srv/app"), 1000, 1000)
    run = box.run(args=("--workdir", "/srv/app"))
    assert run.proc.returncode == 0, run.stderr
    assert (box.probe().cwd, box.probe().env["HOME"]) == ("/srv/app", "/srv/app")
    assert box.owner("/sandbox") == (1000, 1000)


def test_newer_image_workdir_not_checked_as_identity(box: Box) -> None:
    """A supervisor after 2f7fb65 leaves who may write an image workdir to the image: one the
    identity cannot write is the cwd and HOME all the same, its ownership untouched."""
    box.path("/srv/app").mkdir(parents=True)
    run = box.run(NEWER, args=("--workdir", "/srv/app"))
    assert run.proc.returncode == 0, run.stderr
    assert (box.probe().cwd, box.probe().env["HOME"]) == ("/srv/app", "/srv/app")
    assert box.owner("/srv/app") == (0, 0)


# ------------------------------------------------------------------ the environment

def test_child_environment(box: Box) -> None:
    """The main process gets the container environment minus supervisor-only variables, plus
    OPENSHELL_SANDBOX=1 and the HOME/USER/SHELL/TERM defaults; user-environment values do not reach it."""
    extra: Env = {key: f"/secret/{key}" for key in SUPERVISOR_ONLY if key not in BASE_ENV}
    extra.pop("OPENSHELL_PROVIDER_SPIFFE_WORKLOAD_API_SOCKET")   # would stop the launch (see spiffe-socket)
    env: Env = {**extra, "FOO": "bar", "STANDIN_POLICY_TCP": "1",
                "OPENSHELL_USER_ENVIRONMENT": json.dumps({"FOO": "from-json", "ACC_VAR": "x"})}
    run = box.run(env)
    assert run.proc.returncode == 0, run.stderr
    got = box.probe().env
    assert not set(SUPERVISOR_ONLY) & set(got)
    expected = {k: v for k, v in {**BASE_ENV, **env}.items() if k not in SUPERVISOR_ONLY and v is not None}
    expected.update(OPENSHELL_SANDBOX="1", HOME="/sandbox", USER="sandbox", SHELL="/bin/bash", TERM="dumb")
    assert got == expected


@pytest.mark.parametrize(("user_env", "want"), [
    pytest.param(json.dumps({"HOME": "/x", "TERM": "vt100", "SHELL": "/bin/zsh"}),
                 {"HOME": "/root", "USER": "sandbox"}, id="named-keys-not-set"),
    pytest.param("{not json", {"HOME": "/sandbox", "USER": "sandbox", "SHELL": "/bin/bash", "TERM": "dumb"},
                 id="invalid-json-ignored"),
    pytest.param(json.dumps({"HOME": 1}), {"HOME": "/sandbox", "USER": "sandbox", "SHELL": "/bin/bash", "TERM": "dumb"},
                 id="non-string-value-ignored"),
])
def test_user_environment_suppresses_defaults(box: Box, user_env: str, want: dict[str, str]) -> None:
    """OPENSHELL_USER_ENVIRONMENT only stops the defaults for the keys it names; the container's own
    value (HOME=/root) is then what the main process sees, and a key the container lacks stays unset."""
    run = box.run({"OPENSHELL_USER_ENVIRONMENT": user_env})
    assert run.proc.returncode == 0, run.stderr
    got = box.probe().env
    assert {k: got[k] for k in ("HOME", "USER", "SHELL", "TERM") if k in got} == want


def test_tty_main_process(box: Box) -> None:
    """tty: true gives the main process a pseudo-terminal and TERM=xterm-256color."""
    run = box.run({"OPENSHELL_MAIN_PROCESS_SPEC": spec(["/bin/sh", "-c", PROBE], tty=True)})
    assert run.proc.returncode == 0, run.stderr
    probe = box.probe()
    assert probe.env["TERM"] == "xterm-256color"
    assert probe.stdin.startswith("/dev/pts/")


def test_stdin_is_held_open(box: Box) -> None:
    """Without a tty the main process reads a pipe the supervisor never closes: `cat` keeps running."""
    run = box.start({"OPENSHELL_MAIN_PROCESS_SPEC": spec(["/bin/cat"])})
    run.wait_for("openshell-sandbox: ready")
    main = run.main()
    assert state(main) in ("S", "R")
    run.signal(signal.SIGTERM)
    assert run.wait() == 143


# ------------------------------------------------------------------ accepted inputs

@pytest.mark.parametrize(("env", "args", "log"), [
    pytest.param({}, ("--workdir=/sandbox", "--upstream-proxy", "http://proxy:3128", "--upstream-no-proxy=.corp",
                      "--upstream-proxy-connect-by-hostname"),
                 "upstream proxy proxy:3128 no_proxy=.corp auth_file=- allow_insecure=false connect_target=hostname",
                 id="proxy-flags"),
    pytest.param({"OPENSHELL_PROXY_UID": "+1337", "OPENSHELL_PROXY_GID": "0"}, ("--workdir", "/sandbox"), "ready",
                 id="proxy-ids"),
    pytest.param({"OPENSHELL_MAIN_PROCESS_SPEC": b64(spec(["/bin/sh", "-c", PROBE]).encode())},
                 ("--workdir", "/sandbox"), "ready", id="spec-base64url"),
    pytest.param({"OPENSHELL_MAIN_PROCESS_SPEC": json.dumps({"tty": False, "extra": [1, {"a": None}], "version": 1,
                                                             "command": ["/bin/sh", "-c", PROBE],
                                                             "await_main_process_attachment": True}, indent=2)},
                 ("--workdir", "/sandbox"), "ready", id="spec-unknown-fields"),
    pytest.param({"OPENSHELL_MAIN_PROCESS_SPEC": "not json"}, ("--workdir", "/sandbox", "--", "/bin/sh", "-c", PROBE),
                 "ready", id="positional-command-wins"),
    pytest.param({"OPENSHELL_MAIN_PROCESS_SPEC": b"\xff"}, ("--workdir", "/sandbox", "/bin/sh", "-c", PROBE),
                 "ready", id="positional-command"),
    pytest.param({**HTTPS}, ("--workdir", "/sandbox"), f"token source file {TOKEN_FILE}", id="https-tls-files"),
    pytest.param({"OPENSHELL_SANDBOX_TOKEN": TOKEN}, ("--workdir", "/sandbox"), "token source env", id="token-env"),
    pytest.param({"OPENSHELL_SANDBOX_TOKEN_FILE": None, "OPENSHELL_K8S_SA_TOKEN_FILE": TOKEN_FILE},
                 ("--workdir", "/sandbox"), f"token source k8s-sa {TOKEN_FILE}", id="token-k8s-sa"),
    pytest.param({"OPENSHELL_SANDBOX_TOKEN": b"\xff"}, ("--workdir", "/sandbox"), f"token source file {TOKEN_FILE}",
                 id="token-not-utf8-skipped"),
    pytest.param({"OPENSHELL_SANDBOX_ID": None, "OPENSHELL_POLICY_RULES": "/etc/passwd",
                  "OPENSHELL_POLICY_DATA": "/etc/group", "OPENSHELL_SANDBOX_TOKEN_FILE": None},
                 ("--workdir", "/sandbox"), "policy source local files", id="local-policy-files"),
    pytest.param({"STANDIN_POLICY_TCP": "1",
                  "OPENSHELL_NETWORK_RUNTIME_CAPABILITIES": " x , policy-dns-transparent-tcp "},
                 ("--workdir", "/sandbox"), "ready", id="tcp-with-capability"),
    pytest.param({}, ("--mode", "process", "--workdir", "/sandbox"), "ready", id="process-only-mode"),
    pytest.param({"OPENSHELL_SSH_SOCKET_PATH": None}, ("--workdir", "/sandbox"),
                 "OPENSHELL_SSH_SOCKET_PATH is not set: no SSH server", id="no-ssh-socket"),
    pytest.param({}, ("--workdir", "/sandbox"), "WARN runtime cgroup pids.max is unavailable", id="pid-limit-warning"),
])
def test_accepted(box: Box, env: Env, args: tuple[str, ...], log: str) -> None:
    """Inputs upstream accepts start the main process (it exits 0) and log what was used."""
    run = box.run(env, args)
    assert run.proc.returncode == 0, run.stderr
    assert log in run.stderr
    assert box.path("/tmp/probe.status").exists()
    assert TOKEN not in run.stderr


def test_corporate_proxy_flags_accepted_and_logged(box: Box) -> None:
    """Every proxy flag a driver passes is checked and logged (never the credential); the
    sandbox's own HTTPS_PROXY and NO_PROXY change nothing the supervisor uses."""
    write(PROXY_AUTH, f"  {PROXY_SECRET}\n")(box)
    write(PROXY_CA, PEM)(box)
    run = box.run({**NEWER, "HTTPS_PROXY": "http://evil:1", "NO_PROXY": "*"},
                  (*PROXY_ARGS, "--upstream-no-proxy=-x.corp,10.0.0.0/8", f"--upstream-proxy-auth-file={PROXY_AUTH}",
                   "--upstream-proxy-auth-allow-insecure", "--upstream-proxy-connect-by-hostname", PROXY_CA_ARG))
    assert run.proc.returncode == 0, run.stderr
    assert (f"upstream proxy proxy.corp:3128 no_proxy=-x.corp,10.0.0.0/8 auth_file={PROXY_AUTH} "
            f"allow_insecure=true connect_target=hostname ca_bundle={PROXY_CA}") in run.stderr
    assert PROXY_SECRET not in run.stderr and "evil" not in run.stderr


def test_ca_bundle_flag_needs_a_supervisor_newer_than_2f7fb65(box: Box) -> None:
    """2f7fb65 has no --upstream-proxy-ca-bundle: clap refuses it exactly as any other unknown
    flag (exit 2, before the bundle is even read, nothing started); with the knob the stand-in
    plays a newer supervisor and the same launch checks the bundle and runs."""
    write(PROXY_CA, PEM)(box)
    old = box.run(args=(*PROXY_ARGS, PROXY_CA_ARG))
    assert old.proc.returncode == 2, old.stderr
    assert old.stderr.startswith("error: unexpected argument '--upstream-proxy-ca-bundle' found\n")
    unknown = box.run(args=(*PROXY_ARGS, "--upstream-proxy-bogus=x"))
    assert unknown.proc.returncode == 2
    assert old.stderr == unknown.stderr.replace("--upstream-proxy-bogus", "--upstream-proxy-ca-bundle")
    assert not box.path("/tmp/probe.status").exists()
    new = box.run(NEWER, (*PROXY_ARGS, PROXY_CA_ARG))
    assert new.proc.returncode == 0, new.stderr
    assert f"ca_bundle={PROXY_CA}" in new.stderr and box.path("/tmp/probe.status").exists()


def test_https_proxy_needs_a_supervisor_newer_than_2f7fb65(box: Box) -> None:
    """2f7fb65 refuses an https:// proxy; a newer one (upstream PR #2512) dials it over TLS and
    takes an auth file without --upstream-proxy-auth-allow-insecure (the credential is inside TLS)."""
    write(PROXY_AUTH, f"{PROXY_SECRET}\n")(box)
    https = ("--workdir", "/sandbox", "--upstream-proxy=https://proxy.corp:3130",
             f"--upstream-proxy-auth-file={PROXY_AUTH}")
    old = box.run(args=https)
    assert old.proc.returncode == 1, old.stderr
    assert ("--upstream-proxy is invalid: unsupported proxy scheme 'https': only http:// forward proxies are "
            "supported by the sandbox supervisor") in old.stderr
    new = box.run(NEWER, https)
    assert new.proc.returncode == 0, new.stderr
    assert "upstream proxy proxy.corp:3130 is dialled over TLS" in new.stderr
    socks = box.run(NEWER, ("--workdir", "/sandbox", "--upstream-proxy=socks5://proxy.corp:1080"))
    assert ("unsupported proxy scheme 'socks5': only http:// and https:// forward proxies are supported by the "
            "sandbox supervisor") in socks.stderr
    plain = box.run(NEWER, (*PROXY_ARGS, f"--upstream-proxy-auth-file={PROXY_AUTH}"))
    assert CLEARTEXT in plain.stderr


def test_process_only_mode_needs_no_network_caps(box: Box) -> None:
    run = box.run(args=("--mode", "process", "--workdir", "/sandbox"), drop=("net_admin", "sys_admin"))
    assert run.proc.returncode == 0, run.stderr


def test_pid_limit_set(box: Box) -> None:
    write("/sys/fs/cgroup/pids.max", "2048\n")(box)
    run = box.run({"OPENSHELL_REQUIRE_RUNTIME_PID_LIMIT": ""})
    assert run.proc.returncode == 0, run.stderr
    assert "pids.max" not in run.stderr


@pytest.mark.parametrize("flag", ["--help", "-h", "--version", "-V"])
def test_help_and_version(box: Box, flag: str) -> None:
    run = box.run({"OPENSHELL_SANDBOX_ID": None}, (flag,))
    assert run.proc.returncode == 0


@pytest.mark.parametrize(("path", "check"), [
    pytest.param("/run/openshell/ssh.sock", "file", id="stale-file-replaced"),
    pytest.param("@openshell-standin-test", "abstract", id="abstract"),
])
def test_ssh_socket(box: Box, path: str, check: str) -> None:
    if check == "file":
        write(path, "stale")(box)
    run = box.start({"OPENSHELL_SSH_SOCKET_PATH": path, "OPENSHELL_MAIN_PROCESS_SPEC": spec(["/bin/sleep", "600"])})
    run.wait_for("openshell-sandbox: ready")
    if check == "file":
        assert box.path(path).is_socket()
    else:
        unix = Path(f"/proc/{run.supervisor()}/net/unix").read_text()
        assert "@openshell-standin-test" in unix
    run.signal(signal.SIGTERM)
    assert run.wait() == 143


# ------------------------------------------------------------------ PID 1

@pytest.mark.parametrize(("command", "code"), [
    pytest.param(["/bin/sh", "-c", "exit 3"], 3, id="exit-3"),
    pytest.param(["/bin/sh", "-c", "kill -KILL $$"], 137, id="killed"),
    pytest.param(["/bin/false"], 1, id="false"),
])
def test_exit_status(box: Box, command: list[str], code: int) -> None:
    """The supervisor exits with the main process's status, or 128 + the signal that killed it."""
    run = box.run({"OPENSHELL_MAIN_PROCESS_SPEC": spec(command)})
    assert run.proc.returncode == code, run.stderr


def test_sigterm_forwarded_to_process_group(box: Box) -> None:
    """SIGTERM goes to the main process's group; SIGINT and SIGHUP have no handler (PID 1 ignores them)."""
    run = box.start({"OPENSHELL_MAIN_PROCESS_SPEC": spec(["/bin/sh", "-c", "/bin/sleep 600 & wait"])})
    run.wait_for("openshell-sandbox: ready")
    main = run.main()
    assert os.getpgid(main) == main
    sleeper = wait_until(lambda: (children(main) or [0])[0], 30, "the main process's child")
    assert os.getpgid(sleeper) == main
    run.signal(signal.SIGHUP)
    run.signal(signal.SIGINT)
    run.signal(signal.SIGTERM)
    assert run.wait() == 143
    assert "failed to signal" not in run.stderr


def test_sigterm_without_cap_kill_is_lost(box: Box) -> None:
    """Without CAP_KILL the forward fails with EPERM; the supervisor logs it and keeps waiting, so only
    SIGKILL stops the container (upstream's behaviour, and its stop-latency bug)."""
    run = box.start({"OPENSHELL_MAIN_PROCESS_SPEC": spec(["/bin/sleep", "600"])}, drop=("kill",))
    run.wait_for("openshell-sandbox: ready")
    supervisor, main = run.supervisor(), run.main()
    run.signal(signal.SIGTERM)
    run.wait_for("failed to signal entrypoint process group")
    assert "EPERM" in run.stderr
    assert state(main) == "S" and state(supervisor) == "S"
    assert run.proc.poll() is None
    os.kill(supervisor, signal.SIGKILL)
    run.wait()
    assert state(main) == ""


def test_orphans_reaped(box: Box) -> None:
    """Orphans re-parent to the supervisor (PID 1), which reaps them."""
    run = box.start({"OPENSHELL_MAIN_PROCESS_SPEC": spec(["/bin/sh", "-c", "(/bin/sleep 600 &); exec /bin/sleep 600"])})
    run.wait_for("openshell-sandbox: ready")
    supervisor = run.supervisor()
    orphan = wait_until(lambda: (children(supervisor)[1:] or [0])[0], 30, "the orphan under PID 1")
    os.kill(orphan, signal.SIGKILL)
    wait_until(lambda: len(children(supervisor)) == 1, 30, "the orphan to be reaped",
               lambda: [(p, state(p)) for p in children(supervisor)])
    run.signal(signal.SIGTERM)
    assert run.wait() == 143


def test_network_only_mode(box: Box) -> None:
    """--mode=network runs no main process and stops with exit 0 on SIGINT or SIGTERM."""
    run = box.start(args=("--mode", "network"))
    run.wait_for("ready")
    assert children(run.supervisor()) == []
    run.signal(signal.SIGINT)
    assert run.wait() == 0
