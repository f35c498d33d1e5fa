"""Resource admission: what podmand attaches is what GetCapabilities advertises.

The gateway admits podmand on the strength of ``resource_admission_policy``, so
the checks here read the same :class:`Policy` that string is serialised from
(:func:`policy`): they cannot drift apart. Also here: host paths podmand must
never hand to a sandbox (its state directory, sockets and TLS files).
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from . import names
from .config import Settings, default_socket
from .errors import FailedPrecondition
from .libpod import PodmanClient, VolumeInspect

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


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def protected_paths(settings: Settings, state_dir: str, podman_socket: str) -> tuple[str, ...]:
    """podmand's own host paths, resolved: a sandbox that sees one can forge
    credentials, read other sandboxes' tokens or drive Podman."""
    sock = settings.socket.removeprefix("unix://") or default_socket()
    paths = [state_dir, posixpath.dirname(sock), podman_socket, settings.tls_ca, settings.tls_cert, settings.tls_key]
    return tuple(sorted({os.path.realpath(p) for p in paths if p}))


def check_host_path(where: str, source: str, protected: Iterable[str]) -> None:
    """Refuse a host path that is, is inside, or contains one of podmand's own paths
    (symlinks resolved: Podman follows them)."""
    for candidate in (posixpath.normpath(source), os.path.realpath(source)):
        for own in protected:
            if _within(candidate, own) or _within(own, candidate):
                raise FailedPrecondition(
                    f"{where}: {source!r} would expose podmand's own {own}; choose a path outside it"
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
    facts: VolumeInspect, pol: Policy, workspace: str, *, enable_bind_mounts: bool, protected: Iterable[str]
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
    protected: Iterable[str],
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


async def attached_volumes(podman: PodmanClient, container_id: str, sandbox_id: str) -> list[str]:
    """Named volumes a sandbox's container has, besides its own workspace volume."""
    info = await podman.inspect_container(container_id)
    own = names.volume_name(sandbox_id)
    return [m.name for m in info.mounts or () if m.type == "volume" and m.name and m.name != own]


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
    """Host binds and named volumes of a request, checked against the policy and
    podmand's own paths before anything is made (ValidateSandboxCreate, create, start)."""
    pol = policy(settings)
    own = protected_paths(settings, state_dir, podman.socket_path)
    volumes = []
    for i, mount in enumerate(mounts):
        where = f"{base}[{i}].source"
        if mount.kind in ("bind", "image") and pol.enabled:
            raise FailedPrecondition(f"{base}[{i}]: {HOST_MOUNT_REFUSED}")
        if mount.kind == "bind":
            check_host_path(where, mount.source, own)
        elif mount.kind == "volume":
            volumes.append((where, mount.source))
    await admit_volumes(
        podman, pol, workspace, volumes, enable_bind_mounts=settings.enable_bind_mounts, protected=own
    )


async def admit_start(
    podman: PodmanClient, settings: Settings, state_dir: str, container_id: str, labels: Mapping[str, str]
) -> None:
    """StartSandbox re-checks what the container was admitted with: provenance and
    the labels of its attached volumes, under today's policy."""
    pol = policy(settings)
    check_provenance(pol, labels.get(names.DRIVER_CONFIG_USED))
    volumes = await attached_volumes(podman, container_id, labels.get(names.SANDBOX_ID, ""))
    await admit_volumes(
        podman,
        pol,
        labels.get(names.SANDBOX_WORKSPACE, ""),
        [("", v) for v in volumes],
        enable_bind_mounts=settings.enable_bind_mounts,
        protected=protected_paths(settings, state_dir, podman.socket_path),
    )
