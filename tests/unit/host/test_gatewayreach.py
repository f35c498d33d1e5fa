"""Unit tests for podmand.host.gatewayreach (the decision, from injected facts) and the
parsers of podmand.host.netfacts (from /proc texts in the kernel's formats). The facts
of each case are the ones measured on Podman 4.3.1 (slirp4netns) and 5.4.2 (pasta):
tests/e2e/test_reach.py proves the verdicts from inside real sandboxes."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
import pytest

from podmand.config import Settings
from podmand.host import gatewayreach, netfacts
from podmand.host.gatewayreach import Facts, Listener, decide
from podmand.libpod import Info
from tests.fakes import infos

HOST = "192.0.2.2"
SLIRP = Facts(endpoint="http://host.containers.internal:17670", host_gateway_ip="", rootless=True,
              network_cmd="slirp4netns", sandbox_address=HOST, asked=True,
              host_addresses=("127.0.0.1", HOST, "::1"), default_addresses=(HOST,), listeners=())
PASTA = dataclasses.replace(SLIRP, network_cmd="pasta", sandbox_address="169.254.1.2")
BIND_FIX = "start the gateway with --bind-address 0.0.0.0 (OPENSHELL_BIND_ADDRESS)"


def on(*listening: tuple[str, int]) -> tuple[Listener, ...]:
    return tuple(Listener(a, p) for a, p in listening)


@pytest.mark.parametrize("base", [SLIRP, PASTA], ids=["slirp4netns", "pasta"])
def test_a_wildcard_listener_is_reachable(base: Facts) -> None:
    for wildcard in ("0.0.0.0", "::"):
        found = decide(dataclasses.replace(base, listeners=on((wildcard, 17670), ("127.0.0.1", 9))))
        assert found.status == "OK" and found.finding.endswith(f"listens on {gatewayreach._join(wildcard, 17670)}: "
                                                               "reachable"), found
    direct = decide(dataclasses.replace(base, listeners=on((HOST, 17670))))
    assert direct.status == "OK", direct


@pytest.mark.parametrize("base", [SLIRP, PASTA], ids=["slirp4netns", "pasta"])
def test_a_loopback_only_gateway_is_not_reached(base: Facts) -> None:
    """Upstream's gateway default (127.0.0.1): a sandbox's connection lands on the host's address."""
    found = decide(dataclasses.replace(base, listeners=on(("127.0.0.1", 17670), ("::1", 17670))))
    assert found.status == "WARN"
    assert found.finding.endswith(f"the gateway listens on 127.0.0.1:17670, [::1]:17670 only, which a sandbox's "
                                  f"connection to {HOST}:17670 does not reach")
    assert found.fix == f"{BIND_FIX}, or --bind-address {HOST}"
    if base is PASTA:
        assert f"which pasta maps to this host's default-interface address {HOST}, never to loopback " \
               "(containers/podman#28718)" in found.finding


def test_a_port_nothing_listens_on() -> None:
    found = decide(dataclasses.replace(SLIRP, listeners=on(("0.0.0.0", 22))))
    assert found.status == "WARN" and found.finding.endswith("nothing listens on port 17670 of this host")
    assert found.fix.startswith("start the gateway there with --port 17670 and --bind-address 0.0.0.0")
    assert "gateway_port (--gateway-port / OPENSHELL_GATEWAY_PORT)" in found.fix


def test_a_host_gateway_ip_no_interface_has() -> None:
    found = decide(dataclasses.replace(SLIRP, host_gateway_ip="198.51.100.7", sandbox_address="198.51.100.7"))
    assert found.status == "WARN" and found.finding.endswith("but no interface of this host has 198.51.100.7")
    assert found.fix == ("set host_gateway_ip (--host-gateway-ip / OPENSHELL_PODMAN_HOST_GATEWAY_IP) to an address "
                         f"of this host ({HOST}), or unset it")


def test_pasta_copies_the_default_interfaces_address_into_the_namespace() -> None:
    """Measured on 5.4.2: a sandbox dialling 192.0.2.2 (the host's only address) is refused
    even with the gateway on 0.0.0.0."""
    found = decide(dataclasses.replace(PASTA, host_gateway_ip=HOST, sandbox_address=HOST,
                                       listeners=on(("0.0.0.0", 17670))))
    assert found.status == "WARN" and "which pasta copies into the rootless network namespace" in found.finding
    assert "unset host_gateway_ip" in found.fix
    slirp = decide(dataclasses.replace(SLIRP, host_gateway_ip=HOST, listeners=on(("0.0.0.0", 17670))))
    assert slirp.status == "OK"  # slirp4netns dials it from the host's namespace


@pytest.mark.parametrize(("endpoint", "address"), [("http://127.0.0.1:17670", "127.0.0.1"),
                                                   ("https://localhost:17670", "127.0.0.1"),
                                                   ("http://host.containers.internal:17670", "127.0.0.1")])
def test_loopback_is_the_sandbox_itself(endpoint: str, address: str) -> None:
    found = decide(dataclasses.replace(SLIRP, endpoint=endpoint, sandbox_address=address,
                                       listeners=on(("0.0.0.0", 17670))))
    assert found.status == "WARN" and "the sandbox itself" in found.finding


def test_unknown_or_elsewhere_is_not_judged() -> None:
    assert decide(dataclasses.replace(SLIRP, sandbox_address="")).status == "OK"
    elsewhere = decide(dataclasses.replace(SLIRP, endpoint="https://gw.corp:443", sandbox_address="203.0.113.9"))
    assert elsewhere.status == "OK" and "the gateway is elsewhere" in elsewhere.finding
    unread = decide(dataclasses.replace(SLIRP, listeners=None))
    assert unread.status == "OK" and "cannot be read" in unread.finding


def test_host_port_defaults_by_scheme() -> None:
    assert gatewayreach.host_port("https://gw:443") == ("gw", 443)
    assert gatewayreach.host_port("https://gw") == ("gw", 443)
    assert gatewayreach.host_port("http://[fd00::1]") == ("fd00::1", 80)


# ---------------------------------------------------------------- netfacts' parsers and guess

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:44D2 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1578 1 0
   1: 0100007F:B7A3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 47846 1 0
   2: 0200000A:0016 0300000A:D431 01 00000000:00000000 00:00000000 00000000     0        0 47847 1 0
"""
TCP6 = """  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:44D3 00000000000000000000000000000000:0000 0A 0
   1: 00000000000000000000000001000000:44D4 00000000000000000000000000000000:0000 0A 0
   2: 0000000000000000FFFF00000200000A:44D5 00000000000000000000000000000000:0000 0A 0
"""


def test_proc_net_tcp_listeners() -> None:
    assert netfacts.parse_tcp(TCP, False) == [Listener("0.0.0.0", 17618), Listener("127.0.0.1", 47011)]
    assert netfacts.parse_tcp(TCP6, True) == [Listener("::", 17619), Listener("::1", 17620),
                                              Listener("10.0.0.2", 17621)]


def test_addresses_and_default_interface() -> None:
    trie = """Main:
  +-- 0.0.0.0/0 3 0 5
     +-- 127.0.0.0/8 2 0 2
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
           |-- 192.0.2.0
              /24 link UNICAST
           |-- 192.0.2.2
              /32 host LOCAL
Local:
           |-- 192.0.2.2
              /32 host LOCAL
"""
    assert netfacts.parse_fib_trie(trie) == ["127.0.0.1", "192.0.2.2"]
    assert netfacts.parse_if_inet6("fd000000000000000000000000000002 04 40 00 82     eth0\n") == ["fd00::2"]
    route = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n"
             "wlan0\t00000000\t010200C0\t0003\t0\t0\t600\t00000000\n"
             "eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\n"
             "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\n")
    assert netfacts.default_interface(route) == "eth0"
    assert netfacts.hosts_entry("127.0.0.1 localhost\n169.254.1.2\thost.containers.internal host.docker.internal\n",
                                "host.containers.internal") == "169.254.1.2"


@pytest.mark.parametrize(("recorded", "expected"), [
    (infos.ARCH_ROOTLESS_5_1, "pasta"), (infos.FEDORA40_ROOTLESS_DELEGATED, "pasta"),
    (infos.DEBIAN12_ROOTLESS_V1, "slirp4netns"), (infos.ROOTFUL_V1, ""),
])
def test_network_cmd_from_info_or_the_releases_default(recorded: dict[str, Any], expected: str) -> None:
    """/info says since 5.1; 5.0 defaults to pasta, 4.x to slirp4netns; rootful has none."""
    assert netfacts.network_cmd(msgspec.convert(recorded, Info)) == expected


def test_guess_is_the_supervisors_own_hosts_entry() -> None:
    """The host-gateway names are what pair.specs writes into the supervisor's /etc/hosts, on
    the host's network, whatever Podman's networks would say: host_gateway_ip, else loopback."""
    for name in ("host.containers.internal", "host.openshell.internal"):
        assert netfacts.guess(Settings(), name) == "127.0.0.1"
        assert netfacts.guess(Settings(host_gateway_ip=HOST), name) == HOST
    assert netfacts.guess(Settings(), "localhost") in ("127.0.0.1", "::1")  # others: this host's resolver


SPLIT = dataclasses.replace(SLIRP, endpoint="http://127.0.0.1:17670", sandbox_address="127.0.0.1", asked=False,
                            host_network=True)


def test_the_supervisor_dials_from_this_hosts_network() -> None:
    """Its default endpoint is loopback, which upstream's gateway default (127.0.0.1) serves;
    a wildcard does too; nothing on the port is a WARN whose fix needs no --bind-address."""
    assert Settings().endpoint == "http://127.0.0.1:17670"
    assert Settings(grpc_endpoint="https://gw:1").endpoint == "https://gw:1"
    for listening in (("127.0.0.1", 17670), ("0.0.0.0", 17670)):
        found = decide(dataclasses.replace(SPLIT, listeners=on(listening)))
        assert found.status == "OK" and found.finding.startswith(
            "supervisors dial http://127.0.0.1:17670 from this host's network") and "reachable" in found.finding
    nothing = decide(dataclasses.replace(SPLIT, listeners=on(("0.0.0.0", 22))))
    assert nothing.status == "WARN" and "nothing listens on port 17670" in nothing.finding
    assert nothing.fix.startswith("start the gateway there with --port 17670, or set") and "bind" not in nothing.fix
    only_host = decide(dataclasses.replace(SPLIT, listeners=on((HOST, 17670))))
    assert only_host.status == "WARN" and "listens on 192.0.2.2:17670 only" in only_host.finding
    elsewhere = decide(dataclasses.replace(SPLIT, endpoint="http://198.51.100.7:17670",
                                           sandbox_address="198.51.100.7"))
    assert elsewhere.status == "OK" and "not an address of this host" in elsewhere.finding
