"""The libpod answers podmand reads, as msgspec shapes: only the fields it uses (and the
one answer carried in a header, a path's stat: :func:`path_stat`).

Every field has a default, so an older or newer Podman that leaves one out still
decodes; unknown fields are ignored.  One set for the whole program (serve, ctl,
doctor).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import msgspec

from .errors import PodmanError, PodmanUnreadable

# ---------------------------------------------------------------- containers


class HealthState(msgspec.Struct, rename="pascal"):
    status: str = ""


class ContainerState(msgspec.Struct, rename="pascal"):
    status: str = ""
    running: bool = False
    paused: bool = False
    exit_code: int = 0
    oom_killed: bool = msgspec.field(default=False, name="OOMKilled")
    started_at: str = ""
    finished_at: str = ""
    health: HealthState | None = None
    stopped_by_user: bool = False
    conmon_pid: int = 0  # on the same host: where podmand finds Podman's exit directory (exitfiles.py)



class PathStat(msgspec.Struct, rename="camel"):
    """What Podman's archive endpoint says of a path in a container (``X-Docker-Container-Path-Stat``,
    base64 JSON): ``mode`` is Go's ``os.FileMode`` of an lstat, so the path's last component
    counts as a symbolic link (its mode holds :data:`SYMLINK`) and any before it are followed;
    ``link_target`` is where the link leads (for anything else: the path)."""

    name: str = ""
    size: int = 0
    mode: int = 0
    is_dir: bool = False
    link_target: str = ""

    SYMLINK: ClassVar[int] = 1 << 27  # Go's os.ModeSymlink

    @property
    def symlink(self) -> bool:
        return bool(self.mode & self.SYMLINK)


PATH_STAT_HEADER = "x-docker-container-path-stat"  # lower case, as transports give header names


def path_stat(status: int, headers: Mapping[str, str], what: str) -> PathStat | None:
    """The stat an answer of the archive endpoint carries in :data:`PATH_STAT_HEADER` (base64
    JSON, in the URL alphabet Podman uses); None when there is no such path. A symbolic link
    that leads nowhere is a 404 whose stat still says it is a link: it counts."""
    encoded = headers.get(PATH_STAT_HEADER)
    if status == 404 and encoded is None:
        return None
    if status >= 400 and status != 404:  # an answer to HEAD has no body to say why
        raise PodmanError(status, f"the stat of {what} failed")
    try:
        return msgspec.json.decode(base64.urlsafe_b64decode(encoded or ""), type=PathStat)
    except (ValueError, msgspec.DecodeError):  # binascii.Error is a ValueError
        raise PodmanUnreadable(f"Podman's stat of {what} is not base64 JSON: {(encoded or '')[:80]!r}") from None

class HealthConfig(msgspec.Struct, rename="pascal"):
    test: list[str] | None = None


class ContainerConfig(msgspec.Struct, rename="pascal"):
    labels: dict[str, str] | None = None
    healthcheck: HealthConfig | None = None
    user: str = ""

    @property
    def checked(self) -> bool:
        """A health check is defined. A container made with its image's check turned off keeps
        ``{"Test": ["NONE"]}`` (Podman 5.x shows it; 4.3.1 shows none), and its healthcheck
        run answers 409 "has no defined healthcheck"."""
        test = self.healthcheck.test if self.healthcheck else None
        return bool(test) and test != ["NONE"]


class IDMappings(msgspec.Struct, rename="pascal"):
    """A container's user namespace, as ``/proc/<pid>/uid_map`` lines."""

    uid_map: list[str] | None = None
    gid_map: list[str] | None = None


class HostConfig(msgspec.Struct, rename="pascal"):
    cap_add: list[str] | None = None
    cap_drop: list[str] | None = None
    id_mappings: IDMappings | None = msgspec.field(default=None, name="IDMappings")
    userns_mode: str = ""
    network_mode: str = ""
    security_opt: list[str] | None = None
    privileged: bool = False
    memory: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    pids_limit: int = 0


class MountPoint(msgspec.Struct, rename="pascal"):
    destination: str = ""
    type: str = ""
    name: str = ""  # a named volume's
    source: str = ""  # a bind's host path, as given (symlinks unresolved: Podman resolves them at each start)
    rw: bool = msgspec.field(default=True, name="RW")


class NetworkSettings(msgspec.Struct, rename="pascal"):
    networks: dict[str, Any] | None = None


class ContainerInspect(msgspec.Struct, rename="pascal"):
    id: str
    name: str = ""
    created: str = ""
    state: ContainerState = msgspec.field(default_factory=ContainerState)
    config: ContainerConfig = msgspec.field(default_factory=ContainerConfig)
    image: str = ""
    effective_caps: list[str] | None = None
    host_config: HostConfig = msgspec.field(default_factory=HostConfig)
    mounts: list[MountPoint] | None = None
    network_settings: NetworkSettings = msgspec.field(default_factory=NetworkSettings)
    hosts_path: str = ""  # the /etc/hosts Podman writes for it (set once initialised)

    @property
    def labels(self) -> dict[str, str]:
        return self.config.labels or {}


class ContainerListEntry(msgspec.Struct, rename="pascal"):
    """One entry of libpod's ``GET /containers/json``: times in whole seconds, no
    OOM flag, no configuration. ``status`` is libpod's ``Status``: the healthcheck's
    status ("" without one; libpod's list, unlike Docker's, fills it with nothing else)."""

    id: str
    names: list[str] | None = None
    state: str = ""
    labels: dict[str, str] | None = None
    exit_code: int = 0
    exited: bool = False
    exited_at: int = 0
    started_at: int = 0
    created: str = ""
    status: str = ""


class ContainerCreated(msgspec.Struct, rename="pascal"):
    id: str
    warnings: list[str] | None = None


class HealthcheckResult(msgspec.Struct, rename="pascal"):
    status: str = ""


# ---------------------------------------------------------------- images


class ImageConfig(msgspec.Struct, rename="pascal"):
    user: str = ""
    working_dir: str = ""  # WorkingDir: where the sandbox's workspace goes (sandbox/workspace.py)
    env: list[str] | None = None
    labels: dict[str, str] | None = None  # copied onto every container made from the image
    # VOLUME paths (the values are empty objects): each an anonymous volume of every container
    # made from the image (sandbox/mountlinks.py looks where Podman would place them)
    volumes: dict[str, Any] | None = None


class ImageInspect(msgspec.Struct, rename="pascal"):
    id: str = ""
    config: ImageConfig = msgspec.field(default_factory=ImageConfig)
    repo_tags: list[str] | None = None


class ImageSummary(msgspec.Struct, rename="pascal"):
    """One entry of ``GET /images/json``."""

    id: str
    names: list[str] | None = None


class ImageImported(msgspec.Struct, rename="pascal"):
    id: str = ""


class PullLine(msgspec.Struct):
    stream: str = ""
    error: str = ""
    id: str = ""
    images: list[str] | None = None


# ---------------------------------------------------------------- volumes and networks


class VolumeInspect(msgspec.Struct, rename="pascal"):
    name: str
    labels: dict[str, str] | None = None
    created_at: str = ""
    driver: str = ""
    options: dict[str, str] | None = None  # a ``local`` volume's mount options (o=bind, device)


class Subnet(msgspec.Struct):
    subnet: str


class NetworkInspect(msgspec.Struct):
    name: str
    labels: dict[str, str] | None = None
    created: str = ""
    subnets: list[Subnet] | None = None


# ---------------------------------------------------------------- events


class EventActor(msgspec.Struct, rename="pascal"):
    id: str = msgspec.field(default="", name="ID")
    attributes: dict[str, str] | None = None


class Event(msgspec.Struct):
    Type: str = ""
    Action: str = ""
    Actor: EventActor = msgspec.field(default_factory=EventActor)
    timeNano: int = 0


@dataclass
class BadEvent:
    """An event line podmand could not read (over-long or undecodable): skipped,
    never a reason to drop the subscription."""

    container_id: str
    reason: str


# ---------------------------------------------------------------- /info


class IDMap(msgspec.Struct):
    """One range of the rootless user's ID mapping, as ``/info`` reports it."""

    container_id: int = 0
    host_id: int = 0
    size: int = 0


class HostIDMappings(msgspec.Struct):
    uidmap: list[IDMap] | None = None
    gidmap: list[IDMap] | None = None


class HostSecurity(msgspec.Struct):
    rootless: bool = False
    selinuxEnabled: bool | None = None  # None: this Podman does not say


class OCIRuntimeInfo(msgspec.Struct):
    name: str = ""  # crun, runc, ...
    version: str = ""


class PastaInfo(msgspec.Struct):
    executable: str = ""  # empty: pasta is not installed (reported since Podman 4.7)


class HostInfo(msgspec.Struct):
    cgroupVersion: str = ""
    cgroupManager: str = ""  # systemd or cgroupfs
    cgroupControllers: list[str] | None = None  # the controllers available to Podman itself (since 3.3)
    idMappings: HostIDMappings | None = None
    security: HostSecurity = msgspec.field(default_factory=HostSecurity)
    ociRuntime: OCIRuntimeInfo | None = None
    eventLogger: str = ""  # journald, file or none
    rootlessNetworkCmd: str = ""  # pasta or slirp4netns (reported since Podman 5.1)
    pasta: PastaInfo | None = None
    networkBackend: str = ""  # netavark or cni (Podman 6 has only netavark)


class StoreInfo(msgspec.Struct):
    graphDriverName: str = ""
    graphRoot: str = ""
    runRoot: str = ""
    volumePath: str = ""
    configFile: str = ""  # the storage.conf Podman read (rootless: in the user's containers config directory)


class VersionInfo(msgspec.Struct, rename="pascal"):
    version: str = ""
    api_version: str = msgspec.field(default="", name="APIVersion")


class Info(msgspec.Struct):
    host: HostInfo = msgspec.field(default_factory=HostInfo)
    store: StoreInfo = msgspec.field(default_factory=StoreInfo)
    version: VersionInfo = msgspec.field(default_factory=VersionInfo)
