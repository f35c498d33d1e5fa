"""The settings' schema: one msgspec struct, each field's type and default.

Names, flags, variables and help for each field are in ``options``; loading
(defaults < TOML file < environment < flags) is in ``loading``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

DEFAULT_ADMISSION_LABELS = {
    "openshell.ai/sandbox-attachable": "true",
    "openshell.ai/workspace": "${workspace}",
}
OVERFLOW_UID = 65534  # how the kernel shows a uid that is not mapped into our user namespace
PULL_POLICIES = ("always", "missing", "never", "newer")


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
