"""Resource admission: what podmand attaches is what GetCapabilities advertises.

The gateway admits podmand on the strength of ``resource_admission_policy``, so
the checks here read the same :class:`Policy` that string is serialised from
(:func:`policy`): they cannot drift apart. Also here: host paths podmand must
never hand to a sandbox (:func:`protected_paths`: its own files, its operator's
credentials, Podman's storage and the user's registry logins), checked for each
bind at create and, with symlinks resolved again, before every start (Podman
resolves a bind source each time it starts the container). Podman's storage
paths come from one ``/info`` per client, kept for podmand's life.
"""

from __future__ import annotations

import json
import os
import posixpath
import pwd
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from .. import names
from ..config import Settings
from ..errors import FailedPrecondition
from ..libpod import ContainerInspect, Info, MountPoint, PodmanClient, VolumeInspect

WORKSPACE_PLACEHOLDER = "${workspace}"
NOT_ADMITTED = "external resource not admitted by required labels"
HOST_MOUNT_REFUSED = (
    "host bind or image mount cannot be attached while resource admission is enabled: no trusted label resolver"
)
PROVENANCE_REFUSED = "sandbox uses forbidden driver config or lacks admission provenance; recreate it"


@dataclass(frozen=True)
class Policy:
    """The effective admission policy: one value for the wire string and the checks."""

    allow_driver_config: bool
    enabled: bool
    required_labels: tuple[tuple[str, str], ...]  # sorted by key

    def wire(self) -> str:
        """``v1:`` + compact JSON, keys in upstream's declaration order, labels sorted."""
        doc = {
            "allow_driver_config": self.allow_driver_config,
            "resource_admission": {"enabled": self.enabled, "required_labels": dict(self.required_labels)},
        }
        return "v1:" + json.dumps(doc, separators=(",", ":"))

    def labels_for(self, workspace: str) -> dict[str, str] | None:
        """The labels a volume of ``workspace`` must carry; None when the workspace
        cannot stand in for ``${workspace}`` (upstream: invalid workspace identity)."""
        needs_workspace = any(WORKSPACE_PLACEHOLDER in v for _, v in self.required_labels)
        if needs_workspace and not workspace:
            return None
        return {k: v.replace(WORKSPACE_PLACEHOLDER, workspace) for k, v in self.required_labels}


def policy(settings: Settings) -> Policy:
    return Policy(
        allow_driver_config=settings.allow_driver_config,
        enabled=settings.admission_enabled,
        required_labels=tuple(sorted(settings.admission_labels.items())),
    )


# ---------------------------------------------------------------- provenance


def check_provenance(pol: Policy, driver_config_used: str | None) -> None:
    """A sandbox may run only if it used no caller driver config, or the operator allows it."""
    if driver_config_used == "false" or (driver_config_used == "true" and pol.allow_driver_config):
        return
    raise FailedPrecondition(PROVENANCE_REFUSED)


# ---------------------------------------------------------------- host paths


class Protected(NamedTuple):
    """A host path no sandbox may see, resolved, and what it is (for the refusal)."""

    path: str
    role: str


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


CONFIG_DIR = "Podman's containers config directory (storage.conf, auth.json)"


def podman_paths(info: Info) -> tuple[Protected, ...]:
    """Podman's own paths, as its ``/info`` reports them: image and container storage,
    its run root, its volumes, and the directory of its storage.conf (for rootless
    Podman the user's containers config directory, which holds auth.json)."""
    store = info.store
    config_dir = posixpath.dirname(store.configFile) if posixpath.isabs(store.configFile) else ""
    if not config_dir and not info.host.security.rootless:
        # Podman 5.8 and later no longer report the file (containers/podman#28083): rootful,
        # its default place; rootless, the user's config directory (registry_logins, CONFIG_DIR)
        config_dir = "/etc/containers"
    found = [
        (store.graphRoot, "Podman's storage (graphRoot)"),
        (store.runRoot, "Podman's run root (runRoot)"),
        (store.volumePath, "Podman's volume directory (volumePath)"),
        (config_dir, CONFIG_DIR),
    ]
    return tuple(Protected(path, role) for path, role in found if path)


def registry_logins(env: Mapping[str, str], uid: int) -> tuple[Protected, ...]:
    """Where Podman keeps the user's registry logins (containers-auth.json(5)):
    ``$REGISTRY_AUTH_FILE``, the runtime and config directories holding auth.json
    (all of each: they also hold Podman's other settings) and Docker's config.json."""
    home = env.get("HOME", "")
    if not home:
        try:
            home = pwd.getpwuid(uid).pw_dir
        except KeyError:  # a uid without an account: no home to protect
            home = ""
    runtime = env.get("XDG_RUNTIME_DIR", "")
    config = env.get("XDG_CONFIG_HOME") or (posixpath.join(home, ".config") if home else "")
    found = [
        (env.get("REGISTRY_AUTH_FILE", ""), "the registry auth file $REGISTRY_AUTH_FILE names"),
        (posixpath.join(runtime, "containers") if runtime else f"/run/containers/{uid}",
         "the containers runtime directory (auth.json)"),
        (posixpath.join(config, "containers") if config else "", CONFIG_DIR),
    ]
    if home:
        found += [
            (posixpath.join(home, ".config", "containers"), CONFIG_DIR),
            (posixpath.join(home, ".docker", "config.json"), "Docker's registry auth file (~/.docker/config.json)"),
        ]
    return tuple(Protected(path, role) for path, role in found if path)


def protected_paths(
    settings: Settings,
    state_dir: str,
    podman_socket: str,
    podman_own: Iterable[Protected] = (),
    env: Mapping[str, str] | None = None,
) -> tuple[Protected, ...]:
    """Every host path a sandbox must not see, resolved, sorted, each once (the first
    role named wins): podmand's own (its state directory, socket directory, TLS files),
    its operator's secrets (registry and proxy credentials, the rootfs staging
    directory), the Podman socket, ``podman_own`` (:func:`podman_paths`) and the
    user's registry logins. A sandbox that sees one can forge credentials, read other
    sandboxes' tokens or images, log in to registries as the operator, or drive Podman."""
    sock = settings.socket
    found = [
        (state_dir, "podmand's own state directory"),
        (posixpath.dirname(sock), "podmand's own socket directory"),
        (podman_socket, "the Podman API socket"),
        (settings.tls_ca, "podmand's own TLS CA (tls_ca)"),
        (settings.tls_cert, "podmand's own TLS certificate (tls_cert)"),
        (settings.tls_key, "podmand's own TLS key (tls_key)"),
        (settings.registry_auth_file, "the registry auth file (registry_auth_file)"),
        (settings.proxy_auth_file or "", "the proxy credential file (proxy_auth_file)"),
        (settings.proxy_ca_bundle or "", "the proxy CA bundle (proxy_ca_bundle)"),
        (settings.rootfs_staging_dir, "the rootfs staging directory (rootfs_staging_dir)"),
        *podman_own,
        *registry_logins(os.environ if env is None else env, os.geteuid()),
    ]
    roles: dict[str, str] = {}
    for path, role in found:
        if path:
            roles.setdefault(os.path.realpath(path), role)
    return tuple(Protected(path, roles[path]) for path in sorted(roles))


async def protected(podman: PodmanClient, settings: Settings, state_dir: str) -> tuple[Protected, ...]:
    """:func:`protected_paths` with Podman's own paths (its storage does not move while it
    serves: the ``/info`` the client first had)."""
    own = podman_paths(await podman.served_info())
    return protected_paths(settings, state_dir, podman.socket_path, own)


def check_host_path(where: str, source: str, protected: Iterable[Protected]) -> None:
    """Refuse a host path that is, is inside, or contains a protected path
    (symlinks resolved: Podman follows them)."""
    for candidate in (posixpath.normpath(source), os.path.realpath(source)):
        for own in protected:
            if _within(candidate, own.path) or _within(own.path, candidate):
                raise FailedPrecondition(
                    f"{where}: {source!r} would expose {own.role} ({own.path}); choose a path outside it"
                )


# ---------------------------------------------------------------- named volumes


def host_source(facts: VolumeInspect) -> str | None:
    """The host path a ``local`` volume mounts (``o=bind``, or a device), else None."""
    if facts.driver not in ("", "local"):
        return None
    opts = facts.options or {}
    flags = {f.strip() for f in opts.get("o", "").split(",")}
    device = opts.get("device", "")
    if flags & {"bind", "rbind"} or opts.get("type", "") in ("none", "bind", "rbind"):
        return device or "/"
    if device.startswith("/") and opts.get("type", "") != "tmpfs":
        return device
    return None


def check_volume(
    facts: VolumeInspect, pol: Policy, workspace: str, *, enable_bind_mounts: bool, protected: Iterable[Protected]
) -> None:
    """A named volume may be attached: not a hidden host bind, and labelled as admission requires."""
    label = f"podman volume {facts.name!r}"
    device = host_source(facts)
    if device is not None:
        if not enable_bind_mounts:
            raise FailedPrecondition(
                f"{label} is backed by a host bind mount and requires enable_bind_mounts "
                "(OPENSHELL_ENABLE_BIND_MOUNTS)"
            )
        check_host_path(label, device, protected)
    if not pol.enabled:
        return
    wanted = pol.labels_for(workspace)
    if wanted is None:
        raise FailedPrecondition(f"{label}: resource not admitted: invalid workspace identity")
    have: Mapping[str, str] = facts.labels or {}
    if any(have.get(k) != v for k, v in wanted.items()):
        raise FailedPrecondition(f"{label}: {NOT_ADMITTED}")


async def admit_volumes(
    podman: PodmanClient,
    pol: Policy,
    workspace: str,
    volumes: Iterable[tuple[str, str]],
    *,
    enable_bind_mounts: bool,
    protected: Iterable[Protected],
) -> None:
    """Check each ``(where, volume name)``; the error names ``where``."""
    own = tuple(protected)
    for where, name in volumes:
        facts = await podman.inspect_volume(name)
        prefix = f"{where}: " if where else ""
        if facts is None:
            raise FailedPrecondition(f"{prefix}podman volume {name!r} does not exist")
        try:
            check_volume(facts, pol, workspace, enable_bind_mounts=enable_bind_mounts, protected=own)
        except FailedPrecondition as exc:
            raise FailedPrecondition(prefix + exc.message) from exc


def attached_volumes(facts: ContainerInspect, sandbox_id: str) -> list[str]:
    """Named volumes a sandbox's container has, besides its own workspace and channel volumes."""
    own = (names.volume_name(sandbox_id), names.channel_volume_name(sandbox_id))
    return [m.name for m in facts.mounts or () if m.type == "volume" and m.name and m.name not in own]


def caller_binds(facts: ContainerInspect) -> list[MountPoint]:
    """The host binds a start of the container mounts besides podmand's own. podmand's
    own (pair/specs.py: the workload's runtime binary and resolv.conf; the supervisor's
    TLS client and proxy files, ownmounts.py) are the binds at a reserved target, which
    no caller mount may have (driverconfig.py), whichever state directory they come from
    (the podmand that made the container may have had another); Podman shows an image
    mount, once started, as a bind from its storage at that mount's target as well."""
    images = {m.destination for m in facts.mounts or () if m.type == "image"}

    def own(m: MountPoint) -> bool:
        return any(_within(m.destination, root) for root in names.RESERVED_ROOTS)

    return [m for m in facts.mounts or () if m.type == "bind" and not own(m) and m.destination not in images]


# ---------------------------------------------------------------- per request


class _MountLike(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def source(self) -> str: ...


async def admit_mounts(
    podman: PodmanClient,
    settings: Settings,
    state_dir: str,
    workspace: str,
    mounts: Iterable[_MountLike],
    base: str = "sandbox.spec.template.driver_config.mounts",
) -> None:
    """Host binds and named volumes of a request, checked against the policy and the
    protected paths before anything is made (ValidateSandboxCreate, create, start)."""
    pol = policy(settings)
    binds, volumes = [], []
    for i, mount in enumerate(mounts):
        where = f"{base}[{i}].source"
        if mount.kind in ("bind", "image") and pol.enabled:
            raise FailedPrecondition(f"{base}[{i}]: {HOST_MOUNT_REFUSED}")
        if mount.kind == "bind":
            binds.append((where, mount.source))
        elif mount.kind == "volume":
            volumes.append((where, mount.source))
    if not binds and not volumes:
        return
    own = await protected(podman, settings, state_dir)
    for where, source in binds:
        check_host_path(where, source, own)
    await admit_volumes(
        podman, pol, workspace, volumes, enable_bind_mounts=settings.enable_bind_mounts, protected=own
    )


async def admit_binds(
    podman: PodmanClient,
    settings: Settings,
    state_dir: str,
    mounts: Iterable[_MountLike],
    base: str = "sandbox.spec.template.driver_config.mounts",
) -> None:
    """A request's host binds against today's protected paths, symlinks resolved now:
    provisioning checks them again just before the container's first start."""
    binds = [(f"{base}[{i}].source", m.source) for i, m in enumerate(mounts) if m.kind == "bind"]
    if binds:
        own = await protected(podman, settings, state_dir)
        for where, source in binds:
            check_host_path(where, source, own)


async def admit_start(
    podman: PodmanClient, settings: Settings, state_dir: str, container_id: str, labels: Mapping[str, str]
) -> ContainerInspect:
    """StartSandbox re-checks what the container was admitted with, under today's
    policy: provenance, its host binds (allowed at all, and clear of the protected
    paths with symlinks resolved now, as Podman resolves them when it starts the
    container) and its attached volumes' labels; the container's inspect, read for it."""
    pol = policy(settings)
    check_provenance(pol, labels.get(names.DRIVER_CONFIG_USED))
    facts = await podman.inspect_container(container_id)
    binds = caller_binds(facts)
    volumes = attached_volumes(facts, labels.get(names.SANDBOX_ID, ""))
    if binds and pol.enabled:
        raise FailedPrecondition(f"bind mount {binds[0].destination!r}: {HOST_MOUNT_REFUSED}")
    if binds and not settings.enable_bind_mounts:
        where = f"bind mount {binds[0].destination!r}"
        raise FailedPrecondition(f"{where}: bind mounts require enable_bind_mounts (OPENSHELL_ENABLE_BIND_MOUNTS)")
    if not binds and not volumes:
        return facts
    own = await protected(podman, settings, state_dir)
    for m in binds:
        check_host_path(f"bind mount {m.destination!r}", m.source, own)
    await admit_volumes(
        podman,
        pol,
        labels.get(names.SANDBOX_WORKSPACE, ""),
        [("", v) for v in volumes],
        enable_bind_mounts=settings.enable_bind_mounts,
        protected=own,
    )
    return facts
