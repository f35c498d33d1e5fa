"""Loading the settings: defaults < TOML file < environment < flags, then the checks.

``load`` is the one way in: it coerces what shells and TOML files give, turns
msgspec's type errors into an operator's words, runs ``checks.validate`` and the
checks its caller hands it (each feature's own, from the layers above), and
works out the defaults that depend on the host (``defaults``).
"""

from __future__ import annotations

import argparse
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, get_origin

import msgspec

from ..errors import ConfigError
from .checks import url_scheme, validate
from .defaults import default_socket, default_state_dir
from .options import (
    ADMISSION_JSON_ENV,
    BOOL_FIELDS,
    FIELD_TYPES,
    LIST_FIELDS,
    OPTIONS,
    REMOVED,
    describe,
    expected_value,
    invalid,
    mismatch,
    unknown_env,
)
from .schema import OVERFLOW_UID, PULL_POLICIES, Settings

# Upstream's ImagePullPolicy spells Podman's "missing" as IfNotPresent (its launcher: if_not_present).
_PULL_ALIASES = {"ifnotpresent": "missing", "if_not_present": "missing", "if-not-present": "missing"}
Check = Callable[[Settings], None]


_FALSE = {"0", "false", "no", "off"}
_TRUE = {"1", "true", "yes", "on"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="TOML settings file (keys: the Key column of docs/configuration.md in podmand's repository)",
    )
    parser.add_argument(
        "--admission-config-json",
        metavar="JSON",
        default=argparse.SUPPRESS,
        help=f"upstream's driver admission policy: allow_driver_config and resource_admission [{ADMISSION_JSON_ENV}]",
    )
    for opt in OPTIONS:
        kwargs: dict[str, Any] = {"dest": opt.field, "default": argparse.SUPPRESS, "help": f"{opt.help} [{opt.env}]"}
        if opt.field in LIST_FIELDS:
            kwargs["action"] = "append"
        if opt.field in BOOL_FIELDS:  # a bare switch means true, as upstream's --enable-bind-mounts
            kwargs.update(nargs="?", const="true", metavar="BOOL")
        parser.add_argument(opt.flag, *opt.aliases, **kwargs)
    for gone in REMOVED:  # accepted only to be refused in words (load), not an argparse usage error
        parser.add_argument(gone.flag, dest=_removed_dest(gone.field), default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)


def _removed_dest(field: str) -> str:
    return f"removed_{field}"


def _coerce_bool(field: str, value: Any) -> Any:
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise invalid(field, f"expected true or false, got {value!r}")
    return value


def _type_error(exc: msgspec.ValidationError, raw: Mapping[str, Any], config_file: str) -> ConfigError:
    text = str(exc)
    unknown = re.search(r"unknown field `([^`]+)`", text)
    if unknown:
        return ConfigError(
            f"unknown setting {unknown.group(1)!r} in config file {config_file or '(none)'}: "
            "its keys are the names in the Key column of docs/configuration.md in podmand's repository"
        )
    match = re.search(r"at `\$\.(\w+)(?:\[(\d+)\])?", text)
    if not match or match.group(1) not in FIELD_TYPES:
        return ConfigError(f"invalid settings: {text}")
    field, index = match.group(1), match.group(2)
    value = raw.get(field)
    if index is not None and isinstance(value, list) and int(index) < len(value):
        value = value[int(index)]
    wanted = expected_value(field, element=index is not None)
    return invalid(field, mismatch(wanted, value))


def _tidy(field: str, value: Any) -> Any:
    """Forgive what a shell adds or an operator types: spaces around numbers, upper-case choices."""
    kind = FIELD_TYPES.get(field)
    if isinstance(value, str) and kind in (int, float):
        return value.strip()
    if isinstance(value, str) and get_origin(kind) is Literal:
        return value.strip().lower()
    return value


def pull_policy(value: str) -> str:
    """Podman's name for a pull policy, from either spelling (any case): a launcher
    written for upstream passes its ImagePullPolicy names."""
    lowered = value.strip().lower()
    policy = _PULL_ALIASES.get(lowered, lowered)
    if policy not in PULL_POLICIES:
        raise invalid(
            "image_pull_policy",
            f"invalid pull policy {value!r}; expected one of: {', '.join(PULL_POLICIES)} "
            "(or upstream's Always, IfNotPresent, Never, Newer)",
        )
    return policy


def load(
    args: argparse.Namespace | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    checks: Iterable[Check],
) -> Settings:
    """Merge defaults, the TOML file, the environment and flags; validate with
    ``checks.validate`` and then each of ``checks`` (the features' own: a caller
    passes ``sandbox.settings.CHECKS``); fill in the host's default paths."""
    env = dict(os.environ if environ is None else environ)
    flags = dict(vars(args)) if args is not None else {}
    raw: dict[str, Any] = {}

    config_file = flags.pop("config", None) or env.get("PODMAND_CONFIG")
    if config_file:
        try:
            with open(config_file, "rb") as fh:
                raw.update(tomllib.load(fh))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {config_file}: {exc}") from exc

    for gone in REMOVED:
        if gone.field in raw or env.get(gone.env) or _removed_dest(gone.field) in flags:
            raise gone.error()
    for opt in OPTIONS:
        if opt.env in env and env[opt.env] != "":
            value: Any = env[opt.env]
            if opt.field in LIST_FIELDS:
                value = [v.strip() for v in value.split(",") if v.strip()]
            raw[opt.field] = value
    admission_json = flags.pop("admission_config_json", None) or env.get(ADMISSION_JSON_ENV, "")
    if admission_json:
        raw.update(_admission_from_json(admission_json))
    known = {opt.field for opt in OPTIONS}
    raw.update({k: v for k, v in flags.items() if k in known})

    for field in BOOL_FIELDS & raw.keys():
        raw[field] = _coerce_bool(field, raw[field])
    if isinstance(raw.get("image_pull_policy"), str):
        raw["image_pull_policy"] = pull_policy(raw["image_pull_policy"])
    raw = {field: _tidy(field, value) for field, value in raw.items()}
    try:
        settings = msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise _type_error(exc, raw, config_file or "") from None
    validate(settings)
    for check in checks:
        check(settings)
    settings.socket = settings.socket.removeprefix("unix://") or default_socket()
    settings.state_dir = settings.state_dir or default_state_dir()
    return settings


_ADMISSION_JSON = f"admission config (--admission-config-json / {ADMISSION_JSON_ENV})"


def _bad_admission(why: str) -> ConfigError:
    return ConfigError(f"invalid setting {_ADMISSION_JSON}: {why}")


def _admission_from_json(text: str) -> dict[str, Any]:
    try:
        data = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise _bad_admission(str(exc)) from exc
    if not isinstance(data, dict) or set(data) - {"allow_driver_config", "resource_admission"}:
        raise _bad_admission("expected an object with allow_driver_config and resource_admission")
    out: dict[str, Any] = {}
    if "allow_driver_config" in data:
        out["allow_driver_config"] = data["allow_driver_config"]
    adm = data.get("resource_admission")
    if adm is not None:
        if not isinstance(adm, dict) or set(adm) - {"enabled", "required_labels"}:
            raise _bad_admission("bad resource_admission")
        if "enabled" in adm:
            out["admission_enabled"] = adm["enabled"]
        if "required_labels" in adm:
            out["admission_labels"] = adm["required_labels"]
    return out


def startup_warnings(s: Settings, environ: Mapping[str, str]) -> list[str]:
    """What is accepted but probably not meant; logged once at start (names only, never values)."""
    out = []
    unknown = unknown_env(environ)
    if unknown:
        out.append(f"ignoring unknown environment variables: {', '.join(unknown)}")
    if s.tls_enabled and url_scheme(s.grpc_endpoint) == "http":
        out.append(
            f"{describe('grpc_endpoint')} is http:// while tls_ca/tls_cert/tls_key are set: "
            "the supervisor connects without TLS and ignores the TLS files"
        )
    if OVERFLOW_UID in s.allowed_peer_uids:
        out.append(
            f"{describe('allowed_peer_uids')} lists {OVERFLOW_UID}: every uid outside podmand's user namespace "
            "(and the host's nobody) appears as that one, so all of them may use the driver socket"
        )
    return out
