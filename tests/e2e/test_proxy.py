"""The corporate proxy through the pex and real rootless Podman, split topology: the
supervisor container (host network) gets it on its command line only and the credential
only as a file of its own user, mode 0400; the workload (no network) gets neither; bad
settings stop podmand at start with upstream's message.

The stand-in supervisor (tests/images/supervisor2) parses the proxy flags as upstream's
clap does (an unknown flag exits 2) but dials no proxy, so a proxy here is only a URL,
except in the https:// test, where a real CONNECT proxy over TLS is dialled from inside
the supervisor container, where the supervisor would dial it from. An older supervisor
(upstream 2f7fb65, no --upstream-proxy-ca-bundle) is the stand-in behind a wrapper that
refuses that flag as clap would (the ``older_supervisor`` fixture).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import shutil
import socket
import ssl
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from tests.e2e.conftest import ROOT, SUPERVISOR_IMAGE, USER, Podmand, containers_of, run_in, sandbox, volumes_of
from tests.e2e.test_reach import serving
from tests.wait import wait_until

SECRET = "corp-user:Pr0xy-S3cret-e2e"
TLS = Path(__file__).resolve().parents[1] / "data" / "proxytls"  # a test CA and a proxy certificate it signed
PEM = (TLS / "ca.pem").read_text()
PROXY_URL = "http://proxy.corp.example:3128"
AUTH_PATH = "/etc/openshell/auth/upstream-proxy"
CA_PATH = "/etc/openshell/tls/proxy/ca-bundle.pem"
FLAGS = [
    f"--upstream-proxy={PROXY_URL}",
    "--upstream-no-proxy=-x.corp,10.0.0.0/8",
    f"--upstream-proxy-auth-file={AUTH_PATH}",
    "--upstream-proxy-auth-allow-insecure",
    "--upstream-proxy-connect-by-hostname",
    f"--upstream-proxy-ca-bundle={CA_PATH}",
]
IDENTITY = "1000"  # sandbox:1's USER sandbox: the supervisor container's user
# the main process writes its environment where an exec can read it, then idles
ENV_REPORT = ["sh", "-c", "env >/tmp/.env && mv /tmp/.env /tmp/env; exec sleep 600"]
OLDER_SUPERVISOR = "localhost/podmand-test/supervisor2-2f7fb65:1"
# upstream 2f7fb65's supervisor as clap would answer the flag it lacks; anything else goes to the stand-in
OLDER_WRAPPER = b"""#!/usr/bin/python3
import os, sys
if any(a.split("=", 1)[0] == "--upstream-proxy-ca-bundle" for a in sys.argv[1:]):
    sys.stderr.write("error: unexpected argument '--upstream-proxy-ca-bundle' found\\n")
    sys.exit(2)
os.execv("/openshell-supervisor-newer", ["/openshell-supervisor", *sys.argv[1:]])
"""


def proxied(make_podmand: Callable[..., Podmand], **extra: str) -> Podmand:
    """A podmand (not started) with every proxy setting; its files belong to podmand's user."""
    daemon: Podmand = make_podmand(start=False)
    auth, ca = daemon.workdir / "proxy-auth", daemon.workdir / "proxy-ca.pem"
    auth.write_text(f"{SECRET}\n")
    ca.write_text(PEM)
    for path in (auth, ca):
        shutil.chown(path, USER, USER)
        path.chmod(0o600)
    daemon.env.update({
        "OPENSHELL_SANDBOX_HTTPS_PROXY": PROXY_URL,
        "OPENSHELL_SANDBOX_NO_PROXY": "-x.corp,10.0.0.0/8",
        "OPENSHELL_SANDBOX_PROXY_AUTH_FILE": str(auth),
        "OPENSHELL_SANDBOX_PROXY_AUTH_ALLOW_INSECURE": "true",
        "OPENSHELL_SANDBOX_PROXY_CONNECT_BY_HOSTNAME": "true",
        "OPENSHELL_SANDBOX_PROXY_CA_BUNDLE": str(ca),
        **extra,
    })
    return daemon


def log_of(container: Any) -> str:
    return b"".join(container.logs(stdout=True, stderr=True)).decode(errors="replace")


def running_pair(podman_client: podman.PodmanClient, sandbox_id: str) -> tuple[Any, Any]:
    """(workload, supervisor) once the supervisor says it is ready (it accepted its argv)."""
    [workload] = containers_of(podman_client, sandbox_id)
    [supervisor] = containers_of(podman_client, sandbox_id, "supervisor")
    wait_until(lambda: "openshell-supervisor: ready" in log_of(supervisor), 60, "the supervisor's ready line",
               lambda: log_of(supervisor))
    return workload, supervisor


def test_supervisor_gets_the_proxy_and_the_secret_stays_in_its_file(
        make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """The sandbox reaches Ready with the operator's proxy on the supervisor's argv, untouched by
    the sandbox's own HTTPS_PROXY/NO_PROXY (which reach its main process, not the supervisor's
    environment); the credential is a file of the supervisor's user only, the workload has
    neither file, and the secret appears nowhere in Podman's view of either container, the
    volumes, or any log."""
    daemon = proxied(make_podmand).start()
    watch = daemon.watch()
    own = {"HTTPS_PROXY": "http://evil.example:1", "https_proxy": "http://evil.example:2", "NO_PROXY": "*"}
    box = sandbox(environment=own, command=ENV_REPORT)
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", timeout=60)
    workload, supervisor = running_pair(podman_client, box.id)
    attrs = supervisor.attrs
    command = attrs["Config"]["Cmd"]
    assert command[:2 + len(FLAGS)] == ["--workdir", "/sandbox", *FLAGS]
    assert [a for a in command[2 + len(FLAGS):] if "proxy" in a] == []  # no flag twice, nothing else
    env = dict(item.split("=", 1) for item in attrs["Config"]["Env"])
    assert not {"HTTPS_PROXY", "https_proxy", "NO_PROXY"} & set(env)  # kept from the supervisor
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert mounts[AUTH_PATH]["RW"] is False and mounts[CA_PATH]["RW"] is False
    assert not {AUTH_PATH, CA_PATH} & {m["Destination"] for m in workload.attrs["Mounts"]}

    # the sandbox's own proxy variables are its main process's business
    main = wait_until(lambda: run_in(workload, ["/bin/cat", "/tmp/env"])[1], 30, "the main process's environment")
    assert {"HTTPS_PROXY=http://evil.example:1", "https_proxy=http://evil.example:2", "NO_PROXY=*"} <= set(
        main.splitlines())

    # in the supervisor: the credential (trimmed, one newline) readable by its user only; the CA bundle as given
    assert run_in(supervisor, ["cat", AUTH_PATH]) == (0, f"{SECRET}\n", "")
    assert run_in(supervisor, ["stat", "-c", "%u %a", AUTH_PATH])[1].split() == [IDENTITY, "400"]
    code, _, err = run_in(supervisor, ["cat", AUTH_PATH], user="65534")
    assert code != 0 and "Permission denied" in err
    assert run_in(supervisor, ["cat", CA_PATH])[1] == PEM
    # in the workload: neither file
    for path in (AUTH_PATH, CA_PATH):
        assert run_in(workload, ["/bin/test", "-e", path])[0] == 1, path

    # nowhere else: inspect (env, labels, args), the volumes' labels, podmand's and the containers' logs
    seen = json.dumps([workload.attrs, attrs, *[v.attrs for v in volumes_of(podman_client, box.id)]])
    for where, text in (("inspect", seen), ("podmand's log", daemon.logs()), ("workload log", log_of(workload)),
                        ("supervisor log", log_of(supervisor))):
        assert SECRET not in text and "Pr0xy-S3cret" not in text, where
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


@pytest.fixture(scope="module")
def older_supervisor(podman_client: podman.PodmanClient) -> str:
    """The supervisor image as upstream 2f7fb65 would be: the stand-in behind a wrapper that
    refuses --upstream-proxy-ca-bundle with clap's message and exit status 2."""
    newer = (ROOT / "tests" / "images" / "supervisor2" / "openshell-supervisor").read_bytes()
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for name, data in (("openshell-supervisor", OLDER_WRAPPER), ("openshell-supervisor-newer", newer)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    if podman_client.images.exists(OLDER_SUPERVISOR):  # an earlier run's, perhaps of an older stand-in
        with contextlib.suppress(podman.errors.APIError):
            podman_client.images.remove(OLDER_SUPERVISOR)
    base = podman_client.containers.create(SUPERVISOR_IMAGE, command=["health"])
    try:
        base.put_archive("/", layer.getvalue())
        base.commit(repository=OLDER_SUPERVISOR.rsplit(":", 1)[0], tag="1")
    finally:
        base.remove(force=True)
    return OLDER_SUPERVISOR


def test_ca_bundle_needs_a_supervisor_newer_than_2f7fb65(
        make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str],
        older_supervisor: str) -> None:
    """What docs/hosts.md (Corporate proxy) warns about: with proxy_ca_bundle set and a 2f7fb65
    supervisor, the supervisor refuses podmand's argv as clap does and the sandbox never comes
    up: podmand reports the supervisor gone with its exit code, and the refusal is in the
    supervisor's container log."""
    daemon = proxied(make_podmand, OPENSHELL_SUPERVISOR_IMAGE=older_supervisor).start()
    watch = daemon.watch()
    box = sandbox()
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))

    def gone() -> pb.DriverCondition | None:
        conds = [c for s in watch.snapshots(box.id) for c in s.status.conditions if c.type == "Ready"]
        return next((c for c in conds if c.reason == "SupervisorExited"), None)

    cond = wait_until(gone, 60, "SupervisorExited", lambda: watch.snapshots(box.id))
    assert cond.status == "False" and cond.message.endswith("has exited (exit code 2)"), cond
    [supervisor] = containers_of(podman_client, box.id, "supervisor")
    log = log_of(supervisor)
    assert log.startswith("error: unexpected argument '--upstream-proxy-ca-bundle' found\n"), log
    assert "openshell-supervisor: ready" not in log
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_bad_proxy_settings_stop_podmand_with_upstreams_message(make_podmand: Callable[..., Podmand]) -> None:
    """Refused at start, exit status 2, one line naming the setting with upstream's reason."""
    cases = {
        "proxy_auth_file (--sandbox-proxy-auth-file / OPENSHELL_SANDBOX_PROXY_AUTH_FILE): proxy_auth_file sends "
        "the credential as cleartext Basic auth over the plain-TCP connection to the http:// proxy; set "
        "proxy_auth_allow_insecure = true to accept that exposure, or remove proxy_auth_file":
            {"OPENSHELL_SANDBOX_PROXY_AUTH_ALLOW_INSECURE": "false"},
        "https_proxy (--sandbox-https-proxy / OPENSHELL_SANDBOX_HTTPS_PROXY): https_proxy must not embed "
        "credentials in the URL; supply them via proxy_auth_file so they are not stored in config or container "
        "metadata": {"OPENSHELL_SANDBOX_HTTPS_PROXY": "http://corp-user:Pr0xy-S3cret-e2e@proxy.corp.example:3128"},
    }
    for message, bad in cases.items():
        daemon = proxied(make_podmand, **bad)
        result = subprocess.run(daemon.command("serve"), capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"invalid setting {message}" in result.stderr, result.stderr
        assert "Pr0xy-S3cret" not in result.stdout + result.stderr


def test_credential_is_read_again_for_each_sandbox(
        make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """A rotated credential reaches the next sandbox without a restart; one broken after start
    fails the next sandbox with UpstreamProxyInvalid, naming the file but never its content."""
    daemon = proxied(make_podmand).start()
    auth = daemon.workdir / "proxy-auth"
    watch = daemon.watch()
    auth.write_text("corp-user:R0tated-S3cret\n")
    rotated, broken = sandbox(), sandbox()
    cleanup += [rotated.id, broken.id]
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=rotated))
    watch.wait_reason(rotated.id, "ContainerRunning", timeout=60)
    [supervisor] = containers_of(podman_client, rotated.id, "supervisor")
    assert run_in(supervisor, ["cat", AUTH_PATH])[1] == "corp-user:R0tated-S3cret\n"
    auth.write_text("Br0ken-S3cret-without-a-colon\n")
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=broken))
    snap = watch.wait_reason(broken.id, "UpstreamProxyInvalid")
    [cond] = [c for c in snap.status.conditions if c.type == "Ready"]
    assert cond.message == f"proxy_auth_file '{auth}': credential must use the user:pass form (missing ':')"
    assert "Br0ken" not in daemon.logs()
    for box in (rotated, broken):
        assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


# ---------------------------------------------------------------- an https:// proxy, for real


@contextlib.contextmanager
def tls_connect_proxy() -> Iterator[tuple[int, int, list[str]]]:
    """(proxy port, target port, requests seen): a CONNECT proxy over TLS on 0.0.0.0 presenting
    the certificate the test CA signed (tests/data/proxytls), tunnelling to a target on this
    host that greets each connection. Each request's head is recorded as the proxy saw it."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(TLS / "proxy.pem", TLS / "proxy.key")
    proxy_server, target = socket.create_server(("0.0.0.0", 0)), socket.create_server(("0.0.0.0", 0))
    seen: list[str] = []

    def tunnel(raw: socket.socket) -> None:
        with contextlib.suppress(OSError, ssl.SSLError), ctx.wrap_socket(raw, server_side=True) as tls:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = tls.recv(4096)
                if not chunk:
                    return
                head += chunk
            seen.append(head.decode(errors="replace"))
            port = int(head.split(b" ", 2)[1].rsplit(b":", 1)[1])
            with socket.create_connection(("127.0.0.1", port), timeout=10) as upstream:
                tls.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                tls.sendall(upstream.recv(4096))

    threads = [serving(target, lambda conn: conn.sendall(b"target-reached\n")), serving(proxy_server, tunnel)]
    try:
        yield proxy_server.getsockname()[1], target.getsockname()[1], seen
    finally:
        for s in (proxy_server, target):
            s.shutdown(socket.SHUT_RDWR)
            s.close()
        for t in threads:
            t.join(5)


# Run in the supervisor container, as its user: TLS to the proxy verified with the bundle podmand copied in (or the
# system roots alone), CONNECT with the credential file's Basic auth, then the target's greeting.
CLIENT = """
import base64, socket, ssl, sys
host, port, target, cafile = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] or None
ctx = ssl.create_default_context(cafile=cafile)
cred = base64.b64encode(open("/etc/openshell/auth/upstream-proxy", "rb").read().strip()).decode()
try:
    with ctx.wrap_socket(socket.create_connection((host, port), timeout=10), server_hostname=host) as tls:
        tls.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\nProxy-Authorization: Basic {cred}\\r\\n\\r\\n"
                    .encode())
        reply = b""
        while b"target-reached" not in reply:
            chunk = tls.recv(4096)
            if not chunk:
                break
            reply += chunk
        print(reply.decode().replace("\\r\\n", "|").strip())
except ssl.SSLCertVerificationError as exc:
    print("verify failed:", exc.verify_message)
"""


def test_https_proxy_is_reached_over_tls_from_the_supervisor_container(
        make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """Upstream PR #2512 through the pex: an https:// proxy with an auth file and no insecure
    acknowledgement starts the supervisor with the proxy, its auth file and its CA bundle; from
    inside the supervisor container (the host's network, where the supervisor dials the proxy
    from) the CA bundle podmand copied in verifies the real proxy (the system roots alone do
    not), and the credential reaches it inside TLS; the workload, with no network, cannot reach
    it at all. doctor verifies the same proxy with the bundle and FAILs with another CA."""
    with tls_connect_proxy() as (proxy_port, target_port, seen):
        url = f"https://host.containers.internal:{proxy_port}"
        daemon = proxied(make_podmand, OPENSHELL_SANDBOX_HTTPS_PROXY=url, OPENSHELL_SANDBOX_NO_PROXY="",
                         OPENSHELL_SANDBOX_PROXY_AUTH_ALLOW_INSECURE="", OPENSHELL_SANDBOX_PROXY_CONNECT_BY_HOSTNAME="")
        daemon.start()
        watch = daemon.watch()
        box = sandbox()
        cleanup.append(box.id)
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        watch.wait_reason(box.id, "ContainerRunning", timeout=60)
        workload, supervisor = running_pair(podman_client, box.id)
        assert supervisor.attrs["Config"]["Cmd"][:5] == [
            "--workdir", "/sandbox", f"--upstream-proxy={url}", f"--upstream-proxy-auth-file={AUTH_PATH}",
            f"--upstream-proxy-ca-bundle={CA_PATH}"]
        client = ["python3", "-c", CLIENT, "host.containers.internal", str(proxy_port), f"127.0.0.1:{target_port}"]
        code, out, err = run_in(supervisor, [*client, CA_PATH])
        assert code == 0 and out == "HTTP/1.1 200 Connection established||target-reached\n", (code, out, err)
        assert len(seen) == 1 and f"Proxy-Authorization: Basic {base64.b64encode(SECRET.encode()).decode()}" in seen[0]
        code, out, err = run_in(supervisor, [*client, ""])
        assert out.startswith("verify failed: unable to get local issuer certificate"), (code, out, err)
        assert len(seen) == 1  # nothing was sent to a proxy that was not verified
        # the supervisor reached it at this host's loopback, which the workload (network none) does not share
        assert run_in(supervisor, ["getent", "hosts", "host.containers.internal"])[1].split()[0] == "127.0.0.1"
        dial = ["/usr/bin/python3", "-c", f"import socket; socket.create_connection(('127.0.0.1', {proxy_port}), 5)"]
        code, _, err = run_in(workload, dial)
        assert code != 0 and "ConnectionRefusedError" in err, err
        assert len(seen) == 1
        assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted

        local = f"https://127.0.0.1:{proxy_port}"  # the same proxy as this host reaches it
        for bundle, status in ((TLS / "ca.pem", "OK"), (TLS / "other-ca.pem", "FAIL")):
            copy = daemon.workdir / bundle.name
            shutil.copy(bundle, copy)
            shutil.chown(copy, USER, USER)
            daemon.env.update(OPENSHELL_SANDBOX_HTTPS_PROXY=local, OPENSHELL_SANDBOX_PROXY_CA_BUNDLE=str(copy))
            proc = subprocess.run(daemon.command("doctor", "--json"), capture_output=True, text=True, timeout=120)
            [check] = [c for c in json.loads(proc.stdout) if c["name"] == "corporate proxy"]
            assert check["status"] == status, check
        assert check["finding"].startswith(f"{local}: TLS handshake with 127.0.0.1:{proxy_port} failed: unable to get "
                                           "local issuer certificate")
        assert check["fix"].startswith("set proxy_ca_bundle (--sandbox-proxy-ca-bundle")
