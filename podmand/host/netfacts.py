"""The network facts that say whether sandboxes reach the gateway and the proxy: this
host's addresses and default interface, its TCP listeners, what the endpoint's host is
inside a sandbox, and a TLS handshake with an ``https://`` proxy.

The side effects live here and the decisions in gatewayreach.py (pure), so tests can
give either one its facts. Addresses and listeners are read from ``/proc`` (podmand's
network namespace: the host's, unless podmand runs in a container). What
``host.containers.internal`` is where the supervisor dials from is podmand's own entry in
the supervisor's ``/etc/hosts`` (pair.specs): nothing to ask Podman.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import ssl
import struct
from pathlib import Path

from .. import config
from ..libpod import Info
from ..libpod.versions import parse_version
from ..pair import specs
from ..sandbox import proxy
from . import gatewayreach
from .gatewayreach import Facts, Listener

PROC_NET = Path("/proc/net")
SIOCGIFADDR = 0x8915
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


def default_interface(route_table: str) -> str:
    """The interface of the lowest-metric IPv4 default route in ``/proc/net/route``, or ""."""
    best: tuple[int, str] | None = None
    for line in route_table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 6 and fields[1] == "00000000" and (best is None or int(fields[6]) < best[0]):
            best = (int(fields[6]), fields[0])
    return best[1] if best else ""


def interface_ipv4(name: str) -> str:
    """The primary IPv4 address of interface ``name`` (SIOCGIFADDR), or ""."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return ""
    return socket.inet_ntoa(packed[20:24])


Addresses = tuple[list[str], list[str]]  # (every local address, the default interface's)


def host_addresses() -> Addresses:
    """(every local address, the default interface's) of this network namespace: read once
    per decision and handed to both :func:`guess` and :func:`facts`."""
    every = parse_fib_trie(_text(PROC_NET / "fib_trie")) + parse_if_inet6(_text(PROC_NET / "if_inet6"))
    iface = default_interface(_text(PROC_NET / "route"))
    primary = interface_ipv4(iface) if iface else ""
    return every, [primary] if primary else []


def resolve(host: str) -> str:
    """``host``'s first address as this host's resolver gives it, or ""."""
    try:
        return str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    except (OSError, IndexError, UnicodeError):
        return ""


def hosts_entry(hosts: str, name: str) -> str:
    """The address an ``/etc/hosts`` text gives ``name``, or ""."""
    for line in hosts.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) > 1 and name in fields[1:]:
            return fields[0]
    return ""


def network_cmd(info: Info) -> str:
    """The rootless network command: /info says since 5.1; before, pasta is 5.0's default
    and slirp4netns 4.x's (containers/common pkg/config/default.go, vendored at v4.9.3 and v5.0.0)."""
    host = info.host
    if not host.security.rootless:
        return ""
    if host.rootlessNetworkCmd:
        return host.rootlessNetworkCmd
    parsed = parse_version(info.version.version)
    return "pasta" if parsed is not None and parsed >= (5, 0, 0) else "slirp4netns"


def guess(settings: config.Settings, name: str) -> str:
    """What ``name`` is where the supervisor dials from (the host's network): for the
    host-gateway names the entry podmand writes into its /etc/hosts (pair.specs:
    host_gateway_ip, else 127.0.0.1), any other name as this host's resolver says."""
    if name not in gatewayreach.OWN_NAMES:
        return resolve(name)
    return settings.host_gateway_ip or specs.DEFAULT_HOST_GATEWAY_IP


def facts(settings: config.Settings, info: Info, sandbox_address: str, asked: bool, addresses: Addresses) -> Facts:
    every, primary = addresses
    found = listeners()
    return Facts(
        endpoint=settings.endpoint, host_gateway_ip=settings.host_gateway_ip, network_cmd=network_cmd(info),
        rootless=info.host.security.rootless, sandbox_address=sandbox_address, asked=asked,
        host_addresses=tuple(every), default_addresses=tuple(primary),
        listeners=tuple(found) if found is not None else None, host_network=True,
    )


def startup_warning(settings: config.Settings, info: Info) -> str:
    """serve's one line when sandboxes may not reach the gateway (from podmand's guess of
    what the endpoint's host is in a sandbox, and this host's listeners now), else ""."""
    host, _ = gatewayreach.host_port(settings.endpoint)
    addresses = host_addresses()
    found = gatewayreach.decide(facts(settings, info, guess(settings, host), False, addresses))
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
