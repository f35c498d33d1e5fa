"""The machine podmand runs on and the Podman service it finds there.

- finding Podman: ``discovery``, ``autostart`` (the user's own service when none
  runs: ``podmanservice`` supervises it, ``storageguard`` picks overlay for a new
  store), ``eventproof`` (its event stream delivers), ``enforcement`` (it applies
  limits), ``hostgateway`` (the host-gateway names' address under podman machine),
  ``netfacts`` and ``gatewayreach`` (whether supervisors, on the host's network,
  reach the gateway: the host's addresses and listeners, and the decision with its fix),
  ``sharedpaths`` (it sees podmand's state directory at the same path); where its
  connections are (``connections``, ``podmanconfig``: Podman's own configuration).
- the host's kind: ``wsl`` (WSL2 shares its GPU as nvidia.com/gpu=all).
- podmand's own footing: ``statedir`` (one podmand per state directory),
  ``socketpath`` (the driver socket's path), ``limits`` (the descriptor limit),
  ``capacity`` (how many sandboxes fit), ``notify`` (systemd readiness),
  ``shutdown`` (how serve is told to stop).

May import the leaves, ``libpod``, ``config``, ``security``, ``sandbox`` and
``pair``; nothing above.
"""

__all__ = [
    "autostart",
    "capacity",
    "connections",
    "discovery",
    "enforcement",
    "eventproof",
    "gatewayreach",
    "hostgateway",
    "limits",
    "netfacts",
    "notify",
    "podmanconfig",
    "podmanservice",
    "sharedpaths",
    "shutdown",
    "socketpath",
    "statedir",
    "storageguard",
    "wsl",
]
