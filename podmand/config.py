"""Settings: one msgspec struct, from defaults < TOML file < environment < flags.

This module owns the schema and its loading; each setting's flag and variable
names are in ``configoptions``, the checks run after loading in ``configchecks``.
"""

from __future__ import annotations

import argparse
import os
import re
import tomllib
from collections.abc import Mapping
from typing import Any, Literal, get_args, get_origin

import msgspec

from .configoptions import ADMISSION_JSON_ENV, BOOL_FIELDS, LIST_FIELDS, OPTIONS, SECONDS, unknown_env
from .errors import StartupError

DEFAULT_ADMISSION_LABELS = {
    "openshell.ai/sandbox-attachable": "true",
    "openshell.ai/workspace": "${workspace}",
}
OVERFLOW_UID = 65534  # how the kernel shows a uid that is not mapped into our user namespace
PULL_POLICIES = ("always", "missing", "never", "newer")
# Upstream's ImagePullPolicy spells Podman's "missing" as IfNotPresent (its launcher: if_not_present).
_PULL_ALIASES = {"ifnotpresent": "missing", "if_not_present": "missing", "if-not-present": "missing"}


class ConfigError(StartupError):
    """A setting is invalid; the message names it."""


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    socket: str = ""
    listen_tcp: str = ""
    podman_socket: str = ""
    podman_wait: float = 3.0
    podman_autostart: bool = True
    podman_down_grace: float = 15.0
    sandbox_image: str = "ghcr.io/nvidia/openshell-community/sandboxes/base:latest"
    image_pull_policy: Literal["always", "missing", "never", "newer"] = "missing"
    supervisor_image: str = "ghcr.io/nvidia/openshell/supervisor:latest"
    grpc_endpoint: str = ""
    gateway_port: int = 17670
    network_name: str = "openshell"
    host_gateway_ip: str = ""
    ssh_socket_path: str = "/run/openshell/ssh.sock"
    stop_timeout: int = 45
    pids_limit: int = 2048
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    userns: str = "auto"
    uidmap: list[str] = msgspec.field(default_factory=list)
    gidmap: list[str] = msgspec.field(default_factory=list)
    enable_bind_mounts: bool = False
    health_check_interval: int = 0
    allow_driver_config: bool = False
    admission_enabled: bool = True
    admission_labels: dict[str, str] = msgspec.field(default_factory=lambda: dict(DEFAULT_ADMISSION_LABELS))
    telemetry_enabled: bool = True
    state_dir: str = ""
    log_level: str = "info"
    log_format: Literal["human", "json"] = "human"
    require_launch_auth: bool = False
    resync_interval: float = 30.0
    resync_interval_silent: float = 5.0
    gc_grace: float = 300.0
    watch_buffer: int = 1024
    allow_host_userns: bool = False
    allowed_peer_uids: list[int] = msgspec.field(default_factory=list)
    registry_auth_file: str = ""
    pull_inactivity_timeout: float = 600.0
    https_proxy: str | None = None  # None: unset (upstream refuses a set but empty value)
    no_proxy: str | None = None
    proxy_auth_file: str | None = None
    proxy_auth_allow_insecure: bool = False
    proxy_connect_by_hostname: bool = False
    proxy_ca_bundle: str | None = None
    default_cpu_limit: str = "2"
    default_memory_limit: str = "4Gi"
    cdi_spec_dirs: list[str] = msgspec.field(default_factory=lambda: ["/etc/cdi", "/var/run/cdi"])
    selinux: Literal["auto", "on", "off"] = "auto"
    rootfs_staging_dir: str = ""  # "": <state_dir>/rootfs-staging (resolved at start: rootfs.prepare_staging)
    rootfs_max_bytes: int = 8 * 2**30  # 0: rootfs tar sources unsupported (advertised as 0)
    network_prefix: int = 0  # 0: sized from the host's userns=auto capacity (capacity.network_prefix)
    network_pool: str = "10.128.0.0/9"
    exit_watch: Literal["events", "wait"] = "events"
    # (operator settings: add new fields above this line)

    @property
    def tls_enabled(self) -> bool:
        return bool(self.tls_ca)

    @property
    def endpoint(self) -> str:
        """The gateway URL as seen from inside a sandbox."""
        if self.grpc_endpoint:
            return self.grpc_endpoint
        scheme = "https" if self.tls_enabled else "http"
        return f"{scheme}://host.containers.internal:{self.gateway_port}"

    @property
    def userns_base(self) -> str:
        return self.userns.split(":", 1)[0]


_FALSE = {"0", "false", "no", "off"}
_TRUE = {"1", "true", "yes", "on"}
_FIELD_TYPES: dict[str, Any] = {f.name: f.type for f in msgspec.structs.fields(Settings)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (keys are the field names in README)")
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


def _describe(field: str) -> str:
    for opt in OPTIONS:
        if opt.field == field:
            return f"{field} ({opt.flag} / {opt.env})"
    return field


def _coerce_bool(field: str, value: Any) -> Any:
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ConfigError(f"invalid setting {_describe(field)}: expected true or false, got {value!r}")
    return value


def _words(kind: Any, seconds: bool) -> str:
    """A setting's type in an operator's words (never msgspec's "Expected `int`")."""
    unit = " of seconds" if seconds else ""
    if kind is bool:
        return "true or false"
    if kind is int:
        return f"a whole number{unit}"
    if kind is float:
        return f"a number{unit}"
    if get_origin(kind) is Literal:
        return "one of: " + ", ".join(get_args(kind))
    if get_origin(kind) is list:
        return f"a list of {_words(get_args(kind)[0], seconds).removeprefix('a ')}s"
    if get_origin(kind) is dict:
        return "a table of strings"
    return "a string"


def expected_value(field: str, element: bool = False) -> str:
    """What ``field`` takes (``element``: one entry of a list setting)."""
    kind = _FIELD_TYPES[field]
    if element and get_origin(kind) is list:
        kind = get_args(kind)[0]
    return _words(kind, field in SECONDS)


def mismatch(wanted: str, value: Any) -> str:
    """``expected <wanted>, got <value>`` (a semicolon when ``wanted`` is a list of choices)."""
    return f"expected {wanted}{';' if ',' in wanted else ','} got {value!r}"


def _type_error(exc: msgspec.ValidationError, raw: Mapping[str, Any], config_file: str) -> ConfigError:
    text = str(exc)
    unknown = re.search(r"unknown field `([^`]+)`", text)
    if unknown:
        return ConfigError(
            f"unknown setting {unknown.group(1)!r} in config file {config_file or '(none)'}: "
            "its keys are the names in the first column of the README's Configuration table"
        )
    match = re.search(r"at `\$\.(\w+)(?:\[(\d+)\])?", text)
    if not match or match.group(1) not in _FIELD_TYPES:
        return ConfigError(f"invalid settings: {text}")
    field, index = match.group(1), match.group(2)
    value = raw.get(field)
    if index is not None and isinstance(value, list) and int(index) < len(value):
        value = value[int(index)]
    wanted = expected_value(field, element=index is not None)
    return ConfigError(f"invalid setting {_describe(field)}: {mismatch(wanted, value)}")


def _tidy(field: str, value: Any) -> Any:
    """Forgive what a shell adds or an operator types: spaces around numbers, upper-case choices."""
    kind = _FIELD_TYPES.get(field)
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
        raise ConfigError(
            f"invalid setting {_describe('image_pull_policy')}: invalid pull policy {value!r}; expected one of: "
            f"{', '.join(PULL_POLICIES)} (or upstream's Always, IfNotPresent, Never, Newer)"
        )
    return policy


def load(
    args: argparse.Namespace | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Merge defaults, the TOML file, the environment and flags; validate."""
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
    from .configchecks import validate  # it imports modules that import this one: here, not at the top

    validate(settings)
    return settings


_ADMISSION_JSON = f"admission config (--admission-config-json / {ADMISSION_JSON_ENV})"


def _admission_from_json(text: str) -> dict[str, Any]:
    try:
        data = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"invalid setting {_ADMISSION_JSON}: {exc}") from exc
    if not isinstance(data, dict) or set(data) - {"allow_driver_config", "resource_admission"}:
        raise ConfigError(
            f"invalid setting {_ADMISSION_JSON}: expected an object with allow_driver_config and resource_admission"
        )
    out: dict[str, Any] = {}
    if "allow_driver_config" in data:
        out["allow_driver_config"] = data["allow_driver_config"]
    adm = data.get("resource_admission")
    if adm is not None:
        if not isinstance(adm, dict) or set(adm) - {"enabled", "required_labels"}:
            raise ConfigError(f"invalid setting {_ADMISSION_JSON}: bad resource_admission")
        if "enabled" in adm:
            out["admission_enabled"] = adm["enabled"]
        if "required_labels" in adm:
            out["admission_labels"] = adm["required_labels"]
    return out


def url_scheme(url: str) -> str:
    """The lower-case scheme of ``url``, '' without one."""
    scheme, sep, _ = url.partition("://")
    return scheme.strip().lower() if sep else ""


def startup_warnings(s: Settings, environ: Mapping[str, str]) -> list[str]:
    """What is accepted but probably not meant; logged once at start (names only, never values)."""
    out = []
    unknown = unknown_env(environ)
    if unknown:
        out.append(f"ignoring unknown environment variables: {', '.join(unknown)}")
    if s.tls_enabled and url_scheme(s.grpc_endpoint) == "http":
        out.append(
            f"{_describe('grpc_endpoint')} is http:// while tls_ca/tls_cert/tls_key are set: "
            "the supervisor connects without TLS and ignores the TLS files"
        )
    if OVERFLOW_UID in s.allowed_peer_uids:
        out.append(
            f"{_describe('allowed_peer_uids')} lists {OVERFLOW_UID}: every uid outside podmand's user namespace "
            "(and the host's nobody) appears as that one, so all of them may use the driver socket"
        )
    return out


def default_state_dir() -> str:
    if os.geteuid() == 0:
        return "/var/lib/podmand"
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "podmand")


def default_socket() -> str:
    if os.geteuid() == 0:
        return "/run/podmand/compute-driver.sock"
    # Beside Podman's own sockets, in the directory Podman picks (a /tmp fallback without logind).
    from .rundir import resolve

    return os.path.join(resolve().path, "podmand", "compute-driver.sock")


def driver_socket(explicit: str | None) -> str:
    """The driver socket a client should use: flag, then the server's own setting, then the default."""
    path = (explicit or os.environ.get("OPENSHELL_COMPUTE_DRIVER_SOCKET") or default_socket()).removeprefix("unix://")
    return os.path.abspath(path)  # gRPC reads unix://rel.sock as a host name
