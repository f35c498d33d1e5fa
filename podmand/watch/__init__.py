"""WatchSandboxes and health: one Podman event subscription feeding every stream.

- ``hub``: the one task that handles everything, in order, composing the rest.
- ``subscription``: Podman's event stream, proved to deliver, and the resync ticker.
- ``looks``: the inspects in flight, one per container, ordered against the driver's word.
- ``lists``: the lists on connecting and at each resync, and what they find events missed.
- ``fanout``: the open streams, and what each sandbox was last told in.
- ``inbox``: everything the hub handles, as typed messages in one queue.
- ``streams``: one stream's bounded, deduplicated buffer.
- ``liveness``: whether Podman is reachable, for the gRPC health service.

May import everything below it, ``driver`` included (the hub reads the driver's
observer and events); never the edge or ``cli``.
"""

__all__ = [
    "fanout",
    "hub",
    "inbox",
    "lists",
    "liveness",
    "looks",
    "streams",
    "subscription",
]
