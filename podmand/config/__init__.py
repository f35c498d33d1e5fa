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
"""

from .defaults import default_socket, default_state_dir, driver_socket
from .loading import Check, add_arguments, load, pull_policy, startup_warnings
from .options import describe, expected_value, invalid, mismatch
from .schema import DEFAULT_ADMISSION_LABELS, OVERFLOW_UID, PULL_POLICIES, Settings

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
