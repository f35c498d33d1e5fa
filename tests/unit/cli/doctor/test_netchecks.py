"""Unit tests for podmand.cli.doctor.netchecks: its gateway reach from this host's real
listeners, without Podman; its proxy check and netfacts.proxy_handshake, against a real TLS
listener on loopback with the test CA (tests/data/proxytls)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from podmand.cli.doctor.netchecks import check_proxy, checks
from podmand.config import Settings
from podmand.host import netfacts

TLS = Path(__file__).resolve().parents[3] / "data" / "proxytls"


@pytest.fixture
def tls_port() -> Iterator[int]:
    """A TLS server on 127.0.0.1 presenting the proxy certificate the test CA signed."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(TLS / "proxy.pem", TLS / "proxy.key")
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                try:
                    with ctx.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(1)
                except (ssl.SSLError, OSError):
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    server.shutdown(socket.SHUT_RDWR)  # wakes the accept()
    server.close()
    thread.join(5)


def test_https_proxy_verified_with_the_bundle(tls_port: int, tmp_path: Path) -> None:
    url = f"https://127.0.0.1:{tls_port}"
    assert netfacts.proxy_handshake(url, str(TLS / "ca.pem")) == ""
    mixed = tmp_path / "mixed.pem"  # a block that is no certificate is skipped, as at start
    mixed.write_bytes(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n" + (TLS / "ca.pem").read_bytes())
    assert netfacts.proxy_handshake(url, str(mixed)) == ""
    ok = check_proxy(url, str(TLS / "ca.pem"), True, "")
    assert ok.status == "OK" and "verified against the system roots and proxy_ca_bundle" in ok.finding
    assert "credential travels inside that TLS session" in ok.finding


def test_https_proxy_with_the_wrong_ca_fails(tls_port: int) -> None:
    url = f"https://localhost:{tls_port}"
    for bundle in (str(TLS / "other-ca.pem"), ""):
        problem = netfacts.proxy_handshake(url, bundle)
        assert problem.startswith(f"TLS handshake with localhost:{tls_port} failed: unable to get local issuer"), \
            problem
        c = check_proxy(url, bundle or None, False, problem)
        assert c.status == "FAIL" and "proxy_ca_bundle (--sandbox-proxy-ca-bundle" in c.fix


def test_proxy_that_refuses_connections_warns() -> None:
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
    problem = netfacts.proxy_handshake(f"http://127.0.0.1:{port}", "")
    assert problem == f"cannot connect to 127.0.0.1:{port}: Connection refused"
    c = check_proxy(f"http://127.0.0.1:{port}", None, False, problem)
    assert c.status == "WARN" and c.finding.endswith("(from this host)")
    assert check_proxy(None, None, False, "").status == "OK"


def test_gateway_reach_reads_this_hosts_listeners_without_podman(monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor dials from this host's network: doctor judges a real 127.0.0.1
    listener from /proc/net, and nothing on the port once it is closed, asking no Podman.
    (This host's addresses are given: a test run with no network has loopback only.)"""
    monkeypatch.setattr(netfacts, "host_addresses", lambda: ["127.0.0.1", "192.0.2.2"])
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        reach, proxied = asyncio.run(checks(Settings(gateway_port=port)))
    assert (reach.name, reach.status, proxied.name) == ("gateway reach", "OK", "corporate proxy"), reach
    assert reach.finding == (f"supervisors dial http://127.0.0.1:{port} from this host's network; something "
                             f"listens on 127.0.0.1:{port}: reachable")
    reach, _ = asyncio.run(checks(Settings(gateway_port=port)))
    assert reach.status == "WARN" and reach.finding.endswith(f"nothing listens on port {port} of this host"), reach
