"""The network facts that say whether sandboxes reach the gateway and the proxy: this
host's addresses, its TCP listeners, what the endpoint's host is where the supervisor
dials from, and a TLS handshake with an ``https://`` proxy.

The side effects live here and the decisions in gatewayreach.py (pure), so tests can
give either one its facts. The supervisor runs on this host's network, so the facts are
this network namespace's: addresses and listeners read from ``/proc`` (podmand's own: the
host's, unless podmand runs in a container), and ``host.containers.internal`` /
``host.openshell.internal`` are podmand's own entries in the supervisor's ``/etc/hosts``
(pair.specs): nothing to ask Podman.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from pathlib import Path

from .. import config
from ..pair import specs
from ..sandbox import proxy
from . import gatewayreach
from .gatewayreach import Facts, Listener

PROC_NET = Path("/proc/net")
TCP_LISTEN = "0A"
PROBE_TIMEOUT = 5.0


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def parse_tcp(text: str, v6: bool) -> list[Listener]:
    """The LISTEN sockets of a ``/proc/net/tcp`` (or ``tcp6``) table."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != TCP_LISTEN:
            continue
        address, _, port = fields[1].partition(":")
        raw = bytes.fromhex(address)
        if v6:  # four host-order 32-bit words
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
            ip = ipaddress.IPv6Address(raw)
            text_ip = str(ip.ipv4_mapped or ip)
        else:
            text_ip = str(ipaddress.IPv4Address(raw[::-1]))
        out.append(Listener(text_ip, int(port, 16)))
    return out


def listeners() -> list[Listener] | None:
    """This network namespace's TCP listeners; None when /proc/net cannot be read."""
    v4, v6 = _text(PROC_NET / "tcp"), _text(PROC_NET / "tcp6")
    if not v4 and not v6:
        return None
    return parse_tcp(v4, False) + parse_tcp(v6, True)


def parse_fib_trie(text: str) -> list[str]:
    """The local IPv4 addresses in ``/proc/net/fib_trie`` (``/32 host LOCAL`` leaves)."""
    found: list[str] = []
    last = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|--"):
            last = stripped[3:].strip()
        elif stripped.startswith("/32 host LOCAL") and last and last not in found:
            found.append(last)
    return found


def parse_if_inet6(text: str) -> list[str]:
    return [str(ipaddress.IPv6Address(bytes.fromhex(line.split()[0]))) for line in text.splitlines() if line.strip()]


def host_addresses() -> list[str]:
    """Every local address of this network namespace (IPv4 and IPv6)."""
    return parse_fib_trie(_text(PROC_NET / "fib_trie")) + parse_if_inet6(_text(PROC_NET / "if_inet6"))


def resolve(host: str) -> str:
    """``host``'s first address as this host's resolver gives it, or ""."""
    try:
        return str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    except (OSError, IndexError, UnicodeError):
        return ""


def guess(settings: config.Settings, name: str) -> str:
    """What ``name`` is where the supervisor dials from (the host's network): for the
    host-gateway names the entry podmand writes into its /etc/hosts (pair.specs:
    host_gateway_ip, else 127.0.0.1), any other name as this host's resolver says."""
    if name not in gatewayreach.OWN_NAMES:
        return resolve(name)
    return settings.host_gateway_ip or specs.DEFAULT_HOST_GATEWAY_IP


def facts(settings: config.Settings) -> Facts:
    """This host's facts for the supervisor's endpoint, read now."""
    host, _ = gatewayreach.host_port(settings.endpoint)
    found = listeners()
    return Facts(endpoint=settings.endpoint, address=guess(settings, host), host_addresses=tuple(host_addresses()),
                 listeners=tuple(found) if found is not None else None)


def startup_warning(settings: config.Settings) -> str:
    """serve's one line when supervisors may not reach the gateway (this host's listeners
    now), else ""."""
    found = gatewayreach.decide(facts(settings))
    if found.status == "OK":
        return ""
    return f"sandboxes may not reach the gateway: {found.finding}; fix: {found.fix} ('podmand doctor' checks it again)"


def proxy_handshake(url: str, ca_bundle: str) -> str:
    """Connect to the proxy of ``url`` and, for ``https://``, complete a TLS handshake verifying
    its certificate against the system roots plus ``ca_bundle``: "" when that works, else why."""
    host, port = gatewayreach.host_port(url)
    shown = f"{host}:{port}"
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=PROBE_TIMEOUT) as raw:
            if not proxy.secure(url):
                return ""
            ctx = ssl.create_default_context()
            for der in proxy.trust_anchors(proxy.read_ca_bundle(ca_bundle)) if ca_bundle else []:
                ctx.load_verify_locations(cadata=der)
            with ctx.wrap_socket(raw, server_hostname=host.strip("[]")):
                return ""
    except ssl.SSLCertVerificationError as exc:
        return f"TLS handshake with {shown} failed: {exc.verify_message}"
    except ssl.SSLError as exc:
        return f"TLS handshake with {shown} failed: {exc.reason or exc}"
    except proxy.ProxyFileError as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot connect to {shown}: {exc.strerror or exc}"
