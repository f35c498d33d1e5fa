"""Each operator setting's names: its environment variable, flag and help line.

Pure data, read by ``config`` (flags, environment, error messages) and by the
check for unknown ``OPENSHELL_*`` variables. Settings the upstream standalone
Rust driver has keep its environment names and flag spellings (as aliases), so
the pex is a drop-in for it; podmand's own settings use ``PODMAND_``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

import msgspec

from ..errors import ConfigError
from .schema import Settings

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


@dataclass(frozen=True)
class Option:
    """One setting's names; ``field`` is its key in ``Settings`` and in the TOML file."""

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
        "resync_interval_silent",
        "PODMAND_RESYNC_INTERVAL_SILENT",
        "--resync-interval-silent",
        "seconds between those comparisons while Podman's event stream is silent (the event podmand causes to "
        "prove it live did not arrive), never fewer than resync_interval's; 0: resync_interval",
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
    Option(
        "network_prefix",
        "PODMAND_NETWORK_PREFIX",
        "--network-prefix",
        "prefix length of each new workspace network, 16-29 (0: the smallest from /24 to /16 that holds "
        "the sandboxes this host's subordinate ids allow under userns=auto; /16 for other modes)",
    ),
    Option(
        "network_pool",
        "PODMAND_NETWORK_POOL",
        "--network-pool",
        "IPv4 range new workspace networks' subnets are carved from, clear of Podman's other networks",
    ),
    Option(
        "exit_watch",
        "PODMAND_EXIT_WATCH",
        "--exit-watch",
        "how exits are seen: events (Podman's event stream, and conmon's exit files on the same host) or wait "
        "(also one libpod /wait per running container: Podman CPU per container)",
    ),
    # (operator settings: add new options above this line)
)
LIST_FIELDS = {"uidmap", "gidmap", "allowed_peer_uids", "cdi_spec_dirs"}
BOOL_FIELDS = {
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
SECONDS = {"podman_wait", "podman_down_grace", "stop_timeout", "health_check_interval", "resync_interval",
           "resync_interval_silent", "gc_grace", "pull_inactivity_timeout"}


def unknown_env(environ: Mapping[str, str]) -> list[str]:
    """``OPENSHELL_*`` names podmand does not read, sorted: a typo or another driver's
    setting would otherwise be ignored without a word."""
    known = {opt.env for opt in OPTIONS} | {ADMISSION_JSON_ENV} | IGNORED_ENV
    return sorted(name for name in environ if name.startswith("OPENSHELL_") and name not in known)


def describe(field: str) -> str:
    """``field (--flag / VARIABLE)``: how every message names a setting."""
    for opt in OPTIONS:
        if opt.field == field:
            return f"{field} ({opt.flag} / {opt.env})"
    return field


def invalid(field: str, why: str) -> ConfigError:
    """The error for a bad value of ``field``, naming its flag and variable."""
    return ConfigError(f"invalid setting {describe(field)}: {why}")


_FIELD_TYPES: dict[str, Any] = {f.name: f.type for f in msgspec.structs.fields(Settings)}


def field_types() -> dict[str, Any]:
    """Each setting's type, by field name."""
    return _FIELD_TYPES


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
