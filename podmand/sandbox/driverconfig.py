"""A sandbox's own ``driver_config``: the caller's mounts, CDI devices and user
namespace mode (usernamespace.py), and the gateway's staged ``rootfs_tar_path``
(rootfs.py), checked whole.

Pure: :func:`parse` reads ``template.driver_config`` and returns what podmand will
attach, or raises an error naming the offending field. The schema is upstream's
(``cdi_devices``; ``mounts`` of type ``bind``, ``volume``, ``tmpfs`` and ``image``);
what Podman needs to be asked (volume labels, image pulls) happens in the driver,
which also hands in what the connected Podman supports (versions.py): a
``subpath`` only where it would be honoured, since an older Podman ignores the field
and mounts the whole source.

Each target is also looked up in the sandbox's image, one component at a time
(mountlinks.py: Podman would follow a symbolic link there), so a target has at most
:data:`DEPTH` components and no glob characters, and all of a request's targets
together at most :data:`LOOKUPS` distinct components; and none is below another
mount but a tmpfs (a link in a volume's, a bind's or an image's files would move it).
"""

from __future__ import annotations

import math
import posixpath
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from google.protobuf import json_format, struct_pb2

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..config import Settings
from ..errors import FailedPrecondition, InvalidArgument
from ..libpod import versions
from ..libpod.versions import Features
from ..security import admission
from . import imagechecks, rootfs, usernamespace

WHERE = "sandbox.spec.template.driver_config"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_TMPFS_BYTES = 2**50  # 1 PiB, as memory limits
MAX_PATH = 4096
DEPTH = 32  # components of a path podmand looks up in an image, one request to Podman each
LOOKUPS = 256  # distinct components of all of a request's mount targets together, likewise
GLOB = re.compile(r"[*?\[\\]")  # what Podman's stat (Go's filepath.Glob) would match rather than name
SELINUX_LABELS = {"shared": "z", "private": "Z"}  # upstream's names, Podman's relabel options
# userns modes in which the user owning Podman's storage is not mapped into the sandbox:
# Podman cannot mount an image volume there (containers/podman#23211, open; checked on 4.3.1).
IMAGE_MOUNT_USERNS = ("auto", "nomap", "private")
_FIELDS = {
    "bind": {"source", "target", "read_only", "selinux_label"},
    "volume": {"source", "target", "read_only", "subpath"},
    "tmpfs": {"target", "options", "size_bytes", "mode"},
    "image": {"source", "target", "read_only", "subpath"},
}
# tmpfs options Podman passes to mount(2) or handles itself; anything else (a comma
# smuggling several options in, a typo) is refused here rather than by Podman later.
_TMPFS_FLAGS = frozenset(
    {
        *("rw", "ro", "exec", "noexec", "suid", "nosuid", "dev", "nodev", "sync", "async"),
        *("atime", "noatime", "diratime", "nodiratime", "relatime", "norelatime", "strictatime", "nostrictatime"),
        *("tmpcopyup", "notmpcopyup", "private", "rprivate", "shared", "rshared", "slave", "rslave"),
        *("unbindable", "runbindable"),
    }
)
_TMPFS_VALUES = {
    "size": re.compile(r"[0-9]{1,20}[kmgKMG%]?"),
    "mode": re.compile(r"[0-7]{1,4}"),
    "uid": re.compile(r"[0-9]{1,10}"),
    "gid": re.compile(r"[0-9]{1,10}"),
    "nr_inodes": re.compile(r"[0-9]{1,20}[kmgKMG]?"),
    "nr_blocks": re.compile(r"[0-9]{1,20}[kmgKMG]?"),
}
DEFAULT_TMPFS_OPTIONS = ("rw", "nosuid", "nodev")


@dataclass(frozen=True)
class Mount:
    kind: str  # bind | volume | tmpfs | image
    target: str
    source: str = ""  # host path, volume name or image reference
    read_only: bool = True
    options: tuple[str, ...] = ()  # tmpfs only
    selinux: str = ""  # bind only: Podman's relabel option, "z" or "Z"
    subpath: str = ""  # volume and image only: the part of the source mounted (relative, no '..')


class DriverConfig(NamedTuple):
    mounts: tuple[Mount, ...] = ()
    cdi_devices: tuple[str, ...] = ()
    used: bool = False  # the caller sent a non-empty driver_config
    rootfs_tar: str = ""  # the gateway's staged rootfs tar (rootfs.py)
    userns: str = ""  # the user namespace mode asked for (usernamespace.requested); "": the default


def _check_finite(where: str, value: struct_pb2.Value) -> None:
    """NaN and Infinity are not JSON; protobuf's JSON conversion raises on them."""
    kind = value.WhichOneof("kind")
    if kind == "number_value" and not math.isfinite(value.number_value):
        raise InvalidArgument(f"{where}: must be a finite number, not {value.number_value}")
    if kind == "struct_value":
        for key, item in value.struct_value.fields.items():
            _check_finite(f"{where}.{key}", item)
    elif kind == "list_value":
        for i, item in enumerate(value.list_value.values):
            _check_finite(f"{where}[{i}]", item)


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def ancestors(path: str) -> list[str]:
    """The normalised ``path``'s ancestors, shallowest first, then the path itself: each
    is looked at in the image for a symbolic link (``/a/b`` -> ``["/a", "/a/b"]``)."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def normalize_target(where: str, target: Any, control_paths: tuple[str, ...] = ()) -> str:
    """An absolute, normalised container path, not '/', clear of the reserved paths
    (OpenShell's own and the kernel's /proc, /sys and /dev; a trailing '/' is
    dropped, as upstream does), that podmand can look up in the image: at most
    :data:`DEPTH` components, no glob characters."""
    if not isinstance(target, str) or not target.startswith("/") or target != target.strip() or _CONTROL.search(target):
        raise InvalidArgument(f"{where}: mount target must be an absolute path")
    if len(target) > MAX_PATH:
        raise InvalidArgument(f"{where}: mount target is longer than {MAX_PATH} characters")
    parts = target.rstrip("/").split("/")[1:]
    if not parts or any(p in ("", ".", "..") for p in parts):
        raise InvalidArgument(f"{where}: mount target {target!r} must be normalised and not '/'")
    norm = "/" + "/".join(parts)
    if GLOB.search(norm):
        raise InvalidArgument(f"{where}: mount target {norm!r} has glob characters (*, ?, [ or \\), which podmand "
                              "cannot look up in the image")
    if len(parts) > DEPTH:
        raise InvalidArgument(f"{where}: mount target is deeper than {DEPTH} directories")
    for root in names.RESERVED_ROOTS:
        if _overlaps(norm, root):
            raise InvalidArgument(f"{where}: mount target {norm!r} conflicts with reserved path {root!r}")
    for path in control_paths:
        if _overlaps(norm, path):
            raise InvalidArgument(f"{where}: mount target {norm!r} conflicts with OpenShell control path {path!r}")
    return norm


SUBPATH_SINCE = {"volume": versions.VOLUME_SUBPATH, "image": versions.IMAGE_SUBPATH}


def _subpath(where: str, value: Any, kind: str, podman: Features) -> str:
    """Upstream's shape check, then whether ``podman`` honours it: one that does not would
    ignore the field (libpod's JSON decoding drops unknown fields) and mount the whole source."""
    if value is None:
        return ""
    if not isinstance(value, str) or not value or value != value.strip() or _CONTROL.search(value):
        raise InvalidArgument(f"{where}: must be a non-empty relative path")
    if len(value) > MAX_PATH:
        raise InvalidArgument(f"{where}: is longer than {MAX_PATH} characters")
    if value.startswith("/") or ".." in value.split("/"):
        raise InvalidArgument(f"{where}: must be relative and must not contain '..'")
    need = SUBPATH_SINCE[kind]
    if not podman.has(need):
        raise FailedPrecondition(
            f"{where}: {kind} subpath needs Podman {versions.shown(need)} or newer, and "
            f"{podman.described()} would ignore it and mount the whole {kind}"
        )
    return value


def _integer(where: str, value: Any, low: int, high: int, what: str) -> int | None:
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or value != int(value) or not low <= value <= high:
        raise InvalidArgument(f"{where}: must be {what}")
    return int(value)


def _tmpfs_options(where: str, value: Any, size: int | None, mode: int | None) -> tuple[str, ...]:
    if value is None:
        value = []
    if not isinstance(value, list) or not all(isinstance(o, str) for o in value):
        raise InvalidArgument(f"{where}: must be a list of strings")
    out: list[str] = []
    for i, raw in enumerate(value):
        option = raw.strip()
        key, eq, arg = option.partition("=")
        if not option:
            raise InvalidArgument(f"{where}[{i}]: tmpfs options must not contain empty values")
        if eq and key in _TMPFS_VALUES:
            if not _TMPFS_VALUES[key].fullmatch(arg):
                raise InvalidArgument(f"{where}[{i}]: {option[:64]!r} has an invalid value")
            if (key == "size" and size is not None) or (key == "mode" and mode is not None):
                raise InvalidArgument(f"{where}[{i}]: {key}= conflicts with {key}{'_bytes' if key == 'size' else ''}")
        elif eq or option not in _TMPFS_FLAGS:
            raise InvalidArgument(f"{where}[{i}]: {option[:64]!r} is not a tmpfs mount option")
        out.append(option)
    if len({o.partition("=")[0] for o in out}) != len(out):
        raise InvalidArgument(f"{where}: an option is given twice")
    opts = out or list(DEFAULT_TMPFS_OPTIONS)
    if size is not None:
        opts.append(f"size={size}")
    if mode is not None:
        opts.append(f"mode={mode:o}")
    return tuple(opts)


def _mount(mw: str, m: Any, settings: Settings, userns: str, control: tuple[str, ...], podman: Features) -> Mount:
    if not isinstance(m, dict):
        raise InvalidArgument(f"{mw}: must be an object")
    kind = m.get("type")
    if kind not in _FIELDS:
        raise InvalidArgument(f"{mw}.type: must be bind, volume, tmpfs or image")
    extra = set(m) - _FIELDS[kind] - {"type"}
    if extra:
        raise InvalidArgument(f"{mw}: unknown field(s) {', '.join(sorted(extra))} for a {kind} mount")
    target = normalize_target(f"{mw}.target", m.get("target", ""), control)
    read_only = m.get("read_only", True)
    if not isinstance(read_only, bool):
        raise InvalidArgument(f"{mw}.read_only: must be a boolean")
    if kind == "tmpfs":
        size = _integer(f"{mw}.size_bytes", m.get("size_bytes"), 1, MAX_TMPFS_BYTES, "a positive integer, at most 1Pi")
        mode = _integer(f"{mw}.mode", m.get("mode"), 0, 0o7777, "an integer permission mode, 0 to 4095 (0o7777)")
        return Mount("tmpfs", target, "", False, _tmpfs_options(f"{mw}.options", m.get("options"), size, mode))
    source = m.get("source", "")
    if kind == "volume":
        if not isinstance(source, str) or len(source) > 255 or not names.ID_RE.fullmatch(source):
            raise InvalidArgument(f"{mw}.source: must be a Podman volume name")
        subpath = _subpath(f"{mw}.subpath", m.get("subpath"), kind, podman)
        return Mount("volume", target, source, read_only, subpath=subpath)
    if kind == "image":
        subpath = _image(mw, source, m.get("subpath"), settings, userns, podman)
        return Mount("image", target, source, read_only, subpath=subpath)
    return Mount("bind", target, source, read_only, selinux=_bind(mw, source, m.get("selinux_label"), settings))


def _image(mw: str, source: Any, subpath: Any, settings: Settings, userns: str, podman: Features) -> str:
    """Check an image mount; its subpath ("" for the whole image)."""
    if not isinstance(source, str) or not names.is_image_reference(source):
        raise InvalidArgument(f"{mw}.source: must be an image reference")
    if why := imagechecks.reference_refusal(source):
        raise InvalidArgument(f"{mw}.source: {why}")
    checked = _subpath(f"{mw}.subpath", subpath, "image", podman)
    if admission.policy(settings).enabled:
        raise FailedPrecondition(f"{mw}: {admission.HOST_MOUNT_REFUSED}")
    base = userns.split(":", 1)[0]
    if base in IMAGE_MOUNT_USERNS:
        raise FailedPrecondition(
            f"{mw}: Podman cannot mount an image into a sandbox with userns={base} (its storage owner is not "
            "mapped there: containers/podman#23211); use a named volume, or userns keep-id or host"
        )
    return checked


def _bind(mw: str, source: Any, label: Any, settings: Settings) -> str:
    """Check a host bind; its SELinux relabel option ("" for none)."""
    if label is not None and label not in SELINUX_LABELS:
        raise InvalidArgument(f"{mw}.selinux_label: must be shared or private")
    if admission.policy(settings).enabled:
        raise FailedPrecondition(f"{mw}: {admission.HOST_MOUNT_REFUSED}")
    if not settings.enable_bind_mounts:
        raise FailedPrecondition(f"{mw}: bind mounts require enable_bind_mounts (OPENSHELL_ENABLE_BIND_MOUNTS)")
    if (
        not isinstance(source, str)
        or not posixpath.isabs(source)
        or source != source.strip()
        or len(source) > MAX_PATH
        or _CONTROL.search(source)
    ):
        raise InvalidArgument(f"{mw}.source: bind source must be an absolute host path")
    return SELINUX_LABELS.get(label or "", "")


def parse(
    tpl: pb.DriverSandboxTemplate,
    settings: Settings,
    *,
    userns: str = "",
    control_paths: tuple[str, ...] = (),
    podman: Features = versions.UNKNOWN,
) -> DriverConfig:
    """The template's driver_config, checked whole; ``userns`` is the sandbox's
    user-namespace mode, ``control_paths`` container paths no mount may cover, ``podman``
    what the connected Podman supports (unknown: no subpath)."""
    if not tpl.HasField("driver_config") or not tpl.driver_config.fields:
        return DriverConfig()
    # rootfs_tar_path is the gateway's (it refuses one from a caller and substitutes the
    # slot it staged), so it needs no allow_driver_config and does not count as caller config.
    caller = set(tpl.driver_config.fields) - {rootfs.KEY}
    if caller and not settings.allow_driver_config:
        raise FailedPrecondition(
            f"{WHERE}: caller driver config is disabled; a gateway administrator must enable allow_driver_config"
        )
    for key, value in tpl.driver_config.fields.items():
        _check_finite(f"{WHERE}.{key}", value)
    try:
        cfg = json_format.MessageToDict(tpl.driver_config)
    except ValueError as exc:  # e.g. a Value with no kind set
        raise InvalidArgument(f"{WHERE}: not valid JSON: {exc}") from exc
    unknown = set(cfg) - {"cdi_devices", "mounts", "userns_mode", rootfs.KEY}
    if unknown:
        raise InvalidArgument(f"{WHERE}: unknown field(s) {', '.join(sorted(unknown))}")
    devices = cfg.get("cdi_devices", [])
    if not isinstance(devices, list) or not all(isinstance(d, str) and d.strip() for d in devices):
        raise InvalidArgument(f"{WHERE}.cdi_devices: must be a list of non-empty strings")
    duplicate = next((d for i, d in enumerate(devices) if d in devices[:i]), None)
    if duplicate is not None:  # upstream's wording
        raise InvalidArgument(f"{WHERE}.cdi_devices: contains duplicate device ID {duplicate!r}")
    asked = usernamespace.requested(cfg["userns_mode"], settings, podman) if "userns_mode" in cfg else ""
    userns = asked or userns
    raw = cfg.get("mounts", [])
    if not isinstance(raw, list):
        raise InvalidArgument(f"{WHERE}.mounts: must be a list")
    mounts: list[Mount] = []
    seen: set[str] = set()
    for i, m in enumerate(raw):
        mount = _mount(f"{WHERE}.mounts[{i}]", m, settings, userns, control_paths, podman)
        if mount.target in seen:
            raise InvalidArgument(f"{WHERE}.mounts[{i}].target: duplicate mount target {mount.target!r}")
        seen.add(mount.target)
        mounts.append(mount)
    for i, inner in enumerate(mounts):  # a link in the outer mount's files would move the inner one (mountlinks.py)
        for j, outer in enumerate(mounts):
            if outer.kind != "tmpfs" and inner.target.startswith(outer.target + "/"):
                raise InvalidArgument(
                    f"{WHERE}.mounts[{i}].target: {inner.target!r} is inside mounts[{j}] ({outer.kind} at "
                    f"{outer.target!r}), whose files are not the image's: a symbolic link there would move it; "
                    "podmand mounts nothing below a volume, bind or image mount"
                )
    looked = len({a for m in mounts for a in ancestors(m.target)})
    if looked > LOOKUPS:  # each is a request to Podman at create (mountlinks.py)
        raise InvalidArgument(f"{WHERE}.mounts: the targets have {looked} distinct directories together, more than "
                              f"{LOOKUPS} (podmand looks each up in the image)")
    tar = rootfs.check_path(cfg[rootfs.KEY], settings) if rootfs.KEY in cfg else ""
    return DriverConfig(tuple(mounts), tuple(devices), bool(caller), tar, asked)


class LibpodMounts(NamedTuple):
    mounts: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    image_volumes: list[dict[str, Any]]


def libpod_mounts(mounts: tuple[Mount, ...], images: dict[str, str]) -> LibpodMounts:
    """The caller's mounts in libpod's SpecGenerator shape. An image mount names the
    image ID provisioning pinned (``images``), else its reference. Podman 4.3 reads
    an image volume's ``ReadWrite`` only by that name (``rw`` is silently ignored). A
    subpath is a named volume's ``SubPath`` (its Go field, untagged) and an image
    volume's ``subPath`` (its JSON tag): pkg/specgen/volumes.go:31 and :58 at v5.4.2."""
    out = LibpodMounts([], [], [])
    for m in mounts:
        mode = "ro" if m.read_only else "rw"
        if m.kind == "bind":
            options = ["rbind", mode, *([m.selinux] if m.selinux else [])]
            out.mounts.append({"destination": m.target, "type": "bind", "source": m.source, "options": options})
        elif m.kind == "tmpfs":
            out.mounts.append({"destination": m.target, "type": "tmpfs", "source": "tmpfs", "options": list(m.options)})
        elif m.kind == "volume":
            volume: dict[str, Any] = {"Name": m.source, "Dest": m.target, "Options": [mode]}
            out.volumes.append({**volume, "SubPath": m.subpath} if m.subpath else volume)
        else:
            source = images.get(m.source, m.source)
            image: dict[str, Any] = {"Source": source, "Destination": m.target, "ReadWrite": not m.read_only}
            out.image_volumes.append({**image, "subPath": m.subpath} if m.subpath else image)
    return out
