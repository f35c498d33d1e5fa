"""The settings' schema: each setting declared once, beside its field.

A field's type and default are msgspec's; its :class:`Setting` says the rest: the
environment variable and flag (upstream's spellings where upstream has the
setting, podmand's own ``PODMAND_`` ones otherwise), the help line, the unit and
range of a number and what 0 means. The flags (``loading.add_arguments``), the
range checks (``checks.validate``), every error message (``options.invalid``) and
the reference table in docs/configuration.md (``reference``) are all read from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import msgspec

DEFAULT_ADMISSION_LABELS = {
    "openshell.ai/sandbox-attachable": "true",
    "openshell.ai/workspace": "${workspace}",
}
OVERFLOW_UID = 65534  # how the kernel shows a uid that is not mapped into our user namespace
PULL_POLICIES = ("always", "missing", "never", "newer")
SECONDS, BYTES = "seconds", "bytes"
LOG_SIZE_MIN = 64 * 1024  # well above one conmon log entry (its 8 KiB read, plus a timestamp)


@dataclass(frozen=True)
class Setting:
    """What a field is called outside the code and what it accepts beyond its type."""

    env: str
    flag: str
    help: str
    aliases: tuple[str, ...] = ()  # upstream's flag names, so its command lines work unchanged
    unit: str = ""  # SECONDS or BYTES: how errors and the table speak of a number
    minimum: int | None = None
    maximum: int | None = None
    zero: str = ""  # what 0 means (allowed even below ``minimum``)
    default: str = ""  # the table's default, when it is worked out at start
    see: str = ""  # the docs page that says more


S = Setting

# The settings come in one struct per concern, each adding to the one before (msgspec
# structs inherit their fields in order); ``Settings`` is all of them. A new setting goes
# into its concern's struct, or a new one in the chain.


class _Serving(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How podmand serves: its gRPC socket, who may call it, its own files and logs."""

    socket: Annotated[str, S(
        "OPENSHELL_COMPUTE_DRIVER_SOCKET", "--socket",
        "gRPC Unix socket to serve on (parent directory 0700, socket 0600)",
        aliases=("--bind-socket",), default="<runtime dir>/podmand/compute-driver.sock (root: /run/podmand/…)",
    )] = ""
    listen_tcp: Annotated[str, S(
        "OPENSHELL_COMPUTE_DRIVER_BIND", "--listen-tcp",
        "also serve on this loopback host:port (development: no authentication, no peer check)",
        aliases=("--bind-address",), default="off",
    )] = ""
    tls_ca: Annotated[str, S(
        "OPENSHELL_PODMAN_TLS_CA", "--podman-tls-ca",
        "CA of the sandbox's gateway connection (tls_ca, tls_cert and tls_key: all three or none)",
        default="unset",
    )] = ""
    tls_cert: Annotated[str, S(
        "OPENSHELL_PODMAN_TLS_CERT", "--podman-tls-cert",
        "client certificate of that connection",
        default="unset",
    )] = ""
    tls_key: Annotated[str, S(
        "OPENSHELL_PODMAN_TLS_KEY", "--podman-tls-key",
        "client key of that connection",
        default="unset",
    )] = ""
    allowed_peer_uids: Annotated[list[int], S(
        "PODMAND_ALLOWED_PEER_UIDS", "--allowed-peer-uid",
        "uids besides podmand's own and root that may connect to the driver socket (repeatable)",
        default="none", see="security.md",
    )] = msgspec.field(default_factory=list)
    state_dir: Annotated[str, S(
        "PODMAND_STATE_DIR", "--state-dir",
        "directory for per-sandbox files and the supervisor cache",
        default="$XDG_STATE_HOME/podmand (root: /var/lib/podmand)",
    )] = ""
    log_level: Annotated[str, S(
        "OPENSHELL_LOG_LEVEL", "--log-level",
        "debug, info, warning or error",
    )] = "info"
    log_format: Annotated[Literal["human", "json"], S(
        "PODMAND_LOG_FORMAT", "--log-format",
        "json: one object per line, RPC lines with rpc, sandbox, code and ms fields",
    )] = "human"
    otlp_endpoint: Annotated[str, S(
        "OPENSHELL_OTLP_ENDPOINT", "--otlp-endpoint",
        "export traces over OTLP/gRPC to this collector: http://host:4317, https://host:port or unix:///path",
        default="off", see="operations.md",
    )] = ""
    gateway_name: Annotated[str, S(
        "OPENSHELL_GATEWAY_NAME", "--gateway-name",
        "the gateway installation's name, the openshell.gateway.name resource attribute of exported traces",
        default="unset", see="operations.md",
    )] = ""
    telemetry_enabled: Annotated[bool, S(
        "OPENSHELL_TELEMETRY_ENABLED", "--telemetry-enabled",
        "value of OPENSHELL_TELEMETRY_ENABLED in sandboxes",
    )] = True


class _Podman(_Serving):
    """Which Podman it drives and how it keeps up with it."""

    podman_socket: Annotated[str, S(
        "OPENSHELL_PODMAN_SOCKET", "--podman-socket",
        "libpod API socket",
        default="discovered", see="podman-api.md",
    )] = ""
    podman_wait: Annotated[float, S(
        "PODMAND_PODMAN_WAIT", "--podman-wait",
        "seconds to wait for a Podman socket that exists but does not answer",
        unit=SECONDS, minimum=0,
    )] = 3.0
    podman_autostart: Annotated[bool, S(
        "PODMAND_PODMAN_AUTOSTART", "--podman-autostart",
        "when no Podman API socket answers, start the user's own 'podman system service' and stop it at exit",
        see="podman-api.md",
    )] = True
    podman_down_grace: Annotated[float, S(
        "PODMAND_PODMAN_DOWN_GRACE", "--podman-down-grace",
        "seconds Podman may be unreachable before the health service says NOT_SERVING",
        unit=SECONDS, minimum=0,
    )] = 15.0
    resync_interval: Annotated[float, S(
        "PODMAND_RESYNC_INTERVAL", "--resync-interval",
        "seconds between full comparisons of Podman with what watchers saw",
        unit=SECONDS, minimum=0, zero="off", see="sandboxes.md",
    )] = 30.0
    resync_interval_silent: Annotated[float, S(
        "PODMAND_RESYNC_INTERVAL_SILENT", "--resync-interval-silent",
        "the same while Podman's event stream is silent, never less often than resync_interval",
        unit=SECONDS, minimum=0, zero="resync_interval", see="sandboxes.md",
    )] = 5.0
    gc_grace: Annotated[float, S(
        "PODMAND_GC_GRACE", "--gc-grace",
        "seconds before podmand-owned leftovers of a vanished sandbox are removed",
        unit=SECONDS, minimum=0,
    )] = 300.0
    watch_buffer: Annotated[int, S(
        "PODMAND_WATCH_BUFFER", "--watch-buffer",
        "events buffered per watch stream before a slow one is ended (RESOURCE_EXHAUSTED)",
        minimum=1,
    )] = 1024
    exit_watch: Annotated[Literal["events", "wait"], S(
        "PODMAND_EXIT_WATCH", "--exit-watch",
        "how exits are seen: events (Podman's event stream and conmon's exit files) or wait (also one libpod "
        "/wait per running container)",
        see="sandboxes.md",
    )] = "events"


class _Sandboxes(_Podman):
    """What each sandbox container is built from and bounded by."""

    sandbox_image: Annotated[str, S(
        "OPENSHELL_SANDBOX_IMAGE", "--sandbox-image",
        "default sandbox image",
    )] = "ghcr.io/nvidia/openshell-community/sandboxes/base:latest"
    image_pull_policy: Annotated[Literal["always", "missing", "never", "newer"], S(
        "OPENSHELL_SANDBOX_IMAGE_PULL_POLICY", "--sandbox-image-pull-policy",
        "when to pull an image (upstream's Always, IfNotPresent, Never, Newer are accepted too)",
    )] = "missing"
    sandbox_runtime_image: Annotated[str, S("OPENSHELL_SANDBOX_RUNTIME_IMAGE", "--sandbox-runtime-image",
        "image holding /openshell-sandbox, the workload's entrypoint", see="sandboxes.md",
    )] = "ghcr.io/nvidia/openshell/sandbox:latest"
    supervisor_image: Annotated[str, S(
        "OPENSHELL_SUPERVISOR_IMAGE", "--supervisor-image",
        "the supervisor container's image (/openshell-supervisor)",
    )] = "ghcr.io/nvidia/openshell/supervisor:latest"
    registry_auth_file: Annotated[str, S(
        "PODMAND_REGISTRY_AUTH_FILE", "--registry-auth-file",
        "auth.json (Podman's format) with pull credentials, read on each pull",
        default="none", see="hosts.md",
    )] = ""
    pull_inactivity_timeout: Annotated[float, S(
        "PODMAND_PULL_INACTIVITY_TIMEOUT", "--pull-inactivity-timeout",
        "seconds a pull may go without progress before it is abandoned",
        unit=SECONDS, minimum=0, zero="never", see="hosts.md",
    )] = 600.0
    stop_timeout: Annotated[int, S(
        "OPENSHELL_STOP_TIMEOUT", "--stop-timeout",
        "seconds from SIGTERM to SIGKILL",
        unit=SECONDS, minimum=0,
    )] = 45
    pids_limit: Annotated[int, S(
        "OPENSHELL_SANDBOX_PIDS_LIMIT", "--sandbox-pids-limit",
        "pids limit per sandbox",
        minimum=0, zero="the runtime's default",
    )] = 2048
    log_size_max: Annotated[int, S(
        "PODMAND_LOG_SIZE_MAX", "--log-size-max",
        "largest log file of each container podmand creates (k8s-file); conmon starts it again, empty, "
        "rather than pass the bound",
        unit=BYTES, minimum=LOG_SIZE_MIN, zero="unbounded, unless containers.conf's log_size_max bounds it",
        see="operations.md",
    )] = 10 * 2 ** 20
    default_cpu_limit: Annotated[str, S(
        "PODMAND_DEFAULT_CPU_LIMIT", "--default-cpu-limit",
        "CPU limit of a sandbox whose template sets none: a CPU quantity, or unlimited (or 0)",
        see="hosts.md",
    )] = "2"
    default_memory_limit: Annotated[str, S(
        "PODMAND_DEFAULT_MEMORY_LIMIT", "--default-memory-limit",
        "memory limit of a sandbox whose template sets none: a memory quantity, or unlimited (or 0)",
        see="hosts.md",
    )] = "4Gi"
    userns: Annotated[str, S(
        "OPENSHELL_PODMAN_USERNS", "--userns",
        "auto[:size=N] (1024 ids each by default), host, keep-id[:opts] (rootless), nomap or private",
        see="sandboxes.md",
    )] = "auto"
    uidmap: Annotated[list[str], S(
        "OPENSHELL_PODMAN_UIDMAP", "--uidmap",
        "container_id:host_id:size entries for userns=private (repeatable; comma-separated in the variable)",
        default="none",
    )] = msgspec.field(default_factory=list)
    gidmap: Annotated[list[str], S(
        "OPENSHELL_PODMAN_GIDMAP", "--gidmap",
        "the same for group ids",
        default="none",
    )] = msgspec.field(default_factory=list)
    allow_host_userns: Annotated[bool, S(
        "PODMAND_ALLOW_HOST_USERNS", "--allow-host-userns",
        "let a sandbox template ask for the host user namespace (user_namespaces = false)",
    )] = False
    allow_userns_own_uid: Annotated[bool, S(
        "PODMAND_ALLOW_USERNS_OWN_UID", "--allow-userns-own-uid",
        "let a sandbox's user namespace map podmand's own uid (userns keep-id or host, a private map of host"
        " id 0, user_namespaces = false, a driver_config keep-id): its root then owns podmand's files mounted"
        " into it and every file of podmand's it can reach; each such sandbox gets its own supervisor copy",
        see="security.md",
    )] = False
    userns_max_size: Annotated[int, S(
        "PODMAND_USERNS_MAX_SIZE", "--userns-max-size",
        "the most ids a sandbox's driver_config.userns_mode auto:size=N may ask for",
        minimum=1, maximum=2**32 - 2, zero="the operator's own per-sandbox size (userns=auto's: 1024 unless"
        " auto:size=N)", see="security.md",
    )] = 0
    allow_userns: Annotated[bool, S(
        "PODMAND_ALLOW_USERNS", "--allow-userns",
        "let a sandbox's driver_config choose its user namespace (userns_mode: keep-id, auto or nomap; needs "
        "allow_driver_config)",
        see="sandboxes.md",
    )] = False
    enable_bind_mounts: Annotated[bool, S(
        "OPENSHELL_ENABLE_BIND_MOUNTS", "--enable-bind-mounts",
        "allow host bind mounts in driver_config (with resource admission off); podmand's own paths are never"
        " accepted",
        see="hosts.md",
    )] = False
    health_check_interval: Annotated[int, S(
        "OPENSHELL_HEALTH_CHECK_INTERVAL_SECS", "--health-check-interval-secs",
        "probe the supervisor's SSH socket every N seconds",
        unit=SECONDS, minimum=0, zero="off",
    )] = 0
    allow_driver_config: Annotated[bool, S(
        "PODMAND_ALLOW_DRIVER_CONFIG", "--allow-driver-config",
        "accept a sandbox's own driver_config (mounts, cdi_devices)",
        see="hosts.md",
    )] = False
    admission_enabled: Annotated[bool, S(
        "PODMAND_RESOURCE_ADMISSION", "--resource-admission",
        "resource admission, advertised and enforced: each attached volume needs the required labels",
        see="security.md",
    )] = True
    admission_labels: Annotated[dict[str, str], S(
        "", "",
        "the labels resource admission requires (${workspace}: the sandbox's workspace); also from the "
        "admission JSON",
        default="upstream's",
    )] = msgspec.field(default_factory=lambda: dict(DEFAULT_ADMISSION_LABELS))
    cdi_spec_dirs: Annotated[list[str], S(
        "PODMAND_CDI_SPEC_DIRS", "--cdi-spec-dir",
        "directories of CDI spec files to find GPUs in (repeatable; the ones Podman reads)",
        see="hosts.md",
    )] = msgspec.field(default_factory=lambda: ["/etc/cdi", "/var/run/cdi"])
    selinux: Annotated[Literal["auto", "on", "off"], S(
        "PODMAND_SELINUX", "--selinux",
        "label podmand's own bind mounts for SELinux (auto: when Podman reports SELinux)",
        see="hosts.md",
    )] = "auto"
    rootfs_staging_dir: Annotated[str, S(
        "PODMAND_ROOTFS_STAGING_DIR", "--rootfs-staging-dir",
        "directory the gateway stages rootfs tars in, advertised to it (made 0700 when missing)",
        default="<state_dir>/rootfs-staging", see="hosts.md",
    )] = ""
    rootfs_max_bytes: Annotated[int, S(
        "PODMAND_ROOTFS_MAX_BYTES", "--rootfs-max-bytes",
        "largest rootfs tar podmand imports",
        unit=BYTES, minimum=0, zero="rootfs tar sources not supported", see="hosts.md",
    )] = 8 * 2 ** 30


class _Network(_Sandboxes):
    """How sandboxes reach the gateway and the outside: networks, addresses, proxies."""

    grpc_endpoint: Annotated[str, S(
        "OPENSHELL_GRPC_ENDPOINT", "--grpc-endpoint",
        "gateway URL a sandbox's supervisor dials (it shares this host's network)",
        default="http(s)://127.0.0.1:<gateway_port>", see="deployment.md",
    )] = ""
    gateway_port: Annotated[int, S(
        "OPENSHELL_GATEWAY_PORT", "--gateway-port",
        "gateway port of the default endpoint",
        minimum=1, maximum=65535,
    )] = 17670
    network_name: Annotated[str, S(
        "OPENSHELL_NETWORK_NAME", "--network-name",
        "Podman network of the default workspace (by that literal name, as upstream); workspace w gets "
        "<name>-w",
    )] = "openshell"
    host_gateway_ip: Annotated[str, S(
        "OPENSHELL_PODMAN_HOST_GATEWAY_IP", "--host-gateway-ip",
        "IP address each supervisor (on this host's network) dials for host.containers.internal and "
        "host.openshell.internal; set it only when the gateway listens on another address of this host, "
        "or elsewhere",
        default="127.0.0.1 (under podman machine: gvproxy's 192.168.127.254)", see="operations.md",
    )] = ""
    ssh_socket_path: Annotated[str, S(
        "OPENSHELL_SANDBOX_SSH_SOCKET_PATH", "--sandbox-ssh-socket-path",
        "supervisor SSH socket in the sandbox: normalised, absolute, under 108 bytes, in a directory of its "
        "own",
    )] = "/run/openshell/ssh.sock"
    https_proxy: Annotated[str | None, S(
        "OPENSHELL_SANDBOX_HTTPS_PROXY", "--sandbox-https-proxy",
        "corporate forward proxy http(s)://host:port, on each supervisor's command line",
        default="unset", see="hosts.md",
    )] = None
    no_proxy: Annotated[str | None, S(
        "OPENSHELL_SANDBOX_NO_PROXY", "--sandbox-no-proxy",
        "comma-separated destinations the supervisor dials directly (needs https_proxy)",
        default="unset",
    )] = None
    proxy_auth_file: Annotated[str | None, S(
        "OPENSHELL_SANDBOX_PROXY_AUTH_FILE", "--sandbox-proxy-auth-file",
        "file holding the proxy's user:pass, copied root-only into each sandbox (an http:// proxy needs "
        "proxy_auth_allow_insecure)",
        default="unset",
    )] = None
    proxy_auth_allow_insecure: Annotated[bool, S(
        "OPENSHELL_SANDBOX_PROXY_AUTH_ALLOW_INSECURE", "--sandbox-proxy-auth-allow-insecure",
        "accept that proxy_auth_file's credential travels as cleartext Basic auth to the http:// proxy",
    )] = False
    proxy_connect_by_hostname: Annotated[bool, S(
        "OPENSHELL_SANDBOX_PROXY_CONNECT_BY_HOSTNAME", "--sandbox-proxy-connect-by-hostname",
        "CONNECT through the proxy by hostname instead of the validated IP",
    )] = False
    proxy_ca_bundle: Annotated[str | None, S(
        "OPENSHELL_SANDBOX_PROXY_CA_BUNDLE", "--sandbox-proxy-ca-bundle",
        "PEM CA bundle (X.509) trusted for an https:// or TLS-intercepting proxy, copied into each sandbox",
        default="unset",
    )] = None


class Settings(_Network):
    """Every setting: a field per setting, its :class:`Setting` in its annotation."""

    @property
    def tls_enabled(self) -> bool:
        return bool(self.tls_ca)

    @property
    def endpoint(self) -> str:
        "''The gateway URL a sandbox's supervisor dials (from the host's network, so loopback).''"
        return self.grpc_endpoint or f"{'https' if self.tls_enabled else 'http'}://127.0.0.1:{self.gateway_port}"

    @property
    def userns_base(self) -> str:
        return self.userns.split(":", 1)[0]
