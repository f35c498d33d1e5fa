"""WatchSandboxes and health: one Podman event subscription feeding every stream.

- ``hub``: the subscription, the resyncs, and fanning out to streams.
- ``inbox``: everything the hub handles, as typed messages in one queue.
- ``streams``: one stream's bounded, deduplicated buffer.
- ``liveness``: whether Podman is reachable, for the gRPC health service.

May import everything below it, ``driver`` included (the hub reads the driver's
observer and events); never the edge or ``cli``.
"""

__all__ = [
    "hub",
    "inbox",
    "liveness",
    "streams",
]
