"""Whether a sandbox can reach the gateway at the endpoint it is given, decided from
facts netfacts.py gathers; each finding carries its fix. Pure.

The seed contract has no ``GetGatewayListenerRequirements``, so nothing tells the
gateway where sandboxes will dial it: the operator must make the two meet, and when
they do not every sandbox fails to connect back (upstream's most reported problem).
What decides it, as measured on Podman 4.3.1 and 5.4.2 (docs/operations.md):

- a sandbox dials from its own network namespace: a loopback endpoint is itself;
- rootless with slirp4netns, ``host.containers.internal`` is an address of this host,
  and slirp4netns connects to it from the host's namespace;
- rootless with pasta (5.3 and later), it is 169.254.1.2, which pasta maps to the
  address of the host's default interface, never to its loopback
  (containers/podman#28718); the default interface's own address, which pasta copies
  into the rootless network namespace, reaches that namespace instead of the host;
- rootful, it is the bridge's gateway, an address of this host.

So the connection lands on one address of this host, and something must listen there
(or on the wildcard) on the endpoint's port. The gateway listens on 127.0.0.1 unless
told otherwise (upstream's ``--bind-address``), which no sandbox reaches.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from dataclasses import dataclass
from typing import Literal

from .. import config

MAP_GUEST_ADDR = "169.254.1.2"  # pasta's address for the host (Podman 5.3 and later)
OWN_NAMES = ("host.containers.internal", "host.openshell.internal")  # what Podman or host_gateway_ip set
BIND = "--bind-address 0.0.0.0 (OPENSHELL_BIND_ADDRESS)"  # upstream gateway's flag; its default is 127.0.0.1


@dataclass(frozen=True)
class Listener:
    address: str
    port: int


@dataclass(frozen=True)
class Facts:
    endpoint: str
    host_gateway_ip: str
    rootless: bool
    network_cmd: str  # pasta or slirp4netns rootless, "" rootful
    sandbox_address: str  # the endpoint's host inside a sandbox ("" when unknown)
    asked: bool  # that address is Podman's answer (a probe container), not podmand's guess
    host_addresses: tuple[str, ...]  # every local address of this network namespace
    default_addresses: tuple[str, ...]  # the default-route interface's
    listeners: tuple[Listener, ...] | None  # TCP listeners; None when unknown
    host_network: bool = False  # the split topology: the supervisor dials from this host's own network


@dataclass(frozen=True)
class Finding:
    status: Literal["OK", "WARN"]
    finding: str
    fix: str = ""


def host_port(url: str) -> tuple[str, int]:
    """The host and port a URL dials (its scheme's default port when it names none)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return "", 0
    host = parts.hostname or ""
    return host, port or (443 if parts.scheme == "https" else 80)


def loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _wildcard_covers(listening: str, target: str) -> bool:
    try:
        v6 = ipaddress.ip_address(target).version == 6
    except ValueError:
        return False
    return listening == "::" or (listening == "0.0.0.0" and not v6)


def decide(f: Facts) -> Finding:
    """The one finding for these facts: OK when a sandbox's connection lands where
    something listens, else WARN with what to change."""
    host, port = host_port(f.endpoint)
    endpoint = config.describe("grpc_endpoint")
    listen_fix = f"start the gateway with {BIND}"
    if f.host_network:  # no sandbox namespace on the way: the address is this host's, loopback included
        seen = f"supervisors dial {f.endpoint} from this host's network"
        landing = "127.0.0.1" if loopback(host) else f.sandbox_address or host
        if loopback(host) or landing in f.host_addresses:
            return _listening(f, seen, landing, port, f"start the gateway listening on {_join(landing, port)}")
        return Finding("OK", f"{seen}; {host} is not an address of this host: the gateway is elsewhere, its "
                       "listener not checked")
    if loopback(host):
        return Finding("WARN", (
            f"sandboxes dial {f.endpoint} ({endpoint}): a loopback address, which in a sandbox's network namespace "
            "is the sandbox itself"),
            f"leave grpc_endpoint unset (http(s)://host.containers.internal:<gateway_port>) and {listen_fix}")
    address = f.sandbox_address
    how = "Podman gives it" if f.asked else "Podman would give it"
    if not address:
        return Finding("OK", f"sandboxes dial {f.endpoint}; what {host} is in a sandbox is not known here, so "
                       "its reach is not checked")
    seen = f"sandboxes dial {f.endpoint}; {host} is {address} there ({how})"
    if loopback(address):
        return Finding("WARN", f"{seen}: a loopback address, the sandbox itself",
                       f"unset {config.describe('host_gateway_ip')} or set it to an address of this host's "
                       f"default interface, and {listen_fix}")
    pasta = f.network_cmd == "pasta"
    if (f.host_gateway_ip and address == f.host_gateway_ip and address not in f.host_addresses
            and not (pasta and address == MAP_GUEST_ADDR)):
        return Finding("WARN", f"{seen}, but no interface of this host has {address}",
                       f"set {config.describe('host_gateway_ip')} to an address of this host "
                       f"({', '.join(_shown(f.host_addresses)) or 'none found'}), or unset it")
    if pasta and address in f.default_addresses:
        return Finding("WARN", (
            f"{seen}: this host's default-interface address, which pasta copies into the rootless network "
            "namespace, so a sandbox dialling it reaches that namespace, not this host"),
            f"unset {config.describe('host_gateway_ip')} (from Podman 5.3 host.containers.internal is "
            f"{MAP_GUEST_ADDR}, which pasta maps to this host) or set it to an address of another interface")
    if pasta and address == MAP_GUEST_ADDR:
        if not f.default_addresses:
            return Finding("OK", f"{seen}, which pasta maps to this host's default-interface address; that "
                           "address is not known here, so its listener is not checked")
        landing = f.default_addresses[0]
        seen += f", which pasta maps to this host's default-interface address {landing}, never to loopback " \
                "(containers/podman#28718)"
    elif address in f.host_addresses:
        landing = address
    else:
        return Finding("OK", f"{seen}, not an address of this host: the gateway is elsewhere, its listener "
                       "not checked")
    return _listening(f, seen, landing, port, listen_fix)


def _listening(f: Facts, seen: str, landing: str, port: int, listen_fix: str) -> Finding:
    if f.listeners is None:
        return Finding("OK", f"{seen}; this host's listeners cannot be read, so port {port} is not checked")
    on_port = [item.address for item in f.listeners if item.port == port]
    if any(a == landing or _wildcard_covers(a, landing) for a in on_port):
        where = next(a for a in on_port if a == landing or _wildcard_covers(a, landing))
        return Finding("OK", f"{seen}; something listens on {_join(where, port)}: reachable")
    if not on_port:
        return Finding("WARN", f"{seen}; nothing listens on port {port} of this host",
                       f"start the gateway there with --port {port}{'' if f.host_network else ' and ' + BIND}, or set "
                       f"{config.describe('gateway_port')} (or grpc_endpoint) to the port it listens on")
    only = ", ".join(_join(a, port) for a in sorted(set(on_port)))
    return Finding("WARN", f"{seen}; the gateway listens on {only} only, which a sandbox's connection to "
                   f"{_join(landing, port)} does not reach",
                   f"{listen_fix}, or --bind-address {landing}")


def _join(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _shown(addresses: tuple[str, ...]) -> list[str]:
    return [a for a in addresses if not loopback(a) and not a.startswith("fe80:")]
