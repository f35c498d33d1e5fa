"""The split topology's pair: one sandbox as a workload container and a supervisor
container beside it (OpenShell 0.1.x's Sandbox Protocol), and what goes where.

- **the workload** runs the sandbox image with the ``openshell-sandbox`` runtime
  bound read-only as its entrypoint: no network (netns ``none``), no capabilities
  (or the launcher's four), no environment, a non-root identity resolved from the
  image. It gets the channel volume read-write: ``bootstrap.json`` (the session,
  the gateway's public keys, the fence, the identity, the child environment) and the
  channel's TLS server certificate and key. It never gets a bearer token.
- **the supervisor** runs ``/openshell-supervisor`` from the supervisor image on the
  host network, as the same uid:gid with no capabilities, the channel volume
  read-only. Its own root filesystem (no volume) holds ``auth.json`` (the bundle's
  ``supervisor`` object as the gateway sent it: both tokens),
  ``runtime-descriptor.json`` (where to dial, the channel's trust anchor, the fence)
  and ``restart-metadata.json`` (what a start needs back).

Modules, each one thing, all pure (bytes and data in, bytes and data out):
``tls`` (the per-launch authority and server certificate), ``documents`` (the JSON
files, the identity, the resource claims), ``outerfence`` (the fence's guarantees
from the workload's inspect), ``archives`` (the tar uploads) and ``specs`` (the two
containers' libpod specs). ``lifecycle`` alone has side effects: it carries their
bytes to Podman in the order of contract §4 (create, start, stop, delete). Wire
names (paths, labels, volume and container names) are the leaf ``names``'.

Sits above ``sandbox`` (whose spec pieces it reuses) and below ``host``: may import
the leaves, ``libpod``, ``config``, ``security`` and ``sandbox``; nothing above.
The driver composes it; only ``lifecycle`` talks to Podman.
"""

__all__ = [
    "archives",
    "documents",
    "lifecycle",
    "outerfence",
    "specs",
    "tls",
]
