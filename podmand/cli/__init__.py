"""The operator tools: ``podmand ctl``, ``doctor``, ``health``, ``completion`` and ``--version``.

``parser`` builds the command line (each tool adds its own subcommand); ``ctl/``
and ``doctor/`` are the two large tools. They talk to the driver socket or to
Podman: they may import the leaves, ``libpod``, ``config``, ``security``,
``sandbox``, ``pair``, ``host`` and the edge's ``negotiation`` (the contract's constants),
never ``driver``, ``watch``, ``servicer`` or ``server``.
"""

__all__ = [
    "parser",
]
