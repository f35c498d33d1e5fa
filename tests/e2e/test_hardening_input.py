"""Hostile input through the pex (issue 9): refused with the right code, naming the
field, and nothing created — neither container of the pair, no volume, no state files.

Split topology: the workload's environment is empty (an exec there has no PATH, so the
tests exec absolute paths), and a start sends a new launch bundle under a new generation,
as a gateway does."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from tests.standin.launch import Launch

from .conftest import (
    USER,
    Podmand,
    containers_of,
    gateway_metadata,
    pair_of,
    ready,
    run_in,
    sandbox,
    volumes_of,
    wait_until,
)

ADMITTED = {"openshell.ai/sandbox-attachable": "true", "openshell.ai/workspace": "ws"}
DRIVER_CONFIG = {"PODMAND_ALLOW_DRIVER_CONFIG": "true"}
HOST_MOUNT_REFUSED = (
    "host bind or image mount cannot be attached while resource admission is enabled: no trusted label resolver"
)


def refused(call: Callable[[], Any], code: grpc.StatusCode, *needles: str) -> str:
    """Run an RPC that must fail with ``code``; its details, which must contain each needle."""
    with pytest.raises(grpc.RpcError) as err:
        call()
    details = err.value.details() or ""
    assert err.value.code() == code, details
    for needle in needles:
        assert needle in details, details
    return details


def nothing_created(daemon: Podmand, client: podman.PodmanClient, sandbox_id: str) -> None:
    assert pair_of(client, sandbox_id) == []
    assert volumes_of(client, sandbox_id) == []
    assert not (daemon.state_dir / "sandboxes" / sandbox_id).exists()


def create(daemon: Podmand, box: pb.DriverSandbox) -> Callable[[], Any]:
    return lambda: daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))


def start(daemon: Podmand, sandbox_id: str) -> Callable[[], Any]:
    """StartSandbox as a gateway sends it: a fresh launch bundle under a new generation."""
    bundle = Launch(sandbox_id=sandbox_id).bundle()
    request = pb.StartSandboxRequest(sandbox_id=sandbox_id, launch_authentication=bundle,
                                     generation_id=f"g{uuid.uuid4().hex[:16]}")
    return lambda: daemon.stub.StartSandbox(request)


def reported(client: podman.PodmanClient, sandbox_id: str, path: str = "/tmp/report") -> str:
    """What the main process wrote to ``path`` in the workload, once written."""
    [container] = containers_of(client, sandbox_id)

    def check() -> str:
        code, out, _ = run_in(container, ["/bin/cat", path])
        return out if code == 0 else ""

    found: str = wait_until(check, 30, f"{sandbox_id}: {path}")
    return found


def validate(daemon: Podmand, box: pb.DriverSandbox) -> Callable[[], Any]:
    return lambda: daemon.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=box))


def by_id(daemon: Podmand, sandbox_id: str) -> list[Callable[[], Any]]:
    """Every RPC that takes a sandbox_id, for one id."""
    stub = daemon.stub
    return [
        lambda: stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=sandbox_id)),
        lambda: stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=sandbox_id)),
        lambda: stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=sandbox_id)),
        lambda: stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=sandbox_id)),
    ]


def running(daemon: Podmand, sandbox_id: str) -> None:
    """Wait for Ready=True by polling GetSandbox (no watch stream to end before a restart)."""
    def check() -> bool:
        cond = ready(daemon.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=sandbox_id)).sandbox)
        return cond is not None and cond.reason == "ContainerRunning"

    wait_until(check, 60, f"{sandbox_id} running")


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a digest of its content (root reads everything)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def named_volumes(podman_client: podman.PodmanClient) -> Iterator[Callable[..., str]]:
    """Make a named volume (removed after the test); its name."""
    made: list[str] = []

    def make(labels: dict[str, str] | None = None, **kwargs: Any) -> str:
        name = f"hard-{uuid.uuid4().hex[:10]}"
        podman_client.volumes.create(name, labels=labels or {}, **kwargs)
        made.append(name)
        return name

    yield make
    for name in made:
        with contextlib.suppress(podman.errors.NotFound):
            podman_client.volumes.get(name).remove(force=True)


def with_mounts(*mounts: dict[str, Any], workspace: str = "ws") -> pb.DriverSandbox:
    box = sandbox(workspace=workspace)
    box.spec.template.driver_config.update({"mounts": list(mounts)})
    return box


# ---------------------------------------------------------------- ids


def test_traversal_ids_never_reach_the_state_dir(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """DeleteSandbox("..") once rmtree'd the whole state directory (its lock and every
    sandbox's files): every RPC taking a sandbox id now refuses it before any file or Podman
    call. (Files may appear meanwhile: this podmand keeps the fence evidence of other
    sessions' sandboxes on the shared store; none that was there may change or go.)"""
    daemon = make_podmand()
    watch = daemon.watch()
    box = sandbox()
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", timeout=60)
    before = tree_digest(daemon.state_dir)
    assert "podmand.lock" in before and f"sandboxes/{box.id}/fence" in before
    stub = daemon.stub
    for bad in ("..", "../..", "../../x", "/etc", ".", f"{box.id}\n", f"../{box.id}", ""):
        for call in by_id(daemon, bad):
            refused(call, grpc.StatusCode.INVALID_ARGUMENT, "sandbox_id:")
    after = tree_digest(daemon.state_dir)
    assert {path: after.get(path) for path in before} == before
    cond = ready(stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox)
    assert cond is not None and cond.status == "True"
    refused(create(daemon, sandbox("..")), grpc.StatusCode.INVALID_ARGUMENT, "sandbox.id:")
    refused(create(daemon, sandbox(name="box\n")), grpc.StatusCode.INVALID_ARGUMENT, "sandbox.name:")
    refused(create(daemon, sandbox(workspace="ws\n")), grpc.StatusCode.INVALID_ARGUMENT, "sandbox.workspace:")
    assert stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


FORGED = "FORGED podmand: ready: serving unix:///tmp/forged.sock"


@pytest.mark.parametrize("fmt", ["human", "json"])
def test_an_id_cannot_forge_log_lines(make_podmand: Callable[..., Podmand], fmt: str) -> None:
    """A sandbox id is logged before it is checked: a caller's newline must not start a
    line of podmand's log (this one would pass for podmand's ready line). The id shows
    escaped, as its error message shows it, in both log formats."""
    daemon = make_podmand({"PODMAND_LOG_FORMAT": fmt})
    bad = f"x\n{FORGED}"
    for call in by_id(daemon, bad):
        refused(call, grpc.StatusCode.INVALID_ARGUMENT, "sandbox_id:", repr(bad))

    wait_until(lambda: daemon.logs().count("code=INVALID_ARGUMENT") >= 4, 10, "the four RPC lines",
               detail=daemon.logs)
    lines = daemon.logs().splitlines()
    assert [line for line in lines if line.startswith("FORGED")] == []
    if fmt == "json":
        docs = [json.loads(line) for line in lines if line.startswith("{")]
        assert [d["sandbox"] for d in docs if d.get("code") == "INVALID_ARGUMENT"] == [repr(bad)] * 4
        lines = [d["message"] for d in docs]
    assert sum(f"sandbox={bad!r} code=INVALID_ARGUMENT" in line for line in lines) == 4


# ---------------------------------------------------------------- isolation gates


def test_host_user_namespace_needs_the_operator(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """user_namespaces = false is refused by default (naming the field and the setting),
    and selects the host namespace once the operator allows it."""
    box = sandbox()
    box.spec.template.user_namespaces = False
    cleanup.append(box.id)
    strict = make_podmand()
    refused(create(strict, box), grpc.StatusCode.FAILED_PRECONDITION,
            "sandbox.spec.template.user_namespaces:", "allow_host_userns", "PODMAND_ALLOW_HOST_USERNS")
    nothing_created(strict, podman_client, box.id)
    strict.stop()

    lenient = make_podmand({"PODMAND_ALLOW_HOST_USERNS": "true", "PODMAND_ALLOW_USERNS_OWN_UID": "true"})
    watch = lenient.watch()
    lenient.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", timeout=60)
    [container] = containers_of(podman_client, box.id)
    assert container.attrs["HostConfig"].get("IDMappings") is None  # Podman 4.3 shows host as no maps
    assert lenient.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_injected_agent_socket_path_is_refused_and_the_probe_is_exec_form(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """A path with shell syntax is refused before anything is made; a plain one reaches the
    supervisor as its OPENSHELL_SSH_SOCKET_PATH value, never its health check, which stays the
    exec-form probe of its own health socket."""
    daemon = make_podmand({"OPENSHELL_HEALTH_CHECK_INTERVAL_SECS": "1"})
    for path, needle in (
        ("/run/openshell/x; touch /sandbox/pwned", "[A-Za-z0-9._/-]"),
        ("/run/openshell/$(reboot).sock", "[A-Za-z0-9._/-]"),
        ("/tmp/ssh.sock", "dedicated parent"),
        ("/run/openshell/" + "s" * 93, "108 bytes"),
    ):
        box = sandbox()
        box.spec.template.agent_socket_path = path
        refused(create(daemon, box), grpc.StatusCode.INVALID_ARGUMENT,
                "sandbox.spec.template.agent_socket_path:", needle)
        nothing_created(daemon, podman_client, box.id)

    watch = daemon.watch()
    box = sandbox()
    box.spec.template.agent_socket_path = "/run/agent-1/ssh.sock"
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "HealthCheckPassed", timeout=60)
    [supervisor] = containers_of(podman_client, box.id, "supervisor")
    test = supervisor.attrs["Config"]["Healthcheck"]["Test"]
    assert test == ["CMD", "/openshell-supervisor", "health", "--socket", "/run/openshell/supervisor-health.sock"]
    env = dict(item.split("=", 1) for item in supervisor.attrs["Config"]["Env"])
    assert env["OPENSHELL_SSH_SOCKET_PATH"] == "/run/agent-1/ssh.sock"
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


# ---------------------------------------------------------------- admission


def test_admission_refusals_create_nothing(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
    named_volumes: Callable[..., str], tmp_path: Path
) -> None:
    """As advertised: every attached volume carries the required labels for the sandbox's
    workspace; host binds are refused while admission is on; bind-backed volumes are found."""
    daemon = make_podmand(DRIVER_CONFIG)
    caps = daemon.stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
    policy = json.loads(caps.resource_admission_policy.removeprefix("v1:"))
    assert policy["resource_admission"] == {
        "enabled": True,
        "required_labels": {"openshell.ai/sandbox-attachable": "true", "openshell.ai/workspace": "${workspace}"},
    }
    bare = named_volumes()
    foreign = named_volumes({**ADMITTED, "openshell.ai/workspace": "other"})
    good = named_volumes(ADMITTED)
    os.chmod(tmp_path, 0o755)
    backed = named_volumes(ADMITTED, driver="local", driver_opts={"type": "none", "o": "bind", "device": str(tmp_path)})
    where = "sandbox.spec.template.driver_config.mounts[0]"
    cases = [
        (with_mounts({"type": "volume", "source": bare, "target": "/data"}),
         f"{where}.source: podman volume '{bare}': external resource not admitted by required labels"),
        (with_mounts({"type": "volume", "source": foreign, "target": "/data"}),
         f"podman volume '{foreign}': external resource not admitted by required labels"),
        (with_mounts({"type": "volume", "source": good, "target": "/data"}, workspace="other"),
         f"podman volume '{good}': external resource not admitted by required labels"),
        (with_mounts({"type": "volume", "source": backed, "target": "/data"}),
         f"podman volume '{backed}' is backed by a host bind mount"),
    ]
    for box, message in cases:
        for call in (create(daemon, box), validate(daemon, box)):
            refused(call, grpc.StatusCode.FAILED_PRECONDITION, message)
        nothing_created(daemon, podman_client, box.id)
    validate(daemon, with_mounts({"type": "volume", "source": good, "target": "/data"}))()
    # Host binds: even with bind mounts enabled, no label can vouch for a host path.
    binds = make_podmand({**DRIVER_CONFIG, "OPENSHELL_ENABLE_BIND_MOUNTS": "true"})
    box = with_mounts({"type": "bind", "source": str(tmp_path), "target": "/data"})
    for call in (create(binds, box), validate(binds, box)):
        refused(call, grpc.StatusCode.FAILED_PRECONDITION, f"{where}: {HOST_MOUNT_REFUSED}")
    nothing_created(binds, podman_client, box.id)


def test_start_rechecks_provenance_and_volume_labels(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
    named_volumes: Callable[..., str], cleanup: list[str]
) -> None:
    """StartSandbox re-checks admission under today's policy and starts nothing when it fails."""
    first = make_podmand(DRIVER_CONFIG)
    good = named_volumes(ADMITTED)
    box = with_mounts({"type": "volume", "source": good, "target": "/data"})
    cleanup.append(box.id)
    first.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    running(first, box.id)
    first.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))
    # The re-check must hold however podmand went away; SIGKILL also sidesteps an
    # intermittent slow graceful shutdown that is not what this test is about.
    first.stop(signal.SIGKILL)

    def restarted(env: dict[str, str]) -> Podmand:
        daemon = make_podmand(env, start=False)
        daemon.state_dir, daemon.env["PODMAND_STATE_DIR"] = first.state_dir, str(first.state_dir)
        return daemon.start()

    no_config = restarted({})
    refused(start(no_config, box.id), grpc.StatusCode.FAILED_PRECONDITION,
            "forbidden driver config or lacks admission provenance")
    no_config.stop(signal.SIGKILL)
    other_labels = json.dumps({"allow_driver_config": True,
                               "resource_admission": {"enabled": True, "required_labels": {"tier": "gold"}}})
    relabelled = restarted({"OPENSHELL_DRIVER_ADMISSION_CONFIG_JSON": other_labels})
    refused(start(relabelled, box.id), grpc.StatusCode.FAILED_PRECONDITION,
            f"podman volume '{good}': external resource not admitted")
    assert not any(c.attrs["State"]["Running"] for c in pair_of(podman_client, box.id))
    relabelled.stop(signal.SIGKILL)
    same = restarted(DRIVER_CONFIG)
    start(same, box.id)()
    running(same, box.id)
    assert same.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


# ---------------------------------------------------------------- bad values


def test_bad_values_are_invalid_argument(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient
) -> None:
    """NaN, quantities beyond what Podman accepts and oversized labels: INVALID_ARGUMENT
    naming the field (once UNKNOWN, a late ContainerCreateFailed, and broken watch streams)."""
    daemon = make_podmand(DRIVER_CONFIG)
    nan = with_mounts({"type": "tmpfs", "target": "/scratch", "size_bytes": float("nan")})
    inf = with_mounts({"type": "tmpfs", "target": "/scratch", "mode": float("inf")})
    cases: list[tuple[pb.DriverSandbox, str]] = [
        (nan, "sandbox.spec.template.driver_config.mounts[0].size_bytes:"),
        (inf, "sandbox.spec.template.driver_config.mounts[0].mode:"),
    ]
    for field, text in (("cpu_limit", "100000000000000000000"), ("cpu_request", "1025"),
                        ("memory_limit", "8Ei"), ("memory_request", "9223372036854775808")):
        box = sandbox()
        setattr(box.spec.template.resources, field, text)
        cases.append((box, f"sandbox.spec.template.resources.{field}:"))
    for labels in ({"big": "<" * 800_000}, {"k" * 300: "v"}, {f"k{i}": "v" * 4000 for i in range(20)}):
        box = sandbox()
        box.spec.template.labels.update(labels)
        cases.append((box, "sandbox.spec.template.labels"))
    for box, field in cases:
        refused(create(daemon, box), grpc.StatusCode.INVALID_ARGUMENT, field)
        nothing_created(daemon, podman_client, box.id)


KIB = 1024
SECRET = "s3cr3t-"  # starts every oversized value: no message may contain it


def secret(size: int, fill: str = "v") -> str:
    return SECRET + fill * (size - len(SECRET))


def oversized() -> list[tuple[pb.DriverSandbox, str]]:
    """Requests past one bound each, with the message that names it."""
    cases: list[tuple[pb.DriverSandbox, str]] = []
    box = sandbox(environment={"BIG": secret(32 * KIB + 1)})
    cases.append((box, f"sandbox.spec.environment[BIG]: value is {32 * KIB + 1} bytes, more than 32 KiB"))
    box = sandbox()
    box.spec.template.environment["BIG"] = secret(32 * KIB + 1)
    cases.append((box, "sandbox.spec.template.environment[BIG]: value is"))
    box = sandbox(environment={f"S{i}": secret(20 * KIB - 2) for i in range(2)})
    box.spec.template.environment.update({f"T{i}": secret(20 * KIB - 2) for i in range(3)})
    cases.append((box, "sandbox.spec.template.environment + sandbox.spec.environment: "
                       f"{100 * KIB} bytes of keys and values together, more than 96 KiB"))
    box = sandbox(environment={f"C{i}": secret(8 * KIB, "\x01") for i in range(3)})  # six bytes each as JSON
    cases.append((box, "bytes once encoded as JSON for OPENSHELL_USER_ENVIRONMENT"))
    cases.append((sandbox(command=["sh", "-c", secret(32 * KIB + 1)]),
                  f"sandbox.spec.command[2]: {32 * KIB + 1} bytes, more than 32 KiB"))
    cases.append((sandbox(command=["true"] * 1025), "sandbox.spec.command: 1025 arguments, more than 1024"))
    cases.append((sandbox(command=[secret(30 * KIB) for _ in range(4)]),
                  f"sandbox.spec.command: {120 * KIB} bytes of arguments, more than 96 KiB"))
    box = sandbox()  # nothing podmand bounds field by field, but the record of the create
    box.spec.template.platform_config.update({"blob": secret(600 * KIB)})
    cases.append((box, "more than 512 KiB; its biggest part is sandbox.spec.template.platform_config ("))
    return cases


def test_oversized_environment_command_and_record_are_refused(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient
) -> None:
    """An environment value, the environment, an argument, the command or the recorded
    request past its bound: INVALID_ARGUMENT naming the field from validation and
    create alike, nothing created, and no value in the message (values may be secrets)."""
    daemon = make_podmand()
    for box, needle in oversized():
        for call in (validate(daemon, box), create(daemon, box)):
            details = refused(call, grpc.StatusCode.INVALID_ARGUMENT, needle)
            assert details.startswith("sandbox"), details
            assert SECRET not in details and "vvvv" not in details, details
        nothing_created(daemon, podman_client, box.id)


def test_environment_and_command_at_their_bounds_run(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """The bounds are ones Linux execs: 96 KiB of environment and 96 KiB of command (each
    value and argument near 32 KiB) reach the main process through the runtime (bootstrap.json's
    child environment, the supervisor's start request)."""
    daemon = make_podmand()
    script = 'printf "%s %s %s" "$#" "${#1}" "${#E0}" >/tmp/.r; mv /tmp/.r /tmp/report; exec sleep 600'
    args = [secret(32 * KIB - 200) for _ in range(3)]
    box = sandbox(command=["sh", "-c", script, "sh", *args],
                  environment={f"E{i}": secret(32 * KIB - 2) for i in range(3)})
    cleanup.append(box.id)
    daemon.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=box))
    watch = daemon.watch()
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", timeout=60)
    assert reported(podman_client, box.id) == f"3 {32 * KIB - 200} {32 * KIB - 2}"
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_podmands_own_paths_are_never_bind_sources(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, podman_socket: str, tmp_path: Path
) -> None:
    """With bind mounts enabled (and admission off), the state directory, its parents, the
    driver socket's directory and the Podman socket are refused, also through a symlink."""
    daemon = make_podmand({**DRIVER_CONFIG, "OPENSHELL_ENABLE_BIND_MOUNTS": "true",
                           "PODMAND_RESOURCE_ADMISSION": "false"})
    link = daemon.workdir / "innocent"
    link.symlink_to(daemon.state_dir)
    sources = [daemon.state_dir, daemon.state_dir / "sandboxes", daemon.workdir, Path("/"), link,
               Path(daemon.socket).parent, Path(podman_socket).parent]
    for source in sources:
        box = with_mounts({"type": "bind", "source": str(source), "target": "/data"})
        for call in (create(daemon, box), validate(daemon, box)):
            refused(call, grpc.StatusCode.FAILED_PRECONDITION,
                    "sandbox.spec.template.driver_config.mounts[0].source:", "would expose")
        nothing_created(daemon, podman_client, box.id)
    os.chmod(tmp_path, 0o755)
    validate(daemon, with_mounts({"type": "bind", "source": str(tmp_path), "target": "/data"}))()


BINDS = {**DRIVER_CONFIG, "OPENSHELL_ENABLE_BIND_MOUNTS": "true", "PODMAND_RESOURCE_ADMISSION": "false"}
PROXY_PEM = (Path(__file__).resolve().parents[1] / "data" / "proxytls" / "ca.pem").read_text()  # real X.509


def owned_file(path: Path, text: str) -> Path:
    """A file of podmand's user, 0600, in a directory of its own."""
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    for p in (path.parent, path):
        shutil.chown(p, USER, USER)
    path.chmod(0o600)
    return path


def test_operator_secrets_podmans_storage_and_registry_logins_are_never_bind_sources(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, tmp_path: Path
) -> None:
    """With bind mounts enabled (and admission off): the registry auth file, the proxy's
    credential and CA bundle, the rootfs staging directory, Podman's storage (graphRoot,
    runRoot, as its /info says) and the user's registry logins (auth.json where Podman
    keeps it, the containers config directory, Docker's config.json) are refused, named by
    what they are, and nothing is created."""
    daemon = make_podmand(BINDS, start=False)
    secrets = daemon.workdir / "operator"
    auth = owned_file(secrets / "auth.json", json.dumps({"auths": {"registry.example": {"auth": "dTpw"}}}))
    proxy_auth = owned_file(secrets / "proxy-auth", "corp-user:secret\n")
    proxy_ca = owned_file(secrets / "proxy-ca.pem", PROXY_PEM)
    staging = daemon.workdir / "staging"
    daemon.env.update({
        "PODMAND_REGISTRY_AUTH_FILE": str(auth),
        "OPENSHELL_SANDBOX_HTTPS_PROXY": "http://proxy.corp.example:3128",
        "OPENSHELL_SANDBOX_PROXY_AUTH_FILE": str(proxy_auth),
        "OPENSHELL_SANDBOX_PROXY_AUTH_ALLOW_INSECURE": "true",
        "OPENSHELL_SANDBOX_PROXY_CA_BUNDLE": str(proxy_ca),
        "PODMAND_ROOTFS_STAGING_DIR": str(staging),
    })
    daemon.start()
    store = podman_client.info()["store"]
    home, runtime = Path(daemon.env["HOME"]), Path(daemon.env["XDG_RUNTIME_DIR"])
    cases = [
        (auth, "the registry auth file (registry_auth_file)"),
        (proxy_auth, "the proxy credential file (proxy_auth_file)"),
        (proxy_ca, "the proxy CA bundle (proxy_ca_bundle)"),
        (staging, "the rootfs staging directory (rootfs_staging_dir)"),
        (Path(store["graphRoot"]), "Podman's storage (graphRoot)"),
        (Path(store["graphRoot"]) / "overlay", "Podman's storage (graphRoot)"),
        (Path(store["runRoot"]), "Podman's run root (runRoot)"),
        # Rootless Podman's run root is the runtime directory holding auth.json: either name is right.
        (runtime / "containers" / "auth.json", f"({runtime / 'containers'})"),
        (home / ".config" / "containers" / "auth.json", "Podman's containers config directory"),
        (home / ".config" / "containers", "Podman's containers config directory"),
        (home / ".docker" / "config.json", "Docker's registry auth file (~/.docker/config.json)"),
    ]
    for source, role in cases:
        box = with_mounts({"type": "bind", "source": str(source), "target": "/data"})
        for call in (create(daemon, box), validate(daemon, box)):
            refused(call, grpc.StatusCode.FAILED_PRECONDITION,
                    f"sandbox.spec.template.driver_config.mounts[0].source: {str(source)!r} would expose ", role)
        nothing_created(daemon, podman_client, box.id)
    os.chmod(tmp_path, 0o755)
    validate(daemon, with_mounts({"type": "bind", "source": str(tmp_path), "target": "/data"}))()


def test_start_rechecks_bind_sources_with_symlinks_resolved(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """Podman resolves a bind source again at every start: a source that was a symlink to a
    harmless directory at create, re-pointed at podmand's state directory while the sandbox
    was stopped, makes StartSandbox FAILED_PRECONDITION, and the container stays stopped.
    Pointed back, the same sandbox starts."""
    daemon = make_podmand(BINDS)
    scratch = Path(tempfile.mkdtemp(prefix="binds-", dir="/tmp"))
    try:
        harmless = scratch / "harmless"
        harmless.mkdir()
        (harmless / "hello").write_text("harmless\n")
        for p, mode in ((scratch, 0o755), (harmless, 0o755), (harmless / "hello", 0o644)):
            p.chmod(mode)
        link = scratch / "link"
        link.symlink_to(harmless)
        box = with_mounts({"type": "bind", "source": str(link), "target": "/data"})
        cleanup.append(box.id)
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        running(daemon, box.id)
        [container] = containers_of(podman_client, box.id)
        assert run_in(container, ["/bin/cat", "/data/hello"])[1] == "harmless\n"
        daemon.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))

        link.unlink()
        link.symlink_to(daemon.state_dir)
        refused(start(daemon, box.id), grpc.StatusCode.FAILED_PRECONDITION,
                f"bind mount '/data': {str(link)!r} would expose podmand's own state directory ({daemon.state_dir})")
        pair = pair_of(podman_client, box.id)
        assert len(pair) == 2 and not any(c.attrs["State"]["Running"] for c in pair)
        [container] = containers_of(podman_client, box.id)
        assert container.attrs["State"]["Status"] == "exited"

        link.unlink()
        link.symlink_to(harmless)
        start(daemon, box.id)()
        running(daemon, box.id)
        [container] = containers_of(podman_client, box.id)
        assert run_in(container, ["/bin/cat", "/data/hello"])[1] == "harmless\n"
        assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ---------------------------------------------------------------- environment


def test_environment_that_steers_root_never_reaches_the_supervisor(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """Loader, temp-dir, telemetry and TLS key-log variables, the caller's PATH and a locale
    naming a file, and ordinary names alike: none is in either container's Config.Env (the
    workload's is empty, so the runtime's root launcher sees none; the supervisor's holds
    podmand's variables only) nor in the running supervisor's environment; they travel to the
    supervisor only as OPENSHELL_USER_ENVIRONMENT's JSON (for SSH sessions), and to the main
    process, the caller's own, as its environment; the sandbox starts."""
    held = {"GCONV_PATH": "/sandbox/gconv", "TMPDIR": "/sandbox/tmp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.invalid:4317", "SSLKEYLOGFILE": "/sandbox/keys.log",
            "PATH": "/sandbox/bin:/usr/bin:/bin", "LANG": "/sandbox/locale/x"}
    caller = {**held, "APP_MODE": "prod", "LC_ALL": "C.UTF-8"}
    watch = driver.watch()
    box = sandbox(environment=caller, command=["/bin/sh", "-c", "env >/tmp/.env && mv /tmp/.env /tmp/env; "
                                                                  "exec /bin/sleep 600"])
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", timeout=60)
    cond = ready(driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox)
    assert cond is not None and cond.status == "True"
    [workload] = containers_of(podman_client, box.id)
    [supervisor] = containers_of(podman_client, box.id, "supervisor")
    workload_env = dict(item.split("=", 1) for item in workload.attrs["Config"]["Env"])
    assert not (caller.keys() - {"PATH"}) & workload_env.keys() and "PATH" not in workload_env
    config_env = dict(item.split("=", 1) for item in supervisor.attrs["Config"]["Env"])
    assert not (caller.keys() - {"PATH"}) & config_env.keys()
    assert config_env["PATH"] != held["PATH"]  # the supervisor image's
    assert json.loads(config_env["OPENSHELL_USER_ENVIRONMENT"]) == caller
    code, environ, _ = run_in(supervisor, ["cat", "/proc/1/environ"])
    running_env = dict(item.split("=", 1) for item in environ.split("\0") if "=" in item)
    assert code == 0 and running_env["OPENSHELL_SANDBOX_ID"] == box.id
    assert not (caller.keys() - {"PATH"}) & running_env.keys() and running_env["PATH"] != held["PATH"]
    main = dict(line.split("=", 1) for line in reported(podman_client, box.id, "/tmp/env").splitlines() if "=" in line)
    assert {k: main.get(k) for k in caller} == caller  # the caller's own process gets what it asked for
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
