"""The driver layer: what each RPC does, on Podman and in the state directory; ``core.Driver`` composes the rest.
It may import libpod and the shared top-level modules, never server, servicer, hub or cli: import Driver from here."""

from .core import Driver

__all__ = ["Driver"]
