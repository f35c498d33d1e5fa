"""Private registries: pull credentials from the operator's auth.json, through real
Podman, from a local registry that wants them.

The registry is Debian's docker-registry with htpasswd (bcrypt) auth on a free
loopback port, started by the fixture (its PID recorded, only it stopped). It serves
TLS with a certificate made here, trusted through ``/etc/containers/certs.d/<host:port>/``:
containers/image reads that directory on every pull, while a ``registries.conf.d``
``insecure`` drop-in would need the running Podman service to restart (it caches
registries.conf). The fixture removes both afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pwd
import shutil
import socket
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from podmand.sandbox import pullprogress
from tests.e2e.conftest import SANDBOX_IMAGE, USER, Podmand, containers_of, pair_of, podman_version, ready, sandbox
from tests.wait import wait_until

CERTS_D = Path("/etc/containers/certs.d")
PASSWORD = "pw-" + uuid.uuid4().hex  # this run's secret: asserted absent from logs and inspect


@dataclass
class Registry:
    host: str  # 127.0.0.1:<port>
    workdir: Path

    def ref(self, tag: str) -> str:
        return f"{self.host}/podmand-test/sandbox:{tag}"

    def auth_file(self, name: str, password: str) -> str:
        """An auth.json (Podman's format) for this registry, readable by the rootless user only."""
        path = self.workdir / name
        token = base64.b64encode(f"podmand:{password}".encode()).decode()
        path.write_text(json.dumps({"auths": {self.host: {"auth": token}}}))
        shutil.chown(path, USER, USER)
        path.chmod(0o600)
        return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def as_user(*cmd: str) -> subprocess.CompletedProcess[str]:
    uid = pwd.getpwnam(USER).pw_uid
    return subprocess.run(["runuser", "-u", USER, "--", "env", f"XDG_RUNTIME_DIR=/run/user/{uid}", *cmd],
                          cwd="/", capture_output=True, text=True, timeout=120)


def answers(url: str, cafile: str) -> bool:
    try:
        urllib.request.urlopen(url, context=ssl.create_default_context(cafile=cafile), timeout=2)
    except urllib.error.HTTPError as exc:
        return exc.code == 401  # up, and asking for credentials
    except OSError:
        return False
    return False


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    if not shutil.which("docker-registry") or not shutil.which("htpasswd"):
        pytest.fail("docker-registry and htpasswd are missing: run 'bash tests/setup-podman.sh' (tests/run.sh does)")
    workdir = Path(tempfile.mkdtemp(prefix="podmand-registry-"))
    os.chmod(workdir, 0o755)
    host = f"127.0.0.1:{free_port()}"
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    htpasswd = subprocess.run(["htpasswd", "-Bbn", "podmand", PASSWORD], check=True, capture_output=True, text=True)
    (workdir / "htpasswd").write_text(htpasswd.stdout)
    (workdir / "config.yml").write_text(
        f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {workdir / 'data'}\n"
        f"http:\n  addr: {host}\n  tls:\n    certificate: {cert}\n    key: {key}\n"
        f"auth:\n  htpasswd:\n    realm: podmand-test\n    path: {workdir / 'htpasswd'}\n"
    )
    made_certs_d = not CERTS_D.exists()
    trust = CERTS_D / host
    trust.mkdir(parents=True, mode=0o755)
    shutil.copy(cert, trust / "ca.crt")
    (trust / "ca.crt").chmod(0o644)
    log = open(workdir / "registry.log", "wb")  # noqa: SIM115 - the registry process owns it
    proc = subprocess.Popen(["docker-registry", "serve", str(workdir / "config.yml")],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    reg = Registry(host, workdir)
    try:
        wait_until(lambda: proc.poll() is not None or answers(f"https://{host}/v2/", str(cert)), 30,
                   "the registry to answer")
        assert proc.poll() is None, (workdir / "registry.log").read_text()
        pusher = reg.auth_file("push.json", PASSWORD)
        for tag in ("good", "rotated", "anonymous"):
            pushed = as_user("podman", "push", "-q", "--authfile", pusher, SANDBOX_IMAGE, reg.ref(tag))
            assert pushed.returncode == 0, pushed.stderr
        yield reg
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
        for tag in ("good", "rotated", "anonymous"):  # what the tests pulled into the rootless store
            as_user("podman", "untag", reg.ref(tag), reg.ref(tag))
        shutil.rmtree(trust, ignore_errors=True)
        if made_certs_d:
            with contextlib.suppress(OSError):
                CERTS_D.rmdir()
        shutil.rmtree(workdir, ignore_errors=True)


def local(client: podman.PodmanClient, ref: str) -> Any:
    try:
        return client.images.get(ref)
    except podman.errors.ImageNotFound:
        return None


def secrets(text: str) -> list[str]:
    encoded = base64.b64encode(f"podmand:{PASSWORD}".encode()).decode()
    return [s for s in (PASSWORD, encoded, encoded.rstrip("=")) if s in text]


def test_private_registry_pull_with_rotation(
    registry: Registry, make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
    cleanup: list[str],
) -> None:
    """With registry_auth_file the image is pulled through Podman and the sandbox runs;
    after the operator rewrites the file with a wrong password, the next pull is a
    terminal ImagePullFailed naming the registry, the entry and the setting. The secret
    is nowhere in podmand's log or in what Podman shows of the image and of either container
    of the pair (the workload runs the pulled image; the supervisor is the supervisor image's)."""
    auth = registry.auth_file("auth.json", PASSWORD)
    good, rotated = registry.ref("good"), registry.ref("rotated")
    assert local(podman_client, good) is None and local(podman_client, rotated) is None
    driver = make_podmand({"PODMAND_REGISTRY_AUTH_FILE": auth})
    watch = driver.watch()

    box = sandbox(image=good)
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", timeout=60)
    image = local(podman_client, good)
    assert image is not None, "the image was not pulled into the rootless store"
    [container] = containers_of(podman_client, box.id)
    assert container.attrs["Image"] == image.id
    assert image.id == podman_client.images.get(SANDBOX_IMAGE).id  # the same image, through the registry
    # The real pull was reported as it went: Pulling events with the gateway's progress keys
    # and podmand's layer counts for this image, then Pulled.
    events = watch.platform_events(box.id)
    pulling = [e for e in events if e.reason == "Pulling" and e.metadata.get(pullprogress.KEY_IMAGE) == good]
    assert pulling, [(e.reason, dict(e.metadata)) for e in events]
    last = pulling[-1].metadata
    assert last["openshell.progress.active_step"] and int(last[pullprogress.KEY_BLOBS_SEEN]) >= 1
    assert int(last[pullprogress.KEY_BLOBS_DONE]) <= int(last[pullprogress.KEY_BLOBS_SEEN])
    reasons = [e.reason for e in events]
    assert "Pulled" in reasons and reasons.index("Pulled") > reasons.index("Pulling")

    registry.auth_file("auth.json", "wrong-" + PASSWORD[::-1])  # rotated in place, wrongly
    bad = sandbox(image=rotated)
    cleanup.append(bad.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=bad))
    cond = ready(watch.wait_reason(bad.id, "ImagePullFailed", timeout=60))
    assert cond is not None
    message = cond.message
    assert message.startswith(f"authentication to {registry.host} failed pulling {rotated!r}"), message
    assert f"entry {registry.host!r} of registry_auth_file (--registry-auth-file / PODMAND_REGISTRY_AUTH_FILE)" \
        in message
    assert local(podman_client, rotated) is None

    pair = [c.attrs for c in pair_of(podman_client, box.id)]
    assert len(pair) == 2
    shown = json.dumps([*pair, image.attrs, podman_client.images.get(SANDBOX_IMAGE).attrs])
    assert secrets(driver.logs()) == [] and secrets(shown) == [] and secrets(message) == []
    assert "ImagePullFailed" in driver.logs()  # the log was written (and checked) after the failure


def test_private_registry_without_credentials(
    registry: Registry, make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
    cleanup: list[str],
) -> None:
    """Without the setting (and nothing for this registry in Podman's own auth.json) the
    registry refuses, and the reason says where credentials would come from."""
    driver = make_podmand()
    watch = driver.watch()
    ref = registry.ref("anonymous")
    box = sandbox(image=ref)
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    cond = ready(watch.wait_reason(box.id, "ImagePullFailed", timeout=60))
    assert cond is not None
    message = cond.message
    assert message.startswith(f"authentication to {registry.host} failed pulling {ref!r}"), message
    assert "registry_auth_file (--registry-auth-file / PODMAND_REGISTRY_AUTH_FILE) is not set" in message
    # Podman's own words for the registry's 401 (containers/image): 4.3.1 passes the
    # registry's "unauthorized: authentication required" on, 5.4.2 says only
    # "reading manifest ...: authentication required".
    assert ("unauthorized" if podman_version(podman_client) < (5,) else "authentication required") in message
    assert containers_of(podman_client, box.id) == [] and local(podman_client, ref) is None


def test_a_tag_another_client_moves_is_what_the_next_sandbox_runs(
    registry: Registry, make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
    cleanup: list[str],
) -> None:
    """podmand pins a reference to the image its own pull found, and its own pull's event
    (Podman writes one even for a no-op pull) does not undo that; another client's pull
    that moves the tag does. The next sandbox of that reference runs the new image."""
    auth = registry.auth_file("moving.json", PASSWORD)
    ref, moved = registry.ref("moving"), f"localhost/podmand-test/moved:{uuid.uuid4().hex[:8]}"
    assert as_user("podman", "push", "-q", "--authfile", auth, SANDBOX_IMAGE, ref).returncode == 0
    build = Path(tempfile.mkdtemp(prefix="podmand-moved-"))  # the rootless user's build reads it
    build.chmod(0o755)
    (build / "Containerfile").write_text(f"FROM {SANDBOX_IMAGE}\nLABEL podmand-test.moved={moved}\n")
    driver = make_podmand({"PODMAND_REGISTRY_AUTH_FILE": auth, "OPENSHELL_LOG_LEVEL": "debug"})
    watch = driver.watch()
    boxes = [sandbox(), sandbox(image=ref), sandbox(image=ref)]
    cleanup.extend(b.id for b in boxes)
    try:
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=boxes[0]))  # podmand subscribes to image events
        wait_until(lambda: "image events: subscribed" in driver.logs(), 30, "the image subscription",
                   detail=driver.logs)
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=boxes[1]))
        watch.wait_reason(boxes[1].id, "ContainerRunning", timeout=60)
        first = podman_client.images.get(SANDBOX_IMAGE).id
        assert containers_of(podman_client, boxes[1].id)[0].attrs["Image"] == first
        assert f"image {ref} pinned as {first.removeprefix('sha256:')[:12]}" in driver.logs()

        built = as_user("podman", "build", "-q", "-t", moved, str(build))
        assert built.returncode == 0, built.stderr
        assert as_user("podman", "push", "-q", "--authfile", auth, moved, ref).returncode == 0
        mark = len(driver.logs())
        pulled = as_user("podman", "pull", "-q", "--authfile", auth, ref)  # another client moves the tag
        assert pulled.returncode == 0, pulled.stderr
        second = podman_client.images.get(moved).id
        assert second != first and podman_client.images.get(ref).id == second
        wait_until(lambda: f"image {ref}: a pull event may have moved it" in driver.logs()[mark:], 30,
                   "podmand to hear of the other client's pull", detail=driver.logs)

        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=boxes[2]))
        watch.wait_reason(boxes[2].id, "ContainerRunning", timeout=60)
        assert containers_of(podman_client, boxes[2].id)[0].attrs["Image"] == second
    finally:
        for box in boxes:
            driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id))
        as_user("podman", "untag", ref, ref)
        as_user("podman", "rmi", "-f", moved)
        shutil.rmtree(build, ignore_errors=True)
