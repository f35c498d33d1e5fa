"""The pex as a drop-in for upstream's standalone driver, started the way upstream's
``e2e/with-podman-gateway.sh`` starts ``openshell-driver-podman``: ``env -i`` with the
launcher's variables and no arguments at all.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from tests.standin.launch import Launch

from .conftest import (
    RUNTIME_IMAGE,
    SANDBOX_IMAGE,
    SUPERVISOR_IMAGE,
    USER,
    Podmand,
    Watch,
    containers_of,
    gateway_metadata,
    pair_of,
    ready,
    sandbox,
    wait_until,
)

READY_DEADLINE = 90.0  # the launcher's health-check interval (10 s) gates Ready


def free_port() -> int:
    """What the launcher's e2e_pick_port does: a port nobody listens on (no gateway here)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def make_pki(directory: Path) -> dict[str, str]:
    """A CA and a client certificate, laid out as the gateway's generate-certs does
    (ca.crt, client/tls.crt, client/tls.key), readable by the rootless user."""
    (directory / "client").mkdir(parents=True)
    ca_key, ca, key, csr, cert = (directory / n for n in ("ca.key", "ca.crt", "client/tls.key", "client.csr",
                                                          "client/tls.crt"))

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-subj", "/CN=e2e-ca", "-days", "1")
    openssl("req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=openshell-client")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(cert), "-days", "1")
    for path in (directory, directory / "client", *directory.rglob("*")):
        shutil.chown(path, USER, USER)
    return {"OPENSHELL_PODMAN_TLS_CA": str(ca), "OPENSHELL_PODMAN_TLS_CERT": str(cert),
            "OPENSHELL_PODMAN_TLS_KEY": str(key)}


@pytest.fixture
def e2e_network(podman_client: podman.PodmanClient) -> Iterator[str]:
    """The launcher's ensure_e2e_podman_network: a bridge network it creates, named by
    OPENSHELL_NETWORK_NAME, which the driver joins by that literal name."""
    namespace = f"e2e-podman-{os.getpid()}-{free_port()}"
    network = podman_client.networks.create(
        namespace,
        driver="bridge",
        labels={"openshell.managed": "true", "openshell.ai/sandbox-namespace": namespace},
    )
    yield namespace
    with contextlib.suppress(podman.errors.NotFound):
        network.remove(force=True)


def launcher_env(
    daemon: Podmand, podman_socket: str, network: str, podman_client: podman.PodmanClient
) -> dict[str, str]:
    """The environment with-podman-gateway.sh gives its external driver (schema v2 defaults)."""
    port = free_port()
    # The launcher pins the supervisor by its local manifest digest.
    digest = podman_client.images.get(SUPERVISOR_IMAGE).attrs["Digest"]
    return {
        "XDG_DATA_HOME": str(daemon.workdir / "driver-data"),
        "OPENSHELL_COMPUTE_DRIVER_SOCKET": daemon.socket,
        "OPENSHELL_PODMAN_SOCKET": podman_socket,
        "OPENSHELL_SANDBOX_IMAGE": SANDBOX_IMAGE,
        "OPENSHELL_SANDBOX_IMAGE_PULL_POLICY": "if_not_present",
        "OPENSHELL_HEALTH_CHECK_INTERVAL_SECS": "10",
        "OPENSHELL_GRPC_ENDPOINT": f"https://127.0.0.1:{port}",
        "OPENSHELL_GATEWAY_PORT": str(port),
        "OPENSHELL_NETWORK_NAME": network,
        "OPENSHELL_STOP_TIMEOUT": "15",
        # the launcher's runtime image is openshell/sandbox:dev, which this machine has not:
        # the stand-in runtime stands in for it, under the launcher's variable
        "OPENSHELL_SANDBOX_RUNTIME_IMAGE": RUNTIME_IMAGE,
        "OPENSHELL_SUPERVISOR_IMAGE": f"{SUPERVISOR_IMAGE.rsplit(':', 1)[0]}@{digest}",
        **make_pki(daemon.workdir / "pki"),
        "OPENSHELL_ENABLE_BIND_MOUNTS": "true",
        # Not the launcher's: it isolates its driver through XDG_DATA_HOME, which podmand does
        # not use; this keeps the run's state apart (and lets Podmand.stop find the process).
        "PODMAND_STATE_DIR": str(daemon.state_dir),
    }


@pytest.fixture
def launched(
    make_podmand: Callable[..., Podmand], podman_socket: str, e2e_network: str, podman_client: podman.PodmanClient
) -> Podmand:
    daemon = make_podmand(start=False)
    daemon.env = launcher_env(daemon, podman_socket, e2e_network, podman_client)
    return daemon.start(args=())


def latest_ready(watch: Watch, sandbox_id: str) -> str:
    snap = watch.latest(sandbox_id)
    cond = ready(snap) if snap else None
    return cond.status if cond else ""


def networks_of(client: podman.PodmanClient, container_id: str) -> set[str]:
    return set(client.containers.get(container_id).attrs["NetworkSettings"]["Networks"])


def test_launcher_lifecycle_in_default_workspace(
    launched: Podmand, e2e_network: str, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """No arguments, upstream's environment only: capabilities, create in workspace
    ``default``, Ready, stop, start with a fresh bundle, delete. The pair joins no network,
    the launcher's included: the workload has none, its supervisor the host's, and the
    supervisor (not the workload) gets the launcher's gateway endpoint and TLS material."""
    assert "unknown environment variables" not in launched.logs()  # every launcher variable is known
    assert "ignores the TLS files" not in launched.logs()  # https endpoint with TLS files: consistent
    caps = launched.stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
    assert caps.driver_name and caps.default_image == SANDBOX_IMAGE

    watch = launched.watch()
    box = sandbox(workspace="default")
    cleanup.append(box.id)
    launched.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    wait_until(lambda: latest_ready(watch, box.id) == "True", READY_DEADLINE,
               f"{box.id} Ready; last: {watch.latest(box.id)}")

    [container] = containers_of(podman_client, box.id)
    [supervisor] = containers_of(podman_client, box.id, "supervisor")
    assert container.attrs["HostConfig"]["NetworkMode"] == "none"
    assert supervisor.attrs["HostConfig"]["NetworkMode"] == "host"
    assert e2e_network not in networks_of(podman_client, container.id) | networks_of(podman_client, supervisor.id)
    names = {n.name for n in podman_client.networks.list()}
    assert f"{e2e_network}-default" not in names
    workload_env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"] or [] if "=" in e)
    assert not [k for k in workload_env if k.startswith("OPENSHELL_")]
    env = dict(e.split("=", 1) for e in supervisor.attrs["Config"]["Env"])
    assert env["OPENSHELL_ENDPOINT"] == launched.env["OPENSHELL_GRPC_ENDPOINT"]
    assert env["OPENSHELL_TLS_CA"]

    launched.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id, name=box.name))
    assert podman_client.containers.get(container.id).status == "exited"
    assert podman_client.containers.get(supervisor.id).status == "exited"
    wait_until(lambda: latest_ready(watch, box.id) == "False", what=f"{box.id} Ready=False after stop")

    launched.stub.StartSandbox(pb.StartSandboxRequest(
        sandbox_id=box.id, name=box.name, launch_authentication=Launch(sandbox_id=box.id).bundle()))
    wait_until(lambda: latest_ready(watch, box.id) == "True", READY_DEADLINE,
               f"{box.id} Ready again; last: {watch.latest(box.id)}")
    [again] = containers_of(podman_client, box.id)
    assert again.id == container.id and again.attrs["State"]["Status"] == "running"

    assert launched.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted is True
    wait_until(lambda: watch.deleted(box.id), what="Deleted event")
    assert pair_of(podman_client, box.id) == []
    # The launcher's network is its own: podmand leaves it in place.
    assert e2e_network in {n.name for n in podman_client.networks.list()}
    watch.cancel()


def test_second_podmand_on_same_state_dir_exits_naming_the_first(
    make_podmand: Callable[..., Podmand], podman_socket: str, e2e_network: str, podman_client: podman.PodmanClient
) -> None:
    """One podmand per state directory: the second exits 1 naming the first's PID and socket.
    The first's one start-up warning names unknown OPENSHELL_* variables, never their values."""
    first = make_podmand(start=False)
    first.env = launcher_env(first, podman_socket, e2e_network, podman_client)
    first.env.update(OPENSHELL_BOGUS_SETTING="hidden-value", OPENSHELL_ANOTHER_TYPO="x")
    first.start(args=())
    warnings = [line for line in first.logs().splitlines() if "unknown environment variables" in line]
    assert len(warnings) == 1 and "OPENSHELL_ANOTHER_TYPO, OPENSHELL_BOGUS_SETTING" in warnings[0]
    assert "hidden-value" not in first.logs()

    second = make_podmand(start=False)
    second.state_dir = first.state_dir  # also how Podmand.stop finds its process
    second.env = {**first.env, "OPENSHELL_COMPUTE_DRIVER_SOCKET": second.socket}
    pids = first.pids()
    result = subprocess.run(second.command(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "in use by another podmand" in result.stderr
    assert any(f"PID {pid}," in result.stderr for pid in pids), (pids, result.stderr)
    assert first.socket in result.stderr
    assert not os.path.exists(second.socket)
    first.stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=5)  # the first is unaffected

    # Once the first is gone (even killed), the state directory is free again.
    first.stop(signal.SIGKILL)
    second.start(args=())
    assert "ready: serving" in second.logs()
