"""Unit tests for podmand.host.gatewayreach (the decision, from injected facts) and
podmand.host.netfacts (its /proc parsers from texts in the kernel's formats, and the facts
it gathers from a /proc/net of the test's own). The supervisor dials the gateway from this
host's network: tests/e2e/test_reach.py proves the verdicts from a real supervisor."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from podmand.config import Settings
from podmand.host import gatewayreach, netfacts
from podmand.host.gatewayreach import Facts, Listener, decide

HOST = "192.0.2.2"  # this host's one non-loopback address in these facts
OTHER = "198.51.100.7"  # an address this host does not have
PORT_FIX = "gateway_port (--gateway-port / OPENSHELL_GATEWAY_PORT)"
LOOP = Facts(endpoint="http://127.0.0.1:17670", address="127.0.0.1", host_addresses=("127.0.0.1", HOST, "::1"),
             listeners=())
SEEN = "supervisors dial http://127.0.0.1:17670 from this host's network; "


def on(*listening: tuple[str, int]) -> tuple[Listener, ...]:
    return tuple(Listener(a, p) for a, p in listening)


def named(host: str, address: str, listeners: tuple[Listener, ...] = ()) -> Facts:
    """Facts for an endpoint naming ``host``, which is ``address`` on this host's network."""
    return dataclasses.replace(LOOP, endpoint=f"http://{host}:17670", address=address, listeners=listeners)


@pytest.mark.parametrize("listening", ["127.0.0.1", "0.0.0.0", "::"])
def test_a_loopback_endpoint_reaches_a_loopback_or_wildcard_listener(listening: str) -> None:
    """Upstream's gateway default (127.0.0.1) serves the supervisor: loopback is this host."""
    found = decide(dataclasses.replace(LOOP, listeners=on((listening, 17670), (HOST, 9))))
    assert found == gatewayreach.Finding(
        "OK", f"{SEEN}something listens on {gatewayreach._join(listening, 17670)}: reachable")


def test_a_loopback_endpoint_misses_a_gateway_on_another_address_only() -> None:
    found = decide(dataclasses.replace(LOOP, listeners=on((HOST, 17670), ("127.0.0.1", 9))))
    assert found.status == "WARN"
    assert found.finding == (f"{SEEN}the gateway listens on {HOST}:17670 only, which a sandbox's connection to "
                             "127.0.0.1:17670 does not reach")
    assert found.fix == "start the gateway listening on 127.0.0.1:17670, or --bind-address 127.0.0.1"


def test_a_port_nothing_listens_on_needs_no_bind_address() -> None:
    found = decide(dataclasses.replace(LOOP, listeners=on(("0.0.0.0", 22), ("127.0.0.1", 9))))
    assert found.status == "WARN" and found.finding == f"{SEEN}nothing listens on port 17670 of this host"
    assert found.fix == (f"start the gateway there with --port 17670, or set {PORT_FIX} (or grpc_endpoint) to the "
                         "port it listens on")


def test_loopback_names_and_ipv6_land_where_they_say() -> None:
    """localhost is 127.0.0.1 whatever the resolver gives first; [::1] is ::1, which a
    127.0.0.1 listener does not serve and an IPv4 wildcard does not cover; all of 127/8 is
    this host though only 127.0.0.1 is in its address list."""
    local = decide(named("localhost", "::1", listeners=on(("127.0.0.1", 17670))))
    assert local.status == "OK" and local.finding.endswith("127.0.0.1:17670: reachable"), local
    for listening in ("127.0.0.1", "0.0.0.0"):
        v6 = decide(dataclasses.replace(LOOP, endpoint="http://[::1]:17670", listeners=on((listening, 17670))))
        assert v6.status == "WARN" and "connection to [::1]:17670 does not reach" in v6.finding, v6
    assert decide(dataclasses.replace(LOOP, endpoint="http://[::1]:17670", listeners=on(("::", 17670)))).status == "OK"
    other = decide(dataclasses.replace(LOOP, endpoint="http://127.0.0.2:17670", listeners=on(("127.0.0.1", 17670))))
    assert other.status == "WARN" and "connection to 127.0.0.2:17670 does not reach" in other.finding, other


@pytest.mark.parametrize("name", gatewayreach.OWN_NAMES)
def test_the_host_gateway_names_are_judged_at_the_address_podmand_gives_them(name: str) -> None:
    """Unset host_gateway_ip: 127.0.0.1; set to an address of this host: that address, which a
    loopback-only gateway does not serve."""
    loop = decide(named(name, "127.0.0.1", listeners=on(("127.0.0.1", 17670))))
    assert loop.status == "OK" and loop.finding.endswith("something listens on 127.0.0.1:17670: reachable"), loop
    own = decide(named(name, HOST, listeners=on(("127.0.0.1", 17670))))
    assert own.status == "WARN" and own.finding.endswith(
        f"the gateway listens on 127.0.0.1:17670 only, which a sandbox's connection to {HOST}:17670 does not reach")
    assert own.fix == f"start the gateway listening on {HOST}:17670, or --bind-address {HOST}"
    assert decide(named(name, HOST, listeners=on(("0.0.0.0", 17670)))).status == "OK"


def test_an_address_this_host_lacks_is_another_machines_and_not_judged() -> None:
    """A host_gateway_ip this host lacks (gvproxy's under podman machine, say) or a remote
    gateway: its listeners are not seen from here, whatever this host's are."""
    gvproxy = decide(named("host.openshell.internal", OTHER, listeners=on(("127.0.0.1", 17670))))
    assert gvproxy == gatewayreach.Finding("OK", (
        f"supervisors dial http://host.openshell.internal:17670 from this host's network; host.openshell.internal "
        f"({OTHER}) is not an address of this host: the gateway is elsewhere, its listener not checked"))
    remote = decide(dataclasses.replace(LOOP, endpoint=f"https://{OTHER}:443", address=OTHER))
    assert remote.status == "OK" and remote.finding.endswith(
        f"; {OTHER} is not an address of this host: the gateway is elsewhere, its listener not checked")
    unresolved = decide(named("gw.invalid", ""))
    assert unresolved.status == "OK" and unresolved.finding.endswith(
        "; gw.invalid does not resolve on this host, so its listener is not checked")


def test_a_loopback_only_namespace_is_not_taken_for_the_host() -> None:
    """podmand in a container with no network (the sidecar) sees only its own lo: no listener
    there says anything of the host's network, where supervisors dial from."""
    for addresses in (("127.0.0.1", "::1"), ()):
        found = decide(dataclasses.replace(LOOP, host_addresses=addresses, listeners=on(("0.0.0.0", 22))))
        assert found.status == "OK" and found.finding.startswith(SEEN + "podmand sees no address but loopback"), found
        assert found.finding.endswith("the gateway's reach is not checked")


def test_unknown_listeners_are_not_judged() -> None:
    for facts in (LOOP, named("host.containers.internal", HOST)):
        found = decide(dataclasses.replace(facts, listeners=None))
        assert found.status == "OK" and found.finding.endswith(
            "this host's listeners cannot be read, so port 17670 is not checked"), found


def test_host_port_defaults_by_scheme() -> None:
    assert gatewayreach.host_port("https://gw:443") == ("gw", 443)
    assert gatewayreach.host_port("https://gw") == ("gw", 443)
    assert gatewayreach.host_port("http://[fd00::1]") == ("fd00::1", 80)


# ---------------------------------------------------------------- netfacts' parsers and facts

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
TRIE = """Main:
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
INET6 = "fd000000000000000000000000000002 04 40 00 82     eth0\n"


def test_proc_net_tcp_listeners() -> None:
    assert netfacts.parse_tcp(TCP, False) == [Listener("0.0.0.0", 17618), Listener("127.0.0.1", 47011)]
    assert netfacts.parse_tcp(TCP6, True) == [Listener("::", 17619), Listener("::1", 17620),
                                              Listener("10.0.0.2", 17621)]


def test_local_addresses() -> None:
    assert netfacts.parse_fib_trie(TRIE) == ["127.0.0.1", HOST]
    assert netfacts.parse_if_inet6(INET6) == ["fd00::2"]


def test_guess_is_the_supervisors_own_hosts_entry() -> None:
    """The host-gateway names are what pair.specs writes into the supervisor's /etc/hosts, on
    the host's network: host_gateway_ip, else loopback."""
    for name in gatewayreach.OWN_NAMES:
        assert netfacts.guess(Settings(), name) == "127.0.0.1"
        assert netfacts.guess(Settings(host_gateway_ip=HOST), name) == HOST
    assert netfacts.guess(Settings(), "localhost") in ("127.0.0.1", "::1")  # others: this host's resolver


@pytest.fixture
def proc_net(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A /proc/net of the test's own: the addresses above, the listeners of TCP and TCP6."""
    for name, text in (("fib_trie", TRIE), ("if_inet6", INET6), ("tcp", TCP), ("tcp6", TCP6)):
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(netfacts, "PROC_NET", tmp_path)
    return tmp_path


def test_facts_are_this_hosts_for_the_endpoint(proc_net: Path) -> None:
    settings = Settings(grpc_endpoint="http://host.openshell.internal:17618", host_gateway_ip=HOST)
    assert netfacts.facts(settings) == Facts(
        endpoint="http://host.openshell.internal:17618", address=HOST,
        host_addresses=("127.0.0.1", HOST, "fd00::2"),
        listeners=(*netfacts.parse_tcp(TCP, False), *netfacts.parse_tcp(TCP6, True)))
    assert netfacts.startup_warning(settings) == ""  # 0.0.0.0:17618 covers it
    for name in ("tcp", "tcp6"):
        (proc_net / name).unlink()
    assert netfacts.facts(settings).listeners is None


def test_startup_warning_says_the_finding_and_fix(proc_net: Path) -> None:
    warned = netfacts.startup_warning(Settings(gateway_port=17620))  # only [::1]:17620 listens
    assert warned == (
        "sandboxes may not reach the gateway: supervisors dial http://127.0.0.1:17620 from this host's network; "
        "the gateway listens on [::1]:17620 only, which a sandbox's connection to 127.0.0.1:17620 does not reach; "
        "fix: start the gateway listening on 127.0.0.1:17620, or --bind-address 127.0.0.1 "
        "('podmand doctor' checks it again)")
