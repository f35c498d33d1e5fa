"""Whether sandboxes reach the gateway, through the pex and real rootless Podman, split
topology: the supervisor dials the gateway from this host's network (its default endpoint
is http://127.0.0.1:<gateway_port>, and its host.containers.internal and
host.openshell.internal are 127.0.0.1 unless host_gateway_ip says otherwise). doctor's
'gateway reach' finding and fix for a real listener bound to 127.0.0.1, to 0.0.0.0, to
another address of this host only and to nothing; serve's start-up warning; and a
real supervisor container connecting out to prove the verdicts right from where the
supervisor dials (its workload, with no network, reaches none of them).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator

import podman

from podmand._proto import compute_driver_pb2 as pb
from podmand.host import netfacts
from tests.e2e.conftest import Podmand, containers_of, run_in, sandbox
from tests.wait import wait_until

GREETING = "podmand-test-gateway\n"
HOST_NAME = "host.openshell.internal"  # the supervisor's /etc/hosts entry (podmand's)


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


def primary() -> str:
    """An IPv4 address of this host other than loopback (where a gateway bound to it alone
    listens, which a supervisor dialling 127.0.0.1 does not reach)."""
    found = [a for a in netfacts.host_addresses()
             if ipaddress.ip_address(a).version == 4 and not ipaddress.ip_address(a).is_loopback]
    assert found, "no IPv4 address on this host but loopback"
    return found[0]


def test_doctor_finds_each_listener_and_says_the_fix(make_podmand: Callable[..., Podmand]) -> None:
    daemon = make_podmand(start=False)
    host = primary()

    def seen(port: int) -> str:
        return f"supervisors dial http://127.0.0.1:{port} from this host's network; "

    for address in ("0.0.0.0", "127.0.0.1"):  # upstream's default bind (127.0.0.1) is enough now
        with listening(address) as port:
            ok = reach(daemon, OPENSHELL_GATEWAY_PORT=str(port))
            assert ok == {"name": "gateway reach", "status": "OK", "fix": "",
                          "finding": f"{seen(port)}something listens on {address}:{port}: reachable"}, ok
            # the host-gateway names are 127.0.0.1 in the supervisor, and doctor judges them so
            named = reach(daemon, OPENSHELL_GRPC_ENDPOINT=f"http://{HOST_NAME}:{port}")
            daemon.env.pop("OPENSHELL_GRPC_ENDPOINT")
            assert named["status"] == "OK" and named["finding"].endswith(
                f"something listens on {address}:{port}: reachable"), named
    with listening(host) as port:
        only = reach(daemon, OPENSHELL_GATEWAY_PORT=str(port))
        assert only["status"] == "WARN" and only["finding"] == (
            f"{seen(port)}the gateway listens on {host}:{port} only, which a sandbox's connection to "
            f"127.0.0.1:{port} does not reach"), only
        assert only["fix"] == f"start the gateway listening on 127.0.0.1:{port}, or --bind-address 127.0.0.1"
    with listening("") as port:
        none = reach(daemon, OPENSHELL_GATEWAY_PORT=str(port))
        assert none["status"] == "WARN", none
        assert none["finding"] == f"{seen(port)}nothing listens on port {port} of this host"
        assert none["fix"].startswith(f"start the gateway there with --port {port}, or set gateway_port")


def reach_verdict(daemon: Podmand) -> str:
    """serve's gateway-reach line, logged once it serves (a warning, or at debug level that
    there is none)."""
    def verdict() -> str:
        return next((x for x in daemon.logs().splitlines()
                     if "sandboxes may not reach the gateway" in x or "gateway reach checked" in x), "")
    return str(wait_until(verdict, what="serve's gateway-reach check", detail=daemon.logs))


def test_the_verdicts_hold_from_a_real_supervisor(
        make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """The 0.0.0.0 and 127.0.0.1 listeners doctor calls reachable answer a supervisor container,
    by address and by its host-gateway name; the one bound to another address of this host
    alone, which doctor warns about, refuses it at 127.0.0.1; the workload reaches none; serve
    warns at start-up for the last and not for the others."""
    host = primary()
    with listening("0.0.0.0") as open_port, listening("127.0.0.1") as loop_port, listening(host) as host_port:
        daemon = make_podmand({"OPENSHELL_GATEWAY_PORT": str(loop_port)})
        assert "sandboxes may not reach the gateway" not in reach_verdict(daemon)
        watch = daemon.watch()
        box = sandbox()
        cleanup.append(box.id)
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        watch.wait_reason(box.id, "ContainerRunning", timeout=60)
        [workload] = containers_of(podman_client, box.id)
        [supervisor] = containers_of(podman_client, box.id, "supervisor")
        env = dict(item.split("=", 1) for item in supervisor.attrs["Config"]["Env"])
        assert env["OPENSHELL_ENDPOINT"] == f"http://127.0.0.1:{loop_port}"
        for target in ("127.0.0.1", HOST_NAME, "host.containers.internal"):
            for port in (open_port, loop_port):
                code, out, err = run_in(supervisor, ["nc", "-w", "5", target, str(port)])
                assert (code, out) == (0, GREETING), (target, port, code, out, err)
        code, out, err = run_in(supervisor, ["nc", "-w", "5", "127.0.0.1", str(host_port)])
        assert code != 0 and out == "" and "Connection refused" in err, (code, out, err)
        for port in (open_port, loop_port):
            dial = ["/usr/bin/python3", "-c", f"import socket; socket.create_connection(('{host}', {port}), 5)"]
            code, _, err = run_in(workload, dial)
            assert code != 0 and "Network is unreachable" in err, (port, err)
        assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted

        opened = make_podmand({"OPENSHELL_GATEWAY_PORT": str(open_port)})
        assert "sandboxes may not reach the gateway" not in reach_verdict(opened)
        warned = make_podmand({"OPENSHELL_GATEWAY_PORT": str(host_port)})
        reach_verdict(warned)
        [line] = [x for x in warned.logs().splitlines() if "sandboxes may not reach the gateway" in x]
        assert f"the gateway listens on {host}:{host_port} only" in line, line
        assert f"start the gateway listening on 127.0.0.1:{host_port}" in line, line
