"""Whether a sandbox's supervisor reaches the gateway at the endpoint it is given,
decided from facts netfacts.py gathers; each finding carries its fix. Pure.

The seed contract has no ``GetGatewayListenerRequirements``, so nothing tells the
gateway where sandboxes will dial it: the operator must make the two meet, and when
they do not every sandbox fails to connect back (upstream's most reported problem).
In the split pair the supervisor is the only container that dials the gateway, and it
runs on this host's own network (contract §3: the workload has none). So nothing
translates its connection: a loopback endpoint is this host; ``host.containers.internal``
and ``host.openshell.internal`` are what podmand writes into the supervisor's
``/etc/hosts`` (``host_gateway_ip``, else 127.0.0.1: pair.specs); any other name is what
this host's resolver says. The question is only whether something on this host listens
at that address (or on the wildcard) and the endpoint's port. An address this host does
not have is another machine's, whose listeners are not seen from here; nor is this host's
network seen from a network namespace with loopback only (podmand in a container without a
network, as the sidecar runs), so neither is judged.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from dataclasses import dataclass
from typing import Literal

from .. import config

OWN_NAMES = ("host.containers.internal", "host.openshell.internal")  # podmand's entries in the supervisor's /etc/hosts


@dataclass(frozen=True)
class Listener:
    address: str
    port: int


@dataclass(frozen=True)
class Facts:
    endpoint: str
    address: str  # what the endpoint's host is on this host's network ("" when it does not resolve)
    host_addresses: tuple[str, ...]  # every local address of this network namespace
    listeners: tuple[Listener, ...] | None  # TCP listeners; None when unknown


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


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _wildcard_covers(listening: str, target: str) -> bool:
    try:
        v6 = ipaddress.ip_address(target).version == 6
    except ValueError:
        return False
    return listening == "::" or (listening == "0.0.0.0" and not v6)


def decide(f: Facts) -> Finding:
    """The one finding for these facts: OK when the supervisor's connection lands where
    something listens on this host (or on an address this host does not have, which is not
    judged), else WARN with what to change."""
    host, port = host_port(f.endpoint)
    seen = f"supervisors dial {f.endpoint} from this host's network"
    if all(loopback(a) for a in f.host_addresses):
        return Finding("OK", f"{seen}; podmand sees no address but loopback (it runs in a container without a "
                       "network, say), so this host's network is not seen from here and the gateway's reach is "
                       "not checked")
    if _literal(host):
        landing = host
    elif loopback(host):  # localhost, whatever order the resolver gives its addresses in
        landing = "127.0.0.1"
    else:
        landing = f.address
    if not landing:
        return Finding("OK", f"{seen}; {host} does not resolve on this host, so its listener is not checked")
    if not (loopback(landing) or landing in f.host_addresses):
        named = host if landing == host else f"{host} ({landing})"
        return Finding("OK", f"{seen}; {named} is not an address of this host: the gateway is elsewhere, its "
                       "listener not checked")
    return _listening(f, seen, landing, port)


def _listening(f: Facts, seen: str, landing: str, port: int) -> Finding:
    if f.listeners is None:
        return Finding("OK", f"{seen}; this host's listeners cannot be read, so port {port} is not checked")
    on_port = [item.address for item in f.listeners if item.port == port]
    where = next((a for a in on_port if a == landing or _wildcard_covers(a, landing)), "")
    if where:
        return Finding("OK", f"{seen}; something listens on {_join(where, port)}: reachable")
    if not on_port:
        return Finding("WARN", f"{seen}; nothing listens on port {port} of this host",
                       f"start the gateway there with --port {port}, or set {config.describe('gateway_port')} "
                       "(or grpc_endpoint) to the port it listens on")
    only = ", ".join(_join(a, port) for a in sorted(set(on_port)))
    return Finding("WARN", f"{seen}; the gateway listens on {only} only, which a sandbox's connection to "
                   f"{_join(landing, port)} does not reach",
                   f"start the gateway listening on {_join(landing, port)}, or --bind-address {landing}")


def _join(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
