"""The driver layer: what each RPC does, on Podman and in the state directory.

``core.Driver`` (every RPC's entry point, and the hub's contract) composes the
rest: ``records`` (the durable record of a create), ``validation``, and
``provisioning`` (a create, in the background) with ``preparation`` and ``pulls``
(its images) and ``creation`` (its container); ``startstop`` (StopSandbox and
StartSandbox), ``removal`` (DeleteSandbox, and what was removed out of band);
``observer``, ``exitfiles`` and ``events`` (what podmand learns of each container
and tells watch streams), ``index`` and ``lookup`` (which containers a sandbox has),
``networks``, ``images``, ``garbage``, ``pending`` and ``tasks``; ``context`` is
what the parts of a create, a stop, a start and a delete are all given.

May import the leaves, ``libpod``, ``config``, ``security``, ``sandbox``, ``pair``
and ``host``; never ``watch``, the edge or ``cli``.
"""

from .core import Driver

__all__ = ["Driver", "events", "observer"]
