"""Whether sandboxes reach the gateway, through the pex and real rootless Podman: doctor's
'gateway reach' finding and fix for a real listener bound to 127.0.0.1, to 0.0.0.0 and to
nothing (and for a host_gateway_ip no interface has), serve's start-up warning, and a real
sandbox connecting out to prove the verdicts right from inside.

Podman 4.3.1 (slirp4netns) gives host.containers.internal this host's address; 5.4.2
(pasta) gives 169.254.1.2, mapped to this host's default-interface address: either way a
connection lands on that address, never on loopback.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator

import podman

from podmand._proto import compute_driver_pb2 as pb
from podmand.host import netfacts
from tests.e2e.conftest import Podmand, containers_of, podman_version, run_in, sandbox
from tests.wait import wait_until

GREETING = "podmand-test-gateway\n"
BIND_FIX = "start the gateway with --bind-address 0.0.0.0 (OPENSHELL_BIND_ADDRESS)"


def serving(server: socket.socket, handle: Callable[[socket.socket], None]) -> threading.Thread:
    """A thread handing each connection ``server`` accepts to ``handle`` (closing it after),
    until the socket is shut down."""

    def loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                handle(conn)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def listening(address: str) -> Iterator[int]:
    """A TCP listener on ``address`` (a free port) greeting each connection; "" binds nothing
    and yields a port nothing listens on."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address or "127.0.0.1", 0))
    port = server.getsockname()[1]
    if not address:
        server.close()
        yield port
        return
    server.listen()
    thread = serving(server, lambda conn: conn.sendall(GREETING.encode()))
    try:
        yield port
    finally:
        server.shutdown(socket.SHUT_RDWR)
        server.close()
        thread.join(5)


def reach(daemon: Podmand, **env: str) -> dict[str, str]:
    daemon.env.update(env)
    proc = subprocess.run(daemon.command("doctor", "--json"), capture_output=True, text=True, timeout=120)
    [check] = [c for c in json.loads(proc.stdout) if c["name"] == "gateway reach"]
    return check


def landing(client: podman.PodmanClient) -> tuple[str, str]:
    """(host.containers.internal in a sandbox, where its connections land on this host)."""
    _, primary = netfacts.host_addresses()
    return ("169.254.1.2" if podman_version(client) >= (5, 3) else primary[0]), primary[0]


def test_doctor_finds_each_listener_and_says_the_fix(
        make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient) -> None:
    daemon = make_podmand(start=False)
    inside, host = landing(podman_client)
    seen = f"host.containers.internal is {inside} there (Podman gives it)"
    with listening("0.0.0.0") as port:
        ok = reach(daemon, OPENSHELL_GATEWAY_PORT=str(port))
        assert ok["status"] == "OK" and seen in ok["finding"], ok
        assert ok["finding"].endswith(f"something listens on 0.0.0.0:{port}: reachable"), ok
    with listening("127.0.0.1") as port:
        loop = reach(daemon, OPENSHELL_GATEWAY_PORT=str(port))
        assert loop["status"] == "WARN" and seen in loop["finding"], loop
        assert loop["finding"].endswith(f"the gateway listens on 127.0.0.1:{port} only, which a sandbox's "
                                        f"connection to {host}:{port} does not reach"), loop
        assert loop["fix"] == f"{BIND_FIX}, or --bind-address {host}"
    with listening("") as port:
        none = reach(daemon, OPENSHELL_GATEWAY_PORT=str(port))
        assert none["status"] == "WARN" and none["finding"].endswith(f"nothing listens on port {port} of this host")
        assert none["fix"].startswith(f"start the gateway there with --port {port} and --bind-address 0.0.0.0")
    stray = reach(daemon, OPENSHELL_PODMAN_HOST_GATEWAY_IP="198.51.100.7")
    assert stray["status"] == "WARN", stray
    assert stray["finding"].endswith("host.containers.internal is 198.51.100.7 there (Podman gives it), but no "
                                     "interface of this host has 198.51.100.7")
    assert stray["fix"].startswith("set host_gateway_ip (--host-gateway-ip / OPENSHELL_PODMAN_HOST_GATEWAY_IP) to an "
                                   f"address of this host ({host}")
    assert podman_client.containers.list(all=True, filters={"name": "podmand-read-reach-"}) == []


def reach_verdict(daemon: Podmand) -> str:
    """serve's gateway-reach line, logged once it serves (a warning, or at debug level that
    there is none)."""
    def verdict() -> str:
        return next((x for x in daemon.logs().splitlines()
                     if "sandboxes may not reach the gateway" in x or "gateway reach checked" in x), "")
    return str(wait_until(verdict, what="serve's gateway-reach check", detail=daemon.logs))


def test_the_verdicts_hold_inside_a_real_sandbox(
        make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """The 0.0.0.0 listener doctor calls reachable answers a sandbox; the 127.0.0.1 one it warns
    about refuses it; serve warns at start-up for the second and not for the first."""
    with listening("0.0.0.0") as open_port, listening("127.0.0.1") as loop_port:
        daemon = make_podmand({"OPENSHELL_GATEWAY_PORT": str(open_port)})
        assert "sandboxes may not reach the gateway" not in reach_verdict(daemon)
        watch = daemon.watch()
        box = sandbox()
        cleanup.append(box.id)
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        watch.wait_reason(box.id, "ContainerRunning")
        [container] = containers_of(podman_client, box.id)
        dial = ["nc", "-w", "5", "host.containers.internal"]
        code, out, err = run_in(container, [*dial, str(open_port)])
        assert (code, out) == (0, GREETING), (code, out, err)
        code, out, err = run_in(container, [*dial, str(loop_port)])
        assert code != 0 and out == "" and "Connection refused" in err, (code, out, err)
        assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted

        warned = make_podmand({"OPENSHELL_GATEWAY_PORT": str(loop_port)})
        reach_verdict(warned)
        [line] = [x for x in warned.logs().splitlines() if "sandboxes may not reach the gateway" in x]
        assert f"the gateway listens on 127.0.0.1:{loop_port} only" in line and BIND_FIX in line, line
