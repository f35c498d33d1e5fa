"""Sandbox request validation and the libpod container spec, as pure functions.

``validate`` turns a ``DriverSandbox`` into a :class:`Plan` or raises an error
naming the offending field; ``container_spec`` turns a plan plus what
provisioning resolved (image ID, paths) into the SpecGenerator JSON.
"""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from . import cdi, drivercfg, names, proxy, rootfs, selinux, tokens
from ._proto import compute_driver_pb2 as pb
from .config import Settings
from .drivercfg import Mount
from .errors import DriverError, FailedPrecondition, InvalidArgument
from .identity import Resolved
from .names import is_image_reference
from .resources import Resources, resources

# Patterns are used with fullmatch: "$" alone would let "abc\n" through.
_ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SOCKET_RE = re.compile(r"/[A-Za-z0-9._/-]+")
MAX_ID = names.MAX_ID
MAX_ENV_KEY = 256
MAX_LABEL_KEY = 253
MAX_LABEL_VALUE = 4096
MAX_LABELS_TOTAL = 64 * 1024  # bytes of all template labels: they travel in every Podman event
MAX_SOCKET_PATH = 107  # bytes; sun_path holds 108 with the NUL
# Parents the supervisor must not chmod 0700 (it does so to the socket's parent):
# shared or podmand-owned directories. Top-level directories are refused as well.
_SHARED_PARENTS = frozenset(
    {
        "/var/tmp",
        "/var/run",
        "/var/lib",
        "/var/log",
        "/dev/shm",
        "/dev/pts",
        "/run/user",
        "/run/lock",
        "/usr/bin",
        "/usr/sbin",
        "/usr/lib",
        "/usr/local",
        "/usr/share",
        "/etc/ssl",
        "/opt/openshell",
        "/etc/openshell",
        posixpath.dirname(names.SUPERVISOR_BIN),
        posixpath.dirname(names.TOKEN_PATH),
        names.TLS_DIR,
        posixpath.dirname(names.TLS_DIR),
        names.NETNS_DIR,
        "/var/run/netns",
    }
)
CAP_ADD = ["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "SYSLOG", "DAC_READ_SEARCH", "SETPCAP"]
# Upstream also drops KILL; podmand keeps it: the supervisor (root) forwards the
# stop signal to a workload running as another uid, which needs CAP_KILL, or
# every stop waits out stop_timeout and ends in SIGKILL.
CAP_DROP = ["DAC_OVERRIDE", "FSETID", "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SYS_CHROOT"]
STOP_SIGNAL = 15  # the only signal the supervisor (PID 1) handles
DEFAULT_COMMAND = ["/bin/bash", "-l"]
MAX_TOKEN_BYTES = 64 * 1024


@dataclass(frozen=True)
class Plan:
    """A validated sandbox request: everything provisioning needs, secrets apart."""

    sandbox_id: str
    name: str
    workspace: str
    image: str
    log_level: str
    user_env: dict[str, str]
    labels: dict[str, str]
    command: list[str]
    tty: bool
    await_attach: bool
    ssh_socket_path: str
    resources: Resources
    userns: str
    mounts: tuple[Mount, ...] = ()
    cdi_devices: tuple[str, ...] = ()
    gpu_count: int = 0  # GPUs podmand assigns from its CDI inventory at create (none given explicitly)
    driver_config_used: bool = False
    spec_hash: str = ""
    intent: str = ""
    has_token: bool = False
    generation: str = "0"
    workload_user: str = ""
    workload_group: str = ""
    rootfs_tar: str = ""  # staged rootfs tar to import as ``image`` (rootfs.py)

    @property
    def container_name(self) -> str:
        return names.container_name(self.workspace, self.name, self.sandbox_id)

    @property
    def volume_name(self) -> str:
        return names.volume_name(self.sandbox_id)


def _check_text(where: str, value: str, *, allow_empty: bool = True) -> None:
    if not value and not allow_empty:
        raise InvalidArgument(f"{where}: is required")
    if _CONTROL.search(value):
        raise InvalidArgument(f"{where}: must not contain control characters")


def _shown(value: str) -> str:
    """A caller's value for an error message, without echoing megabytes."""
    return repr(value) if len(value) <= MAX_ID else f"({len(value)} characters)"


def check_name(where: str, value: str, *, required: bool) -> None:
    """Ids, names and workspaces: they become file names, container and volume
    names and label filters, so the whole value must match."""
    if not value:
        if required:
            raise InvalidArgument(f"{where}: is required")
        return
    if not names.is_id(value):
        raise InvalidArgument(
            f"{where}: {_shown(value)} must be 1-{MAX_ID} characters of [a-zA-Z0-9._-] starting with a letter or digit"
        )


def _env(where: str, env: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in env.items():
        if len(key) > MAX_ENV_KEY or not _ENV_KEY_RE.fullmatch(key):
            raise InvalidArgument(f"{where}: key {_shown(key)} is not a valid environment variable name")
        if "\x00" in value:
            raise InvalidArgument(f"{where}[{key}]: value must not contain NUL")
        out[key] = value
    return out


def _labels(where: str, labels: Any) -> dict[str, str]:
    """Template labels, bounded: every Podman event of the container repeats them,
    and one oversized event must not outgrow what a watch stream can read."""
    out: dict[str, str] = {}
    total = 0
    for key, value in labels.items():
        if not key or "=" in key or _CONTROL.search(key) or _CONTROL.search(value):
            raise InvalidArgument(f"{where}: invalid label {_shown(key)}")
        size_key, size_value = len(key.encode()), len(value.encode())
        if size_key > MAX_LABEL_KEY:
            raise InvalidArgument(f"{where}: label key {_shown(key)} is longer than {MAX_LABEL_KEY} bytes")
        if size_value > MAX_LABEL_VALUE:
            raise InvalidArgument(f"{where}[{key}]: value is longer than {MAX_LABEL_VALUE} bytes")
        total += size_key + size_value
        out[key] = value
    if total > MAX_LABELS_TOTAL:
        raise InvalidArgument(f"{where}: {total} bytes of labels, more than {MAX_LABELS_TOTAL // 1024} KiB")
    return out


def check_socket_path(where: str, path: str, error: type[DriverError] = InvalidArgument) -> str:
    """The supervisor's SSH socket path goes into the healthcheck probe and the
    supervisor chmods its parent 0700: a plain normalised path under 108 bytes
    whose parent is a dedicated directory (not /, /tmp, /sandbox, /run, ...)."""
    if len(path.encode()) > MAX_SOCKET_PATH:
        raise error(f"{where}: must be shorter than 108 bytes (a Unix socket path)")
    if not _SOCKET_RE.fullmatch(path):
        raise error(f"{where}: must be an absolute path of the characters [A-Za-z0-9._/-]")
    parts = path.split("/")[1:]
    if any(p in ("", ".", "..") for p in parts):
        raise error(f"{where}: {path!r} must be normalised (no empty, '.' or '..' segments, no trailing '/')")
    parent = posixpath.dirname(path)
    if len(parts) < 3 or parent in _SHARED_PARENTS or parts[0] in ("proc", "sys"):
        raise error(
            f"{where}: {path!r} needs a dedicated parent directory (e.g. /run/openshell/ssh.sock): "
            f"the supervisor makes {parent!r} private (0700)"
        )
    return path


def _gpu(sandbox: pb.DriverSandbox, devices: tuple[str, ...]) -> tuple[tuple[str, ...], int]:
    """(explicit CDI devices, how many GPUs podmand assigns itself at create)."""
    requirements = sandbox.spec.resource_requirements
    gpu = requirements.gpu if requirements.HasField("gpu") else None
    count = cdi.requested_count(gpu, "sandbox.spec.resource_requirements.gpu.count")
    if devices:
        cdi.check_explicit(devices, count, "sandbox.spec.template.driver_config.cdi_devices")
        return devices, 0
    return (), count or 0


def _userns(tpl: pb.DriverSandboxTemplate, settings: Settings) -> str:
    """The user-namespace mode; a caller may ask for less isolation (the host's
    namespace: root with podmand's capabilities) only when an operator allows it."""
    if not tpl.HasField("user_namespaces"):
        return settings.userns
    if not tpl.user_namespaces:
        if not settings.allow_host_userns:
            raise FailedPrecondition(
                "sandbox.spec.template.user_namespaces: false would run the sandbox in the host user namespace; "
                "an operator must enable allow_host_userns (--allow-host-userns / PODMAND_ALLOW_HOST_USERNS)"
            )
        return "host"
    return settings.userns if settings.userns_base != "host" else "auto"


def gateway_token(spec: pb.DriverSandboxSpec) -> str:
    """The token the supervisor presents to the gateway: ``sandbox_token``, else the
    launch bundle's ``gateway_token`` (the rest of the bundle is for split-topology
    supervisors, which this single-container layout does not run)."""
    if spec.sandbox_token.strip() or not spec.launch_authentication:
        return spec.sandbox_token.strip()
    where = "sandbox.spec.launch_authentication"
    return tokens.decode_launch_authentication(spec.launch_authentication, where).supervisor.gateway_token


def strip_secrets(sandbox: pb.DriverSandbox) -> pb.DriverSandbox:
    clean = pb.DriverSandbox()
    clean.CopyFrom(sandbox)
    clean.ClearField("status")
    clean.spec.ClearField("sandbox_token")
    clean.spec.ClearField("launch_authentication")
    return clean


def encode_intent(sandbox: pb.DriverSandbox) -> tuple[str, str]:
    """(spec hash, base64 intent) of the request without its secrets."""
    blob = strip_secrets(sandbox).SerializeToString(deterministic=True)
    return hashlib.sha256(blob).hexdigest(), base64.b64encode(blob).decode()


def decode_intent(intent: str) -> pb.DriverSandbox:
    sandbox = pb.DriverSandbox()
    sandbox.ParseFromString(base64.b64decode(intent))
    return sandbox


def validate(sandbox: pb.DriverSandbox | None, settings: Settings, *, recorded: bool = False) -> Plan:
    """Check everything that can be checked without allocating anything.

    ``recorded``: a request read back from Podman, whose secrets were checked
    when it arrived and are not part of the record."""
    if sandbox is None:
        raise InvalidArgument("sandbox: is required")
    check_name("sandbox.id", sandbox.id, required=True)
    check_name("sandbox.name", sandbox.name, required=True)
    check_name("sandbox.workspace", sandbox.workspace, required=False)
    cname = names.container_name(sandbox.workspace, sandbox.name, sandbox.id)
    if len(cname) > 255:
        raise InvalidArgument(f"sandbox.name: container name {cname!r} exceeds 255 characters")
    if not sandbox.HasField("spec"):
        raise InvalidArgument("sandbox.spec: is required")
    spec, tpl = sandbox.spec, sandbox.spec.template
    # A sandbox from a rootfs tar runs the image imported from it; template.image (the
    # gateway fills in its default) is not used then.
    from_tar = tpl.HasField("driver_config") and rootfs.KEY in tpl.driver_config.fields
    image = rootfs.reference(sandbox.id) if from_tar else tpl.image or settings.sandbox_image
    if not image:
        raise FailedPrecondition(
            "sandbox.spec.template.image: no sandbox image configured; set OPENSHELL_SANDBOX_IMAGE "
            "or give an image in the sandbox template"
        )
    if not is_image_reference(image):
        raise InvalidArgument(f"sandbox.spec.template.image: {_shown(image)} is not an image reference")
    _check_text("sandbox.spec.log_level", spec.log_level)
    user_env = _env("sandbox.spec.template.environment", tpl.environment)
    user_env.update(_env("sandbox.spec.environment", spec.environment))
    labels = _labels("sandbox.spec.template.labels", tpl.labels)
    for i, arg in enumerate(spec.command):
        if "\x00" in arg:
            raise InvalidArgument(f"sandbox.spec.command[{i}]: must not contain NUL")
    if tpl.agent_socket_path:
        ssh_socket = check_socket_path("sandbox.spec.template.agent_socket_path", tpl.agent_socket_path)
    else:  # the operator's setting: a bad one is a server-side problem
        where = "ssh_socket_path (--sandbox-ssh-socket-path / OPENSHELL_SANDBOX_SSH_SOCKET_PATH)"
        ssh_socket = check_socket_path(where, settings.ssh_socket_path, FailedPrecondition)
    token = spec.sandbox_token.strip()
    if token:
        if len(token) > MAX_TOKEN_BYTES:
            raise InvalidArgument("sandbox.spec.sandbox_token: longer than 64 KiB")
        tokens.check_sandbox_token(token, sandbox.id)
    generation = "0"
    if spec.launch_authentication:
        bundle = tokens.decode_launch_authentication(spec.launch_authentication, "sandbox.spec.launch_authentication")
        generation = bundle.supervisor.runtime_generation
        if not token:
            where = "sandbox.spec.launch_authentication.supervisor.gateway_token"
            tokens.check_sandbox_token(bundle.supervisor.gateway_token, sandbox.id, where=where)
            token = bundle.supervisor.gateway_token
    elif settings.require_launch_auth and not recorded:
        raise FailedPrecondition("sandbox.spec.launch_authentication: podmand is configured to require it")
    _check_text("sandbox.spec.workload_identity.user", spec.workload_identity.user)
    _check_text("sandbox.spec.workload_identity.group", spec.workload_identity.group)
    userns = _userns(tpl, settings)
    limits = resources(tpl.resources, settings)
    cfg = drivercfg.parse(tpl, settings, userns=userns, control_paths=(ssh_socket,))
    devices, gpu_count = _gpu(sandbox, cfg.cdi_devices)
    spec_hash, intent = encode_intent(sandbox)
    return Plan(
        sandbox_id=sandbox.id,
        name=sandbox.name,
        workspace=sandbox.workspace,
        image=image,
        log_level=spec.log_level,
        user_env=user_env,
        labels=labels,
        command=list(spec.command),
        tty=spec.tty,
        await_attach=spec.await_main_process_attachment,
        ssh_socket_path=ssh_socket,
        resources=limits,
        userns=userns,
        mounts=cfg.mounts,
        cdi_devices=devices,
        gpu_count=gpu_count,
        driver_config_used=cfg.used,
        rootfs_tar=cfg.rootfs_tar,
        spec_hash=spec_hash,
        intent=intent,
        has_token=bool(token),
        generation=generation,
        workload_user=spec.workload_identity.user.strip(),
        workload_group=spec.workload_identity.group.strip(),
    )


# ---------------------------------------------------------------- building

# Environment that must not reach the root supervisor from the image or the
# caller: anything claiming to configure OpenShell, loader and allocator knobs,
# Rust runtime knobs of the (Rust) supervisor, interpreter start-up hooks, the
# trust roots of root-side TLS, and proxy settings (the supervisor's own HTTP
# clients, which carry injected provider credentials, would follow them; it sets
# the main process's proxy variables itself).
_UNSAFE_ENV = re.compile(
    r"^(OPENSHELL_.*|LD_.*|GLIBC_TUNABLES|MALLOC_.*|RUST_.*|PYTHON(PATH|STARTUP|HOME)|BASH_ENV|ENV"
    r"|SSL_CERT_(FILE|DIR)|(?i:(HTTPS?|ALL|NO|FTP)_PROXY))$"
)


def unsafe_env_key(key: str) -> bool:
    """Whether ``key`` is kept out of the supervisor's environment."""
    return bool(_UNSAFE_ENV.match(key))


@dataclass(frozen=True)
class Provision:
    """What provisioning resolved for a plan."""

    image_id: str
    image_user: str
    image_env: tuple[str, ...]
    network: str
    supervisor_path: str
    secrets_dir: str
    instance: str
    identity: Resolved
    selinux: bool = False  # label podmand's own bind mounts for SELinux (see selinux.py)
    mount_images: dict[str, str] = field(default_factory=dict)  # image mount reference -> pulled image ID


def identity_label(identity: Resolved) -> str:
    doc = {
        "uid": identity.uid,
        "gid": identity.gid,
        "groups": list(identity.supplementary),
        "source": identity.source,
        "digest": identity.digest,
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def unsafe_image_env(image_env: tuple[str, ...]) -> list[str]:
    """Keys of the image's ENV that podmand unsets in the supervisor."""
    return sorted({item.split("=", 1)[0] for item in image_env if unsafe_env_key(item.split("=", 1)[0])})


def filtered_user_env(plan: Plan) -> list[str]:
    """Keys of the caller's environment that stay out of the container environment
    (they still reach SSH sessions through OPENSHELL_USER_ENVIRONMENT)."""
    return sorted(k for k in plan.user_env if unsafe_env_key(k))


def main_process_spec(plan: Plan) -> str:
    if plan.command:
        doc: dict[str, Any] = {
            "version": 1,
            "command": plan.command,
            "tty": plan.tty,
            "await_main_process_attachment": plan.await_attach,
        }
    else:
        doc = {"version": 1, "command": DEFAULT_COMMAND, "tty": True}
    return json.dumps(doc, separators=(",", ":"))


def sandbox_env(plan: Plan, settings: Settings, *, image_user: str) -> dict[str, str]:
    """The container environment, as the stock supervisor reads it.

    The caller's variables reach the main process through the container
    environment (the supervisor gives OPENSHELL_USER_ENVIRONMENT to SSH sessions
    only), minus those that could steer the root supervisor or the loader.
    Identity is the supervisor's OCI mode: the image's raw ``Config.User`` and
    empty UID/GID (a non-empty pair beside it is a fatal conflict for the
    supervisor). Exactly one token source is set: the gateway's token file, or
    podmand's credential as the exchangeable bootstrap token, which the
    supervisor trades for a gateway JWT via IssueSandboxToken, which the gateway
    checks with AuthenticateSandbox."""
    env = {k: v for k, v in plan.user_env.items() if not unsafe_env_key(k)}
    if plan.log_level:
        env[names.ENV_LOG_LEVEL] = plan.log_level
    if plan.user_env:
        env[names.ENV_USER_ENV] = json.dumps(plan.user_env, separators=(",", ":"), sort_keys=True)
    env.update(
        {
            names.ENV_SANDBOX: plan.name,
            names.ENV_SANDBOX_ID: plan.sandbox_id,
            names.ENV_ENDPOINT: settings.endpoint,
            names.ENV_SSH_SOCKET: plan.ssh_socket_path,
            names.ENV_IMAGE: plan.image,
            names.ENV_MAIN_PROCESS: main_process_spec(plan),
            names.ENV_TELEMETRY: "true" if settings.telemetry_enabled else "false",
            names.ENV_NETWORK_CAPABILITIES: names.NETWORK_CAPABILITIES,
            names.ENV_IMAGE_USER: image_user,
            names.ENV_UID: "",
            names.ENV_GID: "",
        }
    )
    if settings.tls_enabled:
        env[names.ENV_TLS_CA] = f"{names.TLS_DIR}/ca.crt"
        env[names.ENV_TLS_CERT] = f"{names.TLS_DIR}/tls.crt"
        env[names.ENV_TLS_KEY] = f"{names.TLS_DIR}/tls.key"
    if plan.has_token:
        env[names.ENV_TOKEN_FILE] = names.TOKEN_PATH
    else:
        env[names.ENV_BOOTSTRAP_TOKEN_FILE] = names.CREDENTIAL_PATH
    return env


def container_labels(plan: Plan, instance: str = "", identity: Resolved | None = None) -> dict[str, str]:
    labels = dict(plan.labels)
    labels.update(
        {
            names.MANAGED: "true",
            names.OWNER: names.OWNER_VALUE,
            names.SANDBOX_ID: plan.sandbox_id,
            names.SANDBOX_NAME: plan.name,
            names.SANDBOX_NAMESPACE: "",
            names.SANDBOX_WORKSPACE: plan.workspace,
            names.DRIVER_CONFIG_USED: "true" if plan.driver_config_used else "false",
            names.SPEC_HASH: plan.spec_hash,
            names.INSTANCE: instance,
            names.IDENTITY: identity_label(identity) if identity else "",
        }
    )
    return labels


def intent_labels(plan: Plan, instance: str, state_dir: str = "") -> dict[str, str]:
    """Labels of the workspace volume: the durable record of a create request."""
    return {
        names.OWNER: names.OWNER_VALUE,
        names.SANDBOX_ID: plan.sandbox_id,
        names.SANDBOX_WORKSPACE: plan.workspace,
        names.SPEC_HASH: plan.spec_hash,
        names.HAS_TOKEN: "true" if plan.has_token else "false",
        names.INSTANCE: instance,
        names.STATE_DIR: state_dir,
        names.INTENT: plan.intent,
        **({names.ROOTFS_IMAGE: plan.image} if plan.rootfs_tar else {}),
    }


# Every userns=auto sandbox gets this many ids unless `auto:size=N` says otherwise.
# Left to itself Podman sizes the range from the image's highest uid (65534 for
# images with `nobody`), which leaves room for a handful of sandboxes, and 4.3.1
# may then place it across two of the user's subordinate ranges, where the
# kernel refuses the map (runc: "can't get final child's PID from pipe").
# 1024 divides the usual 65536-id ranges, so a slot never straddles two.
AUTO_USERNS_SIZE = 1024


def userns_spec(mode: str) -> dict[str, Any]:
    """userns + idmappings: Podman 4.3.1 ignores nsmode=auto without AutoUserNs."""
    base, _, params = mode.partition(":")
    if base == "host":
        return {"userns": {"nsmode": "host"}}
    out: dict[str, Any] = {"userns": {"nsmode": base, **({"value": params} if params else {})}}
    if base == "auto":
        out["idmappings"] = {
            "HostUIDMapping": False,
            "HostGIDMapping": False,
            "AutoUserNs": True,
            "AutoUserNsOpts": {"Size": _auto_size(params)},
        }
    return out


def _auto_size(params: str) -> int:
    """The id count of ``auto[:opts]``: ``size=N``, else AUTO_USERNS_SIZE."""
    for item in params.split(","):
        key, _, value = item.partition("=")
        if key == "size" and value.isdigit():
            return int(value)
    return AUTO_USERNS_SIZE


def _mapped_prefix(entries: list[str]) -> int:
    """How many ids from 0 up a ``container:host:size`` map covers without a gap."""
    end = 0
    for c, _h, size in sorted(tuple(int(x) for x in e.split(":")) for e in entries):
        if c > end:
            break
        end = max(end, c + size)
    return end


def userns_id_limit(settings: Settings, mode: str) -> int | None:
    """Container ids ``< limit`` exist in the sandbox's user namespace (None: not known
    here). The supervisor's setuid/setgid to any other id fails with EINVAL."""
    base, _, params = mode.partition(":")
    if base == "auto":
        return _auto_size(params)
    if base == "private":
        return min(_mapped_prefix(settings.uidmap), _mapped_prefix(settings.gidmap))
    return None


def _idmap(entries: list[str]) -> list[dict[str, int]]:
    out = []
    for entry in entries:
        c, h, s = (int(x) for x in entry.split(":"))
        out.append({"container_id": c, "host_id": h, "size": s})
    return out


def _secret_mount(destination: str, source: str, *, relabel: bool) -> dict[str, Any]:
    """A root-only per-sandbox file: Podman's "U" chowns it to the container's root in every
    userns mode; with SELinux, "Z" gives it a label private to this sandbox's container."""
    options = ["bind", "ro", "U", *([selinux.PRIVATE] if relabel else [])]
    return {"destination": destination, "type": "bind", "source": source, "options": options}


def _proxy_mounts(settings: Settings, secrets: str, *, relabel: bool) -> list[dict[str, Any]]:
    """The corporate proxy's credential and CA bundle: per-sandbox copies, root-only like the token."""
    files = [(settings.proxy_auth_file, proxy.AUTH_PATH, proxy.AUTH_FILE),
             (settings.proxy_ca_bundle, proxy.CA_BUNDLE_PATH, proxy.CA_FILE)]
    return [_secret_mount(inside, f"{secrets}/{name}", relabel=relabel) for wanted, inside, name in files if wanted]


def health_probe(ssh_socket_path: str) -> list[str]:
    """Exec form: the shell only joins two tests with ``||``; the paths reach it
    as arguments, never as script text (and the socket path is validated too)."""
    script = 'test -e "$1" || test -S "$2"'
    return ["CMD", "/bin/sh", "-c", script, "probe", names.SSH_READY_MARKER, ssh_socket_path]


def container_spec(plan: Plan, settings: Settings, prov: Provision) -> dict[str, Any]:
    """The libpod SpecGenerator for one sandbox container (V1 single-container layout)."""
    secrets = prov.secrets_dir
    mounts: list[dict[str, Any]] = [
        {"destination": names.NETNS_DIR, "type": "tmpfs", "source": "tmpfs", "options": ["rw", "nosuid", "nodev"]},
        {  # one file for every sandbox of this supervisor image: a shared SELinux label
            "destination": names.SUPERVISOR_BIN,
            "type": "bind",
            "source": prov.supervisor_path,
            "options": ["bind", "ro", *([selinux.SHARED] if prov.selinux else [])],
        },
        # One token source (see sandbox_env).
        _secret_mount(names.TOKEN_PATH, f"{secrets}/sandbox.jwt", relabel=prov.selinux)
        if plan.has_token
        else _secret_mount(names.CREDENTIAL_PATH, f"{secrets}/driver.credential", relabel=prov.selinux),
    ]
    if settings.tls_enabled:  # per-sandbox copies, so private like the token
        mounts += [
            _secret_mount(f"{names.TLS_DIR}/{f}", f"{secrets}/{f}", relabel=prov.selinux)
            for f in ("ca.crt", "tls.crt", "tls.key")
        ]
    mounts += _proxy_mounts(settings, secrets, relabel=prov.selinux)
    volumes: list[dict[str, Any]] = [{"Name": plan.volume_name, "Dest": names.WORKSPACE_PATH, "Options": ["rw"]}]
    caller = drivercfg.libpod_mounts(plan.mounts, prov.mount_images)
    mounts += caller.mounts
    volumes += caller.volumes
    hosts = ["host.openshell.internal"]
    if settings.host_gateway_ip:
        hosts.insert(0, "host.containers.internal")
    hostadd = [f"{h}:{settings.host_gateway_ip or 'host-gateway'}" for h in hosts]
    limits: dict[str, Any] = plan.resources.libpod()
    if settings.pids_limit:
        limits["pids"] = {"limit": settings.pids_limit}
    spec: dict[str, Any] = {
        "name": plan.container_name,
        "hostname": f"sandbox-{plan.name}"[:63],
        "image": prov.image_id,
        "labels": container_labels(plan, prov.instance, prov.identity),
        "entrypoint": [names.SUPERVISOR_BIN],
        "command": ["--workdir", names.WORKSPACE_PATH, *proxy.supervisor_args(settings)],
        "user": "0:0",
        "cap_add": CAP_ADD,
        "cap_drop": CAP_DROP,
        "no_new_privileges": True,
        "seccomp_profile_path": "unconfined",
        "env": sandbox_env(plan, settings, image_user=prov.image_user),
        "unsetenv": unsafe_image_env(prov.image_env),
        "mounts": mounts,
        "volumes": volumes,
        **({"image_volumes": caller.image_volumes} if caller.image_volumes else {}),
        "netns": {"nsmode": "bridge"},
        "Networks": {prov.network: {}},
        "hostadd": hostadd,
        "stop_signal": STOP_SIGNAL,
        "stop_timeout": settings.stop_timeout,
        "resource_limits": limits,
        **userns_spec(plan.userns),
    }
    if plan.userns == "private":
        spec["idmappings"] = {
            "HostUIDMapping": False,
            "HostGIDMapping": False,
            "UIDMap": _idmap(settings.uidmap),
            "GIDMap": _idmap(settings.gidmap),
        }
    if settings.health_check_interval:
        spec["healthconfig"] = {
            "Test": health_probe(plan.ssh_socket_path),
            "Interval": settings.health_check_interval * 10**9,
            "Timeout": 2 * 10**9,
            "Retries": 10,
            "StartPeriod": 0,
        }
    if plan.cdi_devices:
        spec["devices"] = [{"path": d} for d in plan.cdi_devices]
    return spec
