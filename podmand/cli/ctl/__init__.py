"""``podmand ctl``: an operator's client for a running podmand.

``client`` is the command line, ``requests`` builds what it sends, ``commands``
runs each command, ``view`` renders, ``podmanfacts`` asks Podman what the driver
API does not carry.
"""

__all__ = [
    "client",
]
