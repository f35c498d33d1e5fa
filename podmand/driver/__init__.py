"""The driver layer: what each RPC does, on Podman and in the state directory.

``core.Driver`` composes the rest: ``records`` (the durable record of a create),
``validation``, ``provisioning`` and ``pulls`` (a create, in the background),
``observer``, ``exitfiles`` and ``events`` (what podmand learns of each container
and tells watch streams), ``index`` and ``lookup`` (which containers a sandbox has),
``networks``, ``images``, ``garbage``, ``pending`` and ``tasks``.

May import the leaves, ``libpod``, ``config``, ``security``, ``sandbox`` and
``host``; never ``watch``, the edge or ``cli``.
"""

from .core import Driver

__all__ = ["Driver", "events", "observer"]
