"""Trust: who may call the driver, what a caller's tokens say, what podmand attaches
for it, and the evidence of what confines a container.

- ``peers``: peer credentials on the driver socket (only trusted uids get in).
- ``tokens``: the gateway's JWTs and launch bundles, decoded, never verified.
- ``admission``: what podmand attaches is what GetCapabilities advertises.
- ``fence``: a digest of what ``podman inspect`` says confines a container.

May import the leaves, ``libpod`` and ``config``; nothing above.
"""

__all__ = [
    "admission",
    "fence",
    "peers",
    "tokens",
]
