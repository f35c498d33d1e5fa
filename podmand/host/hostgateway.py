"""host-gateway: the address sandboxes reach the gateway by, and what podmand tells the
operator when Podman has none to give.

Without ``host_gateway_ip`` podmand asks Podman for ``host.openshell.internal:host-gateway``
(spec.py) and Podman adds ``host.containers.internal`` itself (the default endpoint's
host): both get the address Podman picks for the host
(vendor/github.com/containers/common/libnetwork/etchosts/ip.go at v5.4.2). Rootful that
is the bridge's gateway, on the host; rootless an address of the host, from 5.3 with pasta
169.254.1.2, which pasta maps to the host's address on its default interface (never its
loopback: containers/podman#28718).

Sometimes Podman has none, and the container does not start: ``unable to replace
"host-gateway" of host entry ...: host containers internal IP address is empty``
(etchosts/hosts.go:251-252 at v5.4.2). Rootless 5.1-5.2 on a host with one address,
which pasta copies into the rootless network namespace and 5.1 leaves out
(containers/podman#22653, #22881); and podman machine before 5.6 (#21681).

Under podman machine, when discovery found the machine's socket (discovery.py), podmand
makes gvproxy's address for the host, 192.168.127.254, the default ``host_gateway_ip``
(``for_machine``), as upstream does on macOS (openshell-driver-podman config.rs:476, #1634):
gvproxy (containers/gvisor-tap-vsock) answers that address in the VM and forwards it to the
host's loopback, where a gateway beside podmand listens. A ``host_gateway_ip`` that is set
wins. Otherwise podmand does not pick an address itself, because in exactly those cases
none it could compute reaches the host: rootless, its workspace network's gateway lives in the
rootless network namespace, not on the host (why Podman passes it over too), and the
host's one address is the copy pasta gave the namespace; under podman machine the
host is outside the VM. Where the gateway listens only the operator knows. So podmand
recognises Podman's error and fails the sandbox with a terminal reason naming
``host_gateway_ip`` and what to set it to, and StartSandbox says the same.
"""

from __future__ import annotations

import msgspec

from .. import config

REASON = "HostGatewayUnresolved"
GVPROXY_HOST = "192.168.127.254"  # gvproxy's address for the host in a podman machine VM
PODMAN_SAYS = "host containers internal IP address is empty"  # hosts.go's words, 4.7.0 to 5.6


def unresolved(podman_message: str) -> bool:
    """Podman could not start a container for want of host-gateway's address."""
    return PODMAN_SAYS in podman_message


def explanation(podman_message: str) -> str:
    """Why the sandbox cannot start, and what the operator sets."""
    return (
        "Podman has no address for the host (host.containers.internal), so it cannot resolve host-gateway "
        "and the sandbox cannot start or reach the gateway by name (rootless Podman 5.1-5.2 on a host with "
        "one IP address: containers/podman#22881; podman machine before 5.6: containers/podman#21681). "
        f"Set {config.describe('host_gateway_ip')} to an IP address of this host that the gateway listens "
        "on and sandboxes can reach (with pasta not the host's only address, which pasta gives the "
        "container too; under podman machine the one 'getent hosts host.containers.internal' shows in "
        "the VM), or upgrade Podman (5.3, or 5.6 under podman machine). "
        f"Podman said: {podman_message}"
    )


def for_machine(settings: config.Settings, machine: str) -> config.Settings:
    """The settings to serve with when Podman is podman machine ``machine`` ('' when it is not)."""
    if not machine or settings.host_gateway_ip:
        return settings
    return msgspec.structs.replace(settings, host_gateway_ip=GVPROXY_HOST)
