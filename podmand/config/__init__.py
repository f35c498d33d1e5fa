"""Operator settings: what each one is called and takes, how they load, and their checks.

- ``schema``: the ``Settings`` struct, each field's type and default.
- ``options``: each field's flag, variable and help; ``describe`` and ``invalid``
  name a setting in every message.
- ``checks``: what a type cannot say (ranges, formats, settings that only make
  sense together). Each feature checks its own settings beside its code
  (``sandbox.settings.CHECKS``) and the caller of ``load`` hands them in.
- ``loading``: defaults < TOML file < environment < flags.
- ``defaults`` and ``rundir``: the host paths ``socket`` and ``state_dir`` default to.

Imports only the leaves (``errors``); everything above reads ``Settings`` from here.
Importing the package loads ``defaults`` alone: the rest (msgspec, TOML, the checks)
loads when first named, so the tools that only need a default path (``ctl``, ``health``,
``--version``'s socket discovery) start without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .defaults import default_socket, default_state_dir, driver_socket

if TYPE_CHECKING:
    from .loading import Check, add_arguments, load, pull_policy, startup_warnings
    from .options import describe, expected_value, invalid, mismatch
    from .schema import DEFAULT_ADMISSION_LABELS, OVERFLOW_UID, PULL_POLICIES, Settings

_LAZY = {
    **dict.fromkeys(("Check", "add_arguments", "load", "pull_policy", "startup_warnings"), "loading"),
    **dict.fromkeys(("describe", "expected_value", "invalid", "mismatch"), "options"),
    **dict.fromkeys(("DEFAULT_ADMISSION_LABELS", "OVERFLOW_UID", "PULL_POLICIES", "Settings"), "schema"),
}


def __getattr__(name: str) -> Any:
    """A name of ``loading``, ``options`` or ``schema``, its module imported on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_ADMISSION_LABELS",
    "OVERFLOW_UID",
    "PULL_POLICIES",
    "Check",
    "Settings",
    "add_arguments",
    "default_socket",
    "default_state_dir",
    "describe",
    "driver_socket",
    "expected_value",
    "invalid",
    "load",
    "mismatch",
    "pull_policy",
    "rundir",
    "startup_warnings",
]
