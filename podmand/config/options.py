"""Each setting as the operator meets it: its names, what it takes in words, its range.

All of it is read from the schema's :class:`~.schema.Setting` beside each field:
the flags, the variables, the unknown-``OPENSHELL_*`` check, and the words of
every message (``describe``, ``invalid``, ``expected_value``, ``range_words``).
Settings the upstream standalone Rust driver has keep its environment names and
flag spellings (as aliases), so the pex is a drop-in for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin, get_type_hints

from ..errors import ConfigError
from .schema import Setting, Settings

ADMISSION_JSON_ENV = "OPENSHELL_DRIVER_ADMISSION_CONFIG_JSON"
# Set by upstream's launcher (e2e/with-podman-gateway.sh) for its standalone driver, and
# deliberately ignored by podmand, so they are not reported as unknown at start:
IGNORED_ENV: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Removed:
    """A setting podmand no longer has. Set anywhere (file, variable, flag) it stops the
    start with one line saying why, rather than being ignored: the operator who set it
    expected something of it."""

    field: str
    env: str
    flag: str
    why: str

    def error(self) -> ConfigError:
        return ConfigError(f"setting {self.field} ({self.flag} / {self.env}) was removed: {self.why}; "
                           "remove it from podmand's configuration")


REMOVED: tuple[Removed, ...] = (
    Removed("topology", "PODMAND_TOPOLOGY", "--topology",
            "the single-container layout is gone, every sandbox is a workload and a supervisor container "
            "(docs/sandboxes.md)"),
    Removed("require_launch_auth", "PODMAND_REQUIRE_LAUNCH_AUTHENTICATION", "--require-launch-authentication",
            "every create and start requires the gateway's launch_authentication bundle now (docs/sandboxes.md)"),
    Removed("network_prefix", "PODMAND_NETWORK_PREFIX", "--network-prefix",
            "podmand makes no workspace network now: a workload has no network, its supervisor uses the host's "
            "(docs/sandboxes.md)"),
    Removed("network_pool", "PODMAND_NETWORK_POOL", "--network-pool",
            "podmand makes no workspace network now: a workload has no network, its supervisor uses the host's "
            "(docs/sandboxes.md)"),
)


@dataclass(frozen=True)
class Option:
    """One setting with a flag and a variable; ``field`` is its key in ``Settings`` and the TOML file."""

    field: str
    kind: Any  # the field's type, Annotated stripped
    setting: Setting

    @property
    def env(self) -> str:
        return self.setting.env

    @property
    def flag(self) -> str:
        return self.setting.flag

    @property
    def aliases(self) -> tuple[str, ...]:
        return self.setting.aliases

    @property
    def help(self) -> str:
        """The --help line: what it is, then its range where it has one."""
        limits = range_words(self.field)
        return f"{self.setting.help}; {limits}" if limits else self.setting.help


def _declared() -> dict[str, tuple[Any, Setting]]:
    out = {}
    for field, hint in get_type_hints(Settings, include_extras=True).items():
        kind, *meta = get_args(hint)
        setting = next(m for m in meta if isinstance(m, Setting))
        out[field] = (kind, setting)
    return out


DECLARED = _declared()  # every field: (type, Setting), in declaration order
OPTIONS: tuple[Option, ...] = tuple(Option(f, k, s) for f, (k, s) in DECLARED.items() if s.flag)
LIST_FIELDS = {f for f, (k, _) in DECLARED.items() if get_origin(k) is list}
BOOL_FIELDS = {f for f, (k, _) in DECLARED.items() if k is bool}


def unknown_env(environ: Mapping[str, str]) -> list[str]:
    """``OPENSHELL_*`` names podmand does not read, sorted: a typo or another driver's
    setting would otherwise be ignored without a word."""
    known = {opt.env for opt in OPTIONS} | {ADMISSION_JSON_ENV} | IGNORED_ENV
    return sorted(name for name in environ if name.startswith("OPENSHELL_") and name not in known)


def describe(field: str) -> str:
    """``field (--flag / VARIABLE)``: how every message names a setting."""
    setting = DECLARED[field][1] if field in DECLARED else None
    return f"{field} ({setting.flag} / {setting.env})" if setting and setting.flag else field


def invalid(field: str, why: str) -> ConfigError:
    """The error for a bad value of ``field``, naming its flag and variable."""
    return ConfigError(f"invalid setting {describe(field)}: {why}")


FIELD_TYPES: dict[str, Any] = {f: k for f, (k, _) in DECLARED.items()}  # Annotated stripped


def _words(kind: Any, unit: str) -> str:
    """A setting's type in an operator's words (never msgspec's "Expected `int`")."""
    of = f" of {unit}" if unit else ""
    if kind is bool:
        return "true or false"
    if kind is int:
        return f"a whole number{of}"
    if kind is float:
        return f"a number{of}"
    if get_origin(kind) is Literal:
        return "one of: " + ", ".join(get_args(kind))
    if get_origin(kind) is list:
        return f"a list of {_words(get_args(kind)[0], unit).removeprefix('a ')}s"
    if get_origin(kind) is dict:
        return "a table of strings"
    return "a string"


def expected_value(field: str, element: bool = False) -> str:
    """What ``field`` takes (``element``: one entry of a list setting)."""
    kind, setting = DECLARED[field]
    if element and get_origin(kind) is list:
        kind = get_args(kind)[0]
    return _words(kind, setting.unit)


def mismatch(wanted: str, value: Any) -> str:
    """``expected <wanted>, got <value>`` (a semicolon when ``wanted`` is a list of choices)."""
    return f"expected {wanted}{';' if ',' in wanted else ','} got {value!r}"


def range_words(field: str) -> str:
    """A number's range as --help, the table and a refusal say it ('' without one):
    ``1 to 65535``, ``at least 1``, ``0 or more (0: off)``, ``8 to 29 (or 0: sized from the host)``."""
    s = DECLARED[field][1]
    if s.minimum is None and s.maximum is None:
        return f"0: {s.zero}" if s.zero else ""
    if s.maximum is not None:
        span = f"{s.minimum} to {s.maximum}"
    else:
        span = "0 or more" if s.minimum == 0 else f"at least {s.minimum}"
    if not s.zero:
        return span
    return f"{span} (0: {s.zero})" if s.minimum == 0 else f"{span} (or 0: {s.zero})"


def out_of_range(field: str, value: float) -> bool:
    s = DECLARED[field][1]
    if value == 0 and s.zero:
        return False
    return (s.minimum is not None and value < s.minimum) or (s.maximum is not None and value > s.maximum)
