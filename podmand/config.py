"""Settings: one msgspec struct, from defaults < TOML file < environment < flags.

Settings the upstream standalone Rust driver has keep its environment names,
so the pex is a drop-in for it; podmand's own settings use ``PODMAND_``.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

import msgspec

DEFAULT_ADMISSION_LABELS = {
    "openshell.ai/sandbox-attachable": "true",
    "openshell.ai/workspace": "${workspace}",
}
OVERFLOW_UID = 65534  # how the kernel shows a uid that is not mapped into our user namespace
USERNS_MODES = ("auto", "host", "keep-id", "nomap", "private")
PULL_POLICIES = ("always", "missing", "never", "newer")
# Upstream's ImagePullPolicy spells Podman's "missing" as IfNotPresent (its launcher: if_not_present).
_PULL_ALIASES = {"ifnotpresent": "missing", "if_not_present": "missing", "if-not-present": "missing"}
ADMISSION_JSON_ENV = "OPENSHELL_DRIVER_ADMISSION_CONFIG_JSON"
# Set by upstream's launcher (e2e/with-podman-gateway.sh) for its standalone driver, and
# deliberately ignored by podmand, so they are not reported as unknown at start:
IGNORED_ENV = frozenset(
    {
        # The V2 split topology's sandbox runtime image; podmand runs the supervisor
        # from OPENSHELL_SUPERVISOR_IMAGE inside the one sandbox container.
        "OPENSHELL_SANDBOX_RUNTIME_IMAGE",
    }
)


class ConfigError(Exception):
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


@dataclass(frozen=True)
class Option:
    field: str
    env: str
    flag: str
    help: str
    aliases: tuple[str, ...] = ()  # upstream's flag names, so its command lines work unchanged


OPTIONS: tuple[Option, ...] = (
    Option(
        "socket", "OPENSHELL_COMPUTE_DRIVER_SOCKET", "--socket", "gRPC Unix socket to serve on", ("--bind-socket",)
    ),
    Option(
        "listen_tcp",
        "OPENSHELL_COMPUTE_DRIVER_BIND",
        "--listen-tcp",
        "also serve on this loopback host:port (development)",
        ("--bind-address",),
    ),
    Option("podman_socket", "OPENSHELL_PODMAN_SOCKET", "--podman-socket", "libpod API socket (default: discovered)"),
    Option(
        "podman_wait",
        "PODMAND_PODMAN_WAIT",
        "--podman-wait",
        "seconds to wait for a Podman socket that exists but does not answer",
    ),
    Option(
        "podman_autostart",
        "PODMAND_PODMAN_AUTOSTART",
        "--podman-autostart",
        "when no Podman API socket answers, start the user's own 'podman system service' and stop it at exit",
    ),
    Option(
        "podman_down_grace",
        "PODMAND_PODMAN_DOWN_GRACE",
        "--podman-down-grace",
        "seconds Podman may be unreachable before the health service says NOT_SERVING",
    ),
    Option("sandbox_image", "OPENSHELL_SANDBOX_IMAGE", "--sandbox-image", "default sandbox image"),
    Option(
        "image_pull_policy",
        "OPENSHELL_SANDBOX_IMAGE_PULL_POLICY",
        "--sandbox-image-pull-policy",
        "always, missing, never or newer (upstream's IfNotPresent means missing)",
    ),
    Option("supervisor_image", "OPENSHELL_SUPERVISOR_IMAGE", "--supervisor-image", "image holding /openshell-sandbox"),
    Option("grpc_endpoint", "OPENSHELL_GRPC_ENDPOINT", "--grpc-endpoint", "gateway URL given to sandboxes"),
    Option("gateway_port", "OPENSHELL_GATEWAY_PORT", "--gateway-port", "gateway port for the default endpoint"),
    Option(
        "network_name",
        "OPENSHELL_NETWORK_NAME",
        "--network-name",
        "Podman network of the default workspace; workspace w gets <name>-w",
    ),
    Option(
        "host_gateway_ip", "OPENSHELL_PODMAN_HOST_GATEWAY_IP", "--host-gateway-ip", "IP for host.containers.internal"
    ),
    Option(
        "ssh_socket_path",
        "OPENSHELL_SANDBOX_SSH_SOCKET_PATH",
        "--sandbox-ssh-socket-path",
        "supervisor SSH socket in the sandbox",
    ),
    Option("stop_timeout", "OPENSHELL_STOP_TIMEOUT", "--stop-timeout", "seconds from SIGTERM to SIGKILL"),
    Option(
        "pids_limit",
        "OPENSHELL_SANDBOX_PIDS_LIMIT",
        "--sandbox-pids-limit",
        "pids limit per sandbox (0: runtime default)",
    ),
    Option("tls_ca", "OPENSHELL_PODMAN_TLS_CA", "--podman-tls-ca", "client CA for the sandbox's gateway connection"),
    Option("tls_cert", "OPENSHELL_PODMAN_TLS_CERT", "--podman-tls-cert", "client certificate"),
    Option("tls_key", "OPENSHELL_PODMAN_TLS_KEY", "--podman-tls-key", "client key"),
    Option("userns", "OPENSHELL_PODMAN_USERNS", "--userns", "auto[:opts], host, keep-id[:opts], nomap or private"),
    Option(
        "uidmap",
        "OPENSHELL_PODMAN_UIDMAP",
        "--uidmap",
        "container_id:host_id:size (userns=private; repeatable, comma-separated in env)",
    ),
    Option("gidmap", "OPENSHELL_PODMAN_GIDMAP", "--gidmap", "container_id:host_id:size (userns=private)"),
    Option(
        "enable_bind_mounts",
        "OPENSHELL_ENABLE_BIND_MOUNTS",
        "--enable-bind-mounts",
        "allow host bind mounts in driver_config",
    ),
    Option(
        "health_check_interval",
        "OPENSHELL_HEALTH_CHECK_INTERVAL_SECS",
        "--health-check-interval-secs",
        "probe the supervisor every N s (0: off)",
    ),
    Option(
        "allow_driver_config",
        "PODMAND_ALLOW_DRIVER_CONFIG",
        "--allow-driver-config",
        "accept per-sandbox driver_config",
    ),
    Option(
        "admission_enabled",
        "PODMAND_RESOURCE_ADMISSION",
        "--resource-admission",
        "advertise resource admission as enabled",
    ),
    Option(
        "telemetry_enabled",
        "OPENSHELL_TELEMETRY_ENABLED",
        "--telemetry-enabled",
        "value of OPENSHELL_TELEMETRY_ENABLED in sandboxes",
    ),
    Option("state_dir", "PODMAND_STATE_DIR", "--state-dir", "directory for token files and the supervisor cache"),
    Option("log_level", "OPENSHELL_LOG_LEVEL", "--log-level", "debug, info, warning or error"),
    Option("log_format", "PODMAND_LOG_FORMAT", "--log-format", "human or json (one JSON object per line)"),
    Option(
        "require_launch_auth",
        "PODMAND_REQUIRE_LAUNCH_AUTHENTICATION",
        "--require-launch-authentication",
        "refuse creates and starts without the gateway's launch_authentication bundle",
    ),
    Option(
        "resync_interval",
        "PODMAND_RESYNC_INTERVAL",
        "--resync-interval",
        "seconds between full comparisons of Podman with what watchers saw (0: off)",
    ),
    Option(
        "gc_grace",
        "PODMAND_GC_GRACE",
        "--gc-grace",
        "seconds before podmand-owned leftovers of a vanished sandbox are removed",
    ),
    Option(
        "watch_buffer",
        "PODMAND_WATCH_BUFFER",
        "--watch-buffer",
        "events buffered per watch stream before a slow one is ended",
    ),
    Option(
        "allow_host_userns",
        "PODMAND_ALLOW_HOST_USERNS",
        "--allow-host-userns",
        "let a sandbox template ask for the host user namespace (user_namespaces = false)",
    ),
    Option(
        "allowed_peer_uids",
        "PODMAND_ALLOWED_PEER_UIDS",
        "--allowed-peer-uid",
        "uids besides podmand's own and root that may connect to the driver socket (repeatable)",
    ),
    Option(
        "registry_auth_file",
        "PODMAND_REGISTRY_AUTH_FILE",
        "--registry-auth-file",
        "auth.json (Podman's format) with pull credentials, read on each pull, sent as X-Registry-Auth",
    ),
    Option(
        "pull_inactivity_timeout",
        "PODMAND_PULL_INACTIVITY_TIMEOUT",
        "--pull-inactivity-timeout",
        "seconds a pull may go without a progress line from Podman before it is abandoned (0: never)",
    ),
    Option(
        "https_proxy",
        "OPENSHELL_SANDBOX_HTTPS_PROXY",
        "--sandbox-https-proxy",
        "corporate forward proxy http://host:port, given to each sandbox's supervisor on its command line",
    ),
    Option(
        "no_proxy",
        "OPENSHELL_SANDBOX_NO_PROXY",
        "--sandbox-no-proxy",
        "comma-separated destinations the supervisor dials directly, not through https_proxy",
    ),
    Option(
        "proxy_auth_file",
        "OPENSHELL_SANDBOX_PROXY_AUTH_FILE",
        "--sandbox-proxy-auth-file",
        "file holding the proxy's user:pass, copied root-only into each sandbox",
    ),
    Option(
        "proxy_auth_allow_insecure",
        "OPENSHELL_SANDBOX_PROXY_AUTH_ALLOW_INSECURE",
        "--sandbox-proxy-auth-allow-insecure",
        "accept that proxy_auth_file's credential travels as cleartext Basic auth to the http:// proxy",
    ),
    Option(
        "proxy_connect_by_hostname",
        "OPENSHELL_SANDBOX_PROXY_CONNECT_BY_HOSTNAME",
        "--sandbox-proxy-connect-by-hostname",
        "CONNECT through the proxy by hostname instead of the validated IP",
    ),
    Option(
        "proxy_ca_bundle",
        "OPENSHELL_SANDBOX_PROXY_CA_BUNDLE",
        "--sandbox-proxy-ca-bundle",
        "PEM CA bundle of a TLS-intercepting proxy, mounted read-only into each sandbox",
    ),
    Option(
        "default_cpu_limit",
        "PODMAND_DEFAULT_CPU_LIMIT",
        "--default-cpu-limit",
        "CPU limit of a sandbox whose template sets none (a CPU quantity, or unlimited)",
    ),
    Option(
        "default_memory_limit",
        "PODMAND_DEFAULT_MEMORY_LIMIT",
        "--default-memory-limit",
        "memory limit of a sandbox whose template sets none (a memory quantity, or unlimited)",
    ),
    Option(
        "cdi_spec_dirs",
        "PODMAND_CDI_SPEC_DIRS",
        "--cdi-spec-dir",
        "directories of CDI spec files to find GPUs in (repeatable; the ones Podman reads)",
    ),
    Option(
        "selinux",
        "PODMAND_SELINUX",
        "--selinux",
        "label podmand's own bind mounts for SELinux (z/Z): auto (when Podman reports SELinux), on or off",
    ),
    Option(
        "rootfs_staging_dir",
        "PODMAND_ROOTFS_STAGING_DIR",
        "--rootfs-staging-dir",
        "directory the gateway stages rootfs tars in, advertised to it (default <state_dir>/rootfs-staging, made 0700)",
    ),
    Option(
        "rootfs_max_bytes",
        "PODMAND_ROOTFS_MAX_BYTES",
        "--rootfs-max-bytes",
        "largest rootfs tar podmand imports, in bytes (0: rootfs tar sources are not supported)",
    ),
    # (operator settings: add new options above this line)
)
_LIST_FIELDS = {"uidmap", "gidmap", "allowed_peer_uids", "cdi_spec_dirs"}
_BOOL_FIELDS = {
    "podman_autostart",
    "enable_bind_mounts",
    "allow_driver_config",
    "admission_enabled",
    "telemetry_enabled",
    "require_launch_auth",
    "allow_host_userns",
    "proxy_auth_allow_insecure",
    "proxy_connect_by_hostname",
}
# Settings counted in seconds, so their errors can say so.
_SECONDS = {"podman_wait", "podman_down_grace", "stop_timeout", "health_check_interval", "resync_interval", "gc_grace",
            "pull_inactivity_timeout"}
LOG_LEVELS = ("debug", "info", "warning", "error")
_FALSE = {"0", "false", "no", "off"}
_TRUE = {"1", "true", "yes", "on"}
_FIELD_TYPES: dict[str, Any] = {f.name: f.type for f in msgspec.structs.fields(Settings)}
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_RESERVED_ADMISSION_KEYS = {"openshell.ai/managed-by", "openshell.ai/gateway-id", "openshell.ai/sandbox-workspace"}


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
        if opt.field in _LIST_FIELDS:
            kwargs["action"] = "append"
        if opt.field in _BOOL_FIELDS:  # a bare switch means true, as upstream's --enable-bind-mounts
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


def _expected(field: str, element: bool = False) -> str:
    """What ``field`` takes (``element``: one entry of a list setting)."""
    kind = _FIELD_TYPES[field]
    if element and get_origin(kind) is list:
        kind = get_args(kind)[0]
    return _words(kind, field in _SECONDS)


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
    return ConfigError(f"invalid setting {_describe(field)}: {_mismatch(_expected(field, index is not None), value)}")


def _mismatch(wanted: str, value: Any) -> str:
    """``expected <wanted>, got <value>`` (a semicolon when ``wanted`` is a list of choices)."""
    return f"expected {wanted}{';' if ',' in wanted else ','} got {value!r}"


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
            if opt.field in _LIST_FIELDS:
                value = [v.strip() for v in value.split(",") if v.strip()]
            raw[opt.field] = value
    admission_json = flags.pop("admission_config_json", None) or env.get(ADMISSION_JSON_ENV, "")
    if admission_json:
        raw.update(_admission_from_json(admission_json))
    known = {opt.field for opt in OPTIONS}
    raw.update({k: v for k, v in flags.items() if k in known})

    for field in _BOOL_FIELDS & raw.keys():
        raw[field] = _coerce_bool(field, raw[field])
    if isinstance(raw.get("image_pull_policy"), str):
        raw["image_pull_policy"] = pull_policy(raw["image_pull_policy"])
    raw = {field: _tidy(field, value) for field, value in raw.items()}
    try:
        settings = msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise _type_error(exc, raw, config_file or "") from None
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


def _check_idmap(field: str, entries: list[str]) -> None:
    for entry in entries:
        parts = entry.split(":")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise ConfigError(
                f"invalid setting {_describe(field)}: entry {entry!r} must be 'container_id:host_id:size'"
            )
        if int(parts[2]) == 0:
            raise ConfigError(f"invalid setting {_describe(field)}: entry {entry!r}: size must be greater than 0")


def validate(s: Settings) -> None:
    def bad(field: str, why: str) -> ConfigError:
        return ConfigError(f"invalid setting {_describe(field)}: {why}")

    for field in ("stop_timeout", "pids_limit", "health_check_interval", "podman_wait", "resync_interval", "gc_grace",
                  "podman_down_grace"):
        if not math.isfinite(getattr(s, field)):
            raise bad(field, _mismatch(_expected(field), getattr(s, field)))
        if getattr(s, field) < 0:
            raise bad(field, "must be zero or greater")
    if not 0 < s.gateway_port < 65536:
        raise bad("gateway_port", "must be a TCP port (1-65535)")
    if s.watch_buffer < 1:
        raise bad("watch_buffer", "must be at least 1")
    if s.host_gateway_ip:
        try:
            ipaddress.ip_address(s.host_gateway_ip)
        except ValueError as exc:
            raise bad("host_gateway_ip", f"{s.host_gateway_ip!r} is not an IP address") from exc
    tls = {"tls_ca": s.tls_ca, "tls_cert": s.tls_cert, "tls_key": s.tls_key}
    if any(tls.values()) and not all(tls.values()):
        missing = ", ".join(_describe(k) for k, v in tls.items() if not v)
        raise ConfigError(f"partial TLS configuration: all three TLS paths must be set together; missing {missing}")
    for key, path in tls.items():
        if path and not os.path.isfile(path):
            raise bad(key, f"{path} is not a readable file")
    if _scheme(s.grpc_endpoint) == "https" and not s.tls_enabled:
        raise bad(
            "grpc_endpoint",
            "an https:// gateway endpoint needs TLS material: set tls_ca, tls_cert and tls_key "
            "(--podman-tls-ca/-cert/-key / OPENSHELL_PODMAN_TLS_CA/_CERT/_KEY); without them the "
            "supervisor exits with 'OPENSHELL_TLS_CA is required'",
        )
    if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", s.network_name):
        raise bad("network_name", "must match [a-zA-Z0-9][a-zA-Z0-9_.-]*")
    if not s.ssh_socket_path.startswith("/"):
        raise bad("ssh_socket_path", "must be an absolute path")
    if s.log_level.lower() not in (*LOG_LEVELS, "warn"):
        raise bad("log_level", _mismatch(f"one of: {', '.join(LOG_LEVELS)}", s.log_level))
    base, _, params = s.userns.partition(":")
    if base.lower() == "no-map":
        base = "nomap"
    if base.lower() not in USERNS_MODES:
        raise bad("userns", f"unsupported userns mode {base!r}; supported modes: {', '.join(USERNS_MODES)}")
    if params and base.lower() not in ("auto", "keep-id"):
        raise bad("userns", f"userns mode {base!r} does not accept parameters")
    s.userns = base.lower() + (":" + params if params else "")
    if s.userns == "private" and not (s.uidmap and s.gidmap):
        raise bad("userns", "userns mode 'private' requires at least one uidmap and one gidmap entry")
    if (s.uidmap or s.gidmap) and s.userns != "private":
        raise bad("uidmap", "uidmap/gidmap are only valid with userns = private")
    _check_idmap("uidmap", s.uidmap)
    _check_idmap("gidmap", s.gidmap)
    if s.listen_tcp:
        host, _, port = s.listen_tcp.rpartition(":")
        host = host.strip("[]")
        try:
            loopback = ipaddress.ip_address(host).is_loopback if host != "localhost" else True
        except ValueError:
            loopback = False
        if not loopback or not port.isdigit() or not 0 < int(port) < 65536:
            raise bad("listen_tcp", "must be a loopback host:port such as 127.0.0.1:50061 (TCP has no authentication)")
    if s.admission_enabled and (
        not s.admission_labels or all(v == "${workspace}" for v in s.admission_labels.values())
    ):
        raise ConfigError("invalid resource admission: enabled admission needs at least one fixed required label")
    for key, value in s.admission_labels.items():
        if key in _RESERVED_ADMISSION_KEYS or not _LABEL_KEY.match(key):
            raise ConfigError(f"invalid resource admission label key {key!r}")
        if value != "${workspace}" and not _LABEL_VALUE.match(value):
            raise ConfigError(f"invalid resource admission label value {value!r} for {key!r}")
    from . import pullprogress, registryauth  # they use ConfigError: imported here, not at the top

    registryauth.check_settings(s)
    pullprogress.check_settings(s)
    from . import proxy  # it uses ConfigError: imported here, not at the top

    proxy.validate(s)
    from . import cdi, resources  # they use ConfigError: imported here, not at the top

    resources.check_settings(s)
    cdi.check_settings(s)
    from . import rootfs  # it uses ConfigError: imported here, not at the top

    rootfs.check_settings(s)
    # (operator settings: add one call to your own validator above this line)


def _scheme(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return scheme.strip().lower() if sep else ""


def unknown_env(environ: Mapping[str, str]) -> list[str]:
    """``OPENSHELL_*`` names podmand does not read, sorted: a typo or another driver's
    setting would otherwise be ignored without a word."""
    known = {opt.env for opt in OPTIONS} | {ADMISSION_JSON_ENV} | IGNORED_ENV
    return sorted(name for name in environ if name.startswith("OPENSHELL_") and name not in known)


def startup_warnings(s: Settings, environ: Mapping[str, str]) -> list[str]:
    """What is accepted but probably not meant; logged once at start (names only, never values)."""
    out = []
    unknown = unknown_env(environ)
    if unknown:
        out.append(f"ignoring unknown environment variables: {', '.join(unknown)}")
    if s.tls_enabled and _scheme(s.grpc_endpoint) == "http":
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
