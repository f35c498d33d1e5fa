"""The pair's two libpod SpecGenerators, as pure functions (contract §3.2, §3.3).

- :func:`workload_spec`: the sandbox image by ID, the ``openshell-sandbox`` runtime
  bound read-only as its entrypoint, netns ``none`` (no network, port or host alias),
  no environment (every key of the image's ``ENV`` unset: the runtime hands the child
  environment of ``bootstrap.json`` to the workload's processes), ``no_new_privileges``,
  every capability dropped, ``ip_unprivileged_port_start=0`` (the runtime's DNS relay
  binds 127.0.0.53:53 unprivileged), the channel volume read-write and the workspace
  volume, a small tmpfs where the runtime installs the supervisor's proxy CA, and an
  ``/etc/resolv.conf`` naming the runtime's DNS relay (127.0.0.53), its only resolver. Under
  rootless Podman, or for an identity podmand made up (``source`` ``default``), the
  runtime starts as root with CHOWN, SETGID, SETUID and SETPCAP only long enough to
  chown the workspace and drop to the identity for good (``launch-capability-free``);
  otherwise it starts as the identity with its groups and no capability
  (``--bootstrap``). The caller's mounts, GPUs, limits and user namespace apply here.
- :func:`supervisor_spec`: ``/openshell-supervisor`` from the supervisor image by ID,
  with its descriptor, auth bundle and health socket flags; the host network and the
  host user namespace (rootless Podman cannot give a container the host network inside
  another's user namespace), the workload's uid:gid and groups, no capability, the
  channel volume read-only, tmpfs ``/run``, ``/var/log`` and ``/tmp`` (the identity's), the
  host-gateway names at the descriptor's address (``host_gateway_ip``, else loopback), podmand's own
  per-sandbox files for the gateway (its TLS client files, the corporate proxy's) and
  the environment of §3.3. Its limits are the workload's, as upstream's are.

Both are built from the sandbox's parts (``sandbox.spec``: labels; the caller's
mounts, ``usernamespace``, ``envvars``, ``ownmounts``, ``proxy``).

Kept out of the supervisor's environment on purpose, unlike upstream: the caller's
variables themselves. The supervisor starts no workload process in this topology (the
runtime gives ``bootstrap.json``'s child environment to those); ``OPENSHELL_USER_ENVIRONMENT``
still carries them, as JSON.
"""

from __future__ import annotations

from typing import Any

from .. import names
from ..config import Settings
from ..sandbox import driverconfig, envvars, ownmounts, proxy, selinux
from ..sandbox.identity import Resolved
from ..sandbox.plan import Plan, Provision
from ..sandbox.spec import container_labels
from ..sandbox.usernamespace import libpod as userns_libpod
from .documents import WorkloadIdentity, identity_of

__all__ = [
    "DEFAULT_HOST_GATEWAY_IP",
    "LAUNCHER_CAPS",
    "SUPERVISOR_TMPFS",
    "launches_as_root",
    "supervisor_env",
    "supervisor_spec",
    "workload_spec",
]

LAUNCHER_CAPS = ["CHOWN", "SETGID", "SETUID", "SETPCAP"]
SUPERVISOR_TMPFS = ("/run", "/var/log", "/tmp")
_TMPFS = ["rw", "noexec", "nosuid", "nodev", "mode=0777"]
_DEFAULT_UID_GID = "1000"  # upstream's DEFAULT_SANDBOX_UID and _GID, for an image without USER
_SECONDS = 10**9
# The health log's bounds, Podman's own defaults (libpod/define/healthchecks.go:61-64 at v5.3.0),
# sent because Podman 5.3.0-5.4.1 gives a libpod create that leaves them out no bound at all
# (podmanversion.HEALTH_LOG_UNBOUNDED): the supervisor's probe every health_check_interval would grow
# the log without end. Older Podman has no such fields and drops them (its create decodes with
# encoding/json, unknown fields ignored: pkg/api/handlers/libpod/containers_create.go:38 at v4.3.1).
HEALTH_MAX_LOG_COUNT = 5
HEALTH_MAX_LOG_SIZE = 500
# The host as the supervisor reaches it: it shares the host's network (contract §2.4). Its
# host-gateway names say this address, as its runtime descriptor does, and not Podman's
# "host-gateway": before 4.7.0 Podman writes that word into /etc/hosts as it is (an entry
# nothing resolves), and later ones give a host address that a loopback-only listener lacks.
DEFAULT_HOST_GATEWAY_IP = "127.0.0.1"


def launches_as_root(identity: WorkloadIdentity, *, rootless: bool) -> bool:
    """Whether the runtime starts as root to chown the workspace, then drops for good: under
    rootless Podman (a new volume's root comes out as the image's directory there, or the
    container user's, whatever the upload said: see ``archives``) and for
    an identity podmand made up for an image without USER (contract §3.2)."""
    return rootless or identity.source == "default"


def _labels(plan: Plan, prov: Provision, role: str) -> dict[str, str]:
    return {**container_labels(plan, prov.instance, prov.identity), names.ISOLATION_ROLE: role}


def workload_spec(plan: Plan, settings: Settings, prov: Provision, *, rootless: bool) -> dict[str, Any]:
    """The workload container: ``prov.image_id`` is the sandbox image's ID and
    ``prov.supervisor_path`` the host path of the ``openshell-sandbox`` runtime binary."""
    identity = identity_of(prov.identity)
    if launches_as_root(identity, rootless=rootless):
        command = ["launch-capability-free", str(identity.uid), str(identity.gid), names.BOOTSTRAP_PATH,
                   prov.workspace]
        user, groups, caps = "0:0", [], list(LAUNCHER_CAPS)
    else:
        command = ["--bootstrap", names.BOOTSTRAP_PATH]
        user, groups, caps = f"{identity.uid}:{identity.gid}", [str(g) for g in identity.supplementary_gids], []
    caller = driverconfig.libpod_mounts(plan.mounts, prov.mount_images)
    shared = selinux.PRIVATE if prov.supervisor_path.startswith(prov.secrets_dir.rstrip("/") + "/") else selinux.SHARED
    mounts: list[dict[str, Any]] = [
        {"destination": names.RUNTIME_BIN, "type": "bind", "source": prov.supervisor_path,
         "options": ["rbind", "ro", *([shared] if prov.selinux else [])]},
        {"destination": names.SUPERVISOR_CA_DIR, "type": "tmpfs", "source": "tmpfs", "options": [*_TMPFS, "size=1m"]},
        # the runtime's DNS relay (127.0.0.53) is the workload's resolver: root's, 0444, in place of the image's
        {"destination": names.RESOLV_CONF, "type": "bind", "source": f"{prov.secrets_dir}/{names.RESOLVER_FILE}",
         "options": ["bind", "ro", "U", *([selinux.PRIVATE] if prov.selinux else [])]},
        *caller.mounts,
    ]
    channel = ["rw", *([selinux.SHARED] if prov.selinux else [])]
    spec: dict[str, Any] = {
        "name": plan.container_name,
        "hostname": f"sandbox-{plan.name}"[:63],
        "image": prov.image_id,
        "labels": _labels(plan, prov, names.ROLE_WORKLOAD),
        "entrypoint": [names.RUNTIME_BIN],
        "command": command,
        "work_dir": "/",
        "user": user,
        "groups": groups,
        "cap_drop": ["ALL"],
        "cap_add": caps,
        "no_new_privileges": True,
        "sysctl": {"net.ipv4.ip_unprivileged_port_start": "0"},
        "env": {},
        "unsetenv": sorted({key for key, sep, _ in (e.partition("=") for e in prov.image_env) if sep and key}),
        "netns": {"nsmode": "none"},
        "use_image_resolve_conf": True,  # Podman writes none: the bind above is it
        "mounts": mounts,
        "volumes": [
            {"Name": plan.volume_name, "Dest": prov.workspace, "Options": ["rw"]},
            {"Name": names.channel_volume_name(plan.sandbox_id), "Dest": names.CHANNEL_DIR, "Options": channel},
            *caller.volumes,
        ],
        **({"image_volumes": caller.image_volumes} if caller.image_volumes else {}),
        "healthconfig": {"Test": ["NONE"]},
        "stop_timeout": settings.stop_timeout,
        "resource_limits": plan.resources.libpod(),
        **userns_libpod(plan.userns, settings),
    }
    if plan.cdi_devices:
        spec["devices"] = [{"path": d} for d in plan.cdi_devices]
    return spec


def supervisor_env(plan: Plan, settings: Settings, image_user: str, identity: Resolved) -> dict[str, str]:
    """The supervisor's environment (contract §3.3): podmand's variables for it
    (``envvars``: none of the caller's own, no token file: its bearer is ``auth.json``),
    plus the backend it admits and where it keeps its interception CA (a tmpfs it can
    write as a non-root user). Its default gateway endpoint is the loopback address
    (``Settings.endpoint``): it shares the host's network."""
    env = envvars.sandbox_env(plan, settings, image_user=image_user)
    if not image_user:  # upstream's numeric default identity for an image without USER
        env[names.ENV_UID] = env[names.ENV_GID] = _DEFAULT_UID_GID
    env[names.ENV_ADMITTED_BACKEND] = names.ISOLATION_BACKEND
    env[names.ENV_PROXY_TLS_DIR] = names.PROXY_TLS_DIR
    return dict(sorted(env.items()))


def supervisor_spec(plan: Plan, settings: Settings, prov: Provision, *, supervisor_image_id: str) -> dict[str, Any]:
    """The supervisor container, from the supervisor image's ID."""
    identity = identity_of(prov.identity)
    # podmand's own files for the gateway (TLS client files, the proxy's credential and CA):
    # ownmounts' per-sandbox copies, chowned ("U") to this container's user. No token: the
    # supervisor's bearer tokens are auth.json's, uploaded into its own root filesystem.
    own = ownmounts.own_mounts(settings, prov)
    # "U" as well as upstream's mode=0777: Podman 4.3.1 mounts these root's and 0755 whatever the
    # mode says (seen: the supervisor, as the identity, could not create /run/openshell); U gives
    # each to the container's user, the identity, on every version
    tmpfs = [{"destination": d, "type": "tmpfs", "source": "tmpfs", "options": [*_TMPFS, "size=64m", "U"]}
             for d in SUPERVISOR_TMPFS]
    hosts = ["host.containers.internal", "host.openshell.internal"]
    channel = ["ro", *([selinux.SHARED] if prov.selinux else [])]
    spec: dict[str, Any] = {
        "name": names.supervisor_name(plan.sandbox_id),
        "image": supervisor_image_id,
        "labels": _labels(plan, prov, names.ROLE_SUPERVISOR),
        "entrypoint": [names.SUPERVISOR_ENTRYPOINT],
        "command": [
            "--workdir", prov.workspace, *proxy.supervisor_args(settings),
            f"--backend-descriptor-file={names.RUNTIME_DESCRIPTOR_PATH}",
            f"--auth-bundle-file={names.AUTH_BUNDLE_PATH}",
            f"--health-socket-path={names.SUPERVISOR_HEALTH_SOCKET}",
        ],
        "work_dir": "/",
        "user": f"{identity.uid}:{identity.gid}",
        "groups": [str(g) for g in identity.supplementary_gids],
        "cap_drop": ["ALL"],
        "cap_add": [],
        "no_new_privileges": True,
        "env": supervisor_env(plan, settings, prov.image_user, prov.identity),
        "netns": {"nsmode": "host"},
        "userns": {"nsmode": "host"},
        "hostadd": [f"{h}:{settings.host_gateway_ip or DEFAULT_HOST_GATEWAY_IP}" for h in hosts],
        "mounts": [*tmpfs, *own],
        "volumes": [{"Name": names.channel_volume_name(plan.sandbox_id), "Dest": names.CHANNEL_DIR,
                     "Options": channel}],
        "stop_timeout": settings.stop_timeout,
        "resource_limits": plan.resources.libpod(),
    }
    if settings.health_check_interval:
        spec["healthconfig"] = {
            "Test": ["CMD", names.SUPERVISOR_ENTRYPOINT, "health", "--socket", names.SUPERVISOR_HEALTH_SOCKET],
            "Interval": settings.health_check_interval * _SECONDS,
            "Timeout": 2 * _SECONDS,
            "Retries": 10,
            "StartPeriod": 5 * _SECONDS,
        }
        spec["healthMaxLogCount"] = HEALTH_MAX_LOG_COUNT  # pkg/specgen/specgen.go:606-609 at v5.3.0
        spec["healthMaxLogSize"] = HEALTH_MAX_LOG_SIZE
    else:
        spec["healthconfig"] = {"Test": ["NONE"]}
    return spec
