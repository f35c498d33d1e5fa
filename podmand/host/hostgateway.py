"""The host-gateway names' default address under podman machine.

Each supervisor shares the host's network, and podmand writes ``host.containers.internal``
and ``host.openshell.internal`` into its ``/etc/hosts`` as a literal address
(pair/specs.py): ``host_gateway_ip``, else 127.0.0.1, the host's loopback there. Podman
is never asked to resolve ``host-gateway`` itself, and the workload has no network.

Under podman machine the supervisor's host network is the VM's, and a gateway beside
podmand listens outside it. When discovery found the machine's socket (discovery.py),
podmand makes gvproxy's address for the host, 192.168.127.254, the default
``host_gateway_ip`` (:func:`for_machine`), as upstream does on macOS
(openshell-driver-podman config.rs:476, #1634): gvproxy (containers/gvisor-tap-vsock)
answers that address in the VM and forwards it to the host's loopback. A
``host_gateway_ip`` that is set wins.
"""

from __future__ import annotations

import msgspec

from .. import config

GVPROXY_HOST = "192.168.127.254"  # gvproxy's address for the host in a podman machine VM


def for_machine(settings: config.Settings, machine: str) -> config.Settings:
    """The settings to serve with when Podman is podman machine ``machine`` ('' when it is not)."""
    if not machine or settings.host_gateway_ip:
        return settings
    return msgspec.structs.replace(settings, host_gateway_ip=GVPROXY_HOST)
