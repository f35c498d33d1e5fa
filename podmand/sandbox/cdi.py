"""GPUs through CDI: the devices the host's CDI spec files declare, and which of them a
sandbox's ``gpu.count`` gets.

Podman resolves a CDI name such as ``nvidia.com/gpu=0`` (sent as a libpod device) from
the spec files in /etc/cdi and /var/run/cdi, so podmand reads the same files to know
what exists: only each spec's ``kind`` and its devices' ``name``. Selection follows
upstream: indexed NVIDIA GPUs in numeric order, else the named ones, round-robin
across creates; ``nvidia.com/gpu=all`` only when asked for explicitly, except where it is
all there is to have (``all_by_default``: WSL2, whose GPU is shared through /dev/dxg and
whose CDI spec declares only ``all``; host/wsl.py). Parsing and selection are pure;
:class:`GpuSelector` reads the files again at each use.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec

from .. import config
from .._proto import compute_driver_pb2 as pb
from ..errors import FailedPrecondition, InvalidArgument

GPU_KIND = "nvidia.com/gpu"
ALL_GPUS = f"{GPU_KIND}=all"
SPEC_SUFFIXES = (".json", ".yaml")  # what the CDI registry loads
MAX_SPEC_BYTES = 1 << 20
MAX_SPEC_FILES = 1024  # per directory
_KIND = r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?/[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?"
_KIND_RE = re.compile(_KIND)
_NAME_RE = re.compile(_NAME)
_QUALIFIED_RE = re.compile(rf"{_KIND}={_NAME}")
WHERE = "sandbox.spec.resource_requirements.gpu"


class SpecError(ValueError):
    """A CDI spec file podmand cannot read (it is skipped and reported)."""


def is_qualified(device: str) -> bool:
    """``<vendor>/<class>=<name>`` with CDI's character rules (ASCII only)."""
    return bool(_QUALIFIED_RE.fullmatch(device))


# ---------------------------------------------------------------- spec files


class _Device(msgspec.Struct):
    name: str = ""


class _Spec(msgspec.Struct):
    kind: str = ""
    devices: list[_Device] = msgspec.field(default_factory=list)


def parse_spec(text: str) -> list[str]:
    """The qualified device names one CDI spec declares (JSON, or the YAML that CDI tools write)."""
    if text.lstrip().startswith("{"):
        try:
            doc = msgspec.json.decode(text, type=_Spec)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            raise SpecError(f"not a CDI spec: {exc}") from None
        kind, names = doc.kind, [d.name for d in doc.devices]
    else:
        kind, names = _yaml_kind_and_names(text)
    if not _KIND_RE.fullmatch(kind):
        raise SpecError(f"kind {kind!r} is not <vendor>/<class>" if kind else "no kind")
    for name in names:
        if not _NAME_RE.fullmatch(name):
            raise SpecError(f"device name {name!r} is not a CDI device name" if name else "a device has no name")
    return [f"{kind}={name}" for name in names]


def _strip_comment(line: str) -> str:
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _scalar(text: str) -> str:
    """A plain or quoted YAML scalar; anything fancier is refused rather than guessed."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            return str(json.loads(text))
        except ValueError:
            raise SpecError(f"bad double-quoted value {text}") from None
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if not text or text[0] in "&*!|>[{'\"%@`" or ": " in text:
        raise SpecError(f"unsupported YAML value {text!r}")
    return text


def _key_value(line: str) -> tuple[str, str]:
    """``key: value`` with a plain or simply quoted key."""
    key = r"[A-Za-z][A-Za-z0-9_-]*"
    match = re.fullmatch(rf"""(?:"({key})"|'({key})'|({key})) *:(?:[ \t](.*))?""", line)
    if not match:
        raise SpecError(f"unsupported YAML line {line.strip()!r}")
    return match.group(1) or match.group(2) or match.group(3), (match.group(4) or "").strip()


def _yaml_kind_and_names(text: str) -> tuple[str, list[str]]:
    """The top-level ``kind`` and the ``name`` of each ``devices`` entry, from block-style YAML.

    Everything else (containerEdits, annotations, ...) is skipped by indentation; what this
    small reader does not understand about those two fields is an error, never a guess."""
    kind, names = "", []
    top = ""  # the top-level key whose block we are in
    item_indent = -1  # the dash column of the devices list
    key_indent = -1  # the column of the current device entry's keys
    started = False
    for raw in text.splitlines():
        line = _strip_comment(raw)
        if not line.strip():
            continue
        body = line.lstrip(" ")
        indent = len(line) - len(body)
        if body.startswith("\t"):
            raise SpecError("tab in indentation")
        if indent == 0 and body in ("---", "..."):
            if started and body == "---":
                raise SpecError("more than one YAML document")
            continue
        started = True
        if indent == 0 and not body.startswith("-"):
            top, value = _key_value(body)
            if top == "kind":
                kind = _scalar(value)
            elif top == "devices" and value not in ("", "[]"):
                raise SpecError("devices must be a block list")
            continue
        if top != "devices":
            continue
        if item_indent < 0 and not (body == "-" or body.startswith("- ")):
            raise SpecError("devices must be a block list")
        if body == "-" or body.startswith("- "):
            if item_indent < 0:
                item_indent = indent
            if indent == item_indent:
                names.append("")
                rest = body[1:].lstrip(" ")
                if not rest:  # a bare dash: the entry's keys start on the next line
                    key_indent = -2
                    continue
                key_indent = indent + len(body) - len(rest)
                body, indent = rest, key_indent
        if key_indent == -2:
            if indent <= item_indent:
                raise SpecError("an empty devices entry")
            key_indent = indent
        if indent == key_indent and names and not body.startswith("-"):
            key, value = _key_value(body)
            if key == "name":
                names[-1] = _scalar(value)
        elif indent <= item_indent or (indent < key_indent and names):
            raise SpecError(f"unexpected indentation at {body!r}")
    return kind, names


@dataclass(frozen=True)
class Inventory:
    """The CDI devices the spec directories declare, and the files that could not be read."""

    devices: tuple[str, ...] = ()  # qualified names, sorted, without repeats
    problems: tuple[str, ...] = ()  # "<file>: <why>"
    files: int = 0

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith(GPU_KIND + "="))


def scan(dirs: Iterable[str]) -> Inventory:
    """Read every ``*.json``/``*.yaml`` spec in ``dirs``; a missing directory is simply empty."""
    devices: set[str] = set()
    problems: list[str] = []
    files = 0
    for directory in dirs:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(f"{directory}: {exc.strerror or exc}")
            continue
        for entry in [e for e in entries if e.name.endswith(SPEC_SUFFIXES)][:MAX_SPEC_FILES]:
            try:
                if not entry.is_file() or entry.stat().st_size > MAX_SPEC_BYTES:
                    raise SpecError(f"not a regular file of at most {MAX_SPEC_BYTES} bytes")
                with open(entry.path, encoding="utf-8") as fh:
                    devices.update(parse_spec(fh.read(MAX_SPEC_BYTES + 1)))
                files += 1
            except (OSError, UnicodeDecodeError, SpecError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                problems.append(f"{entry.path}: {why}")
    return Inventory(tuple(sorted(devices)), tuple(problems), files)


# ---------------------------------------------------------------- selection


def default_family(gpus: Sequence[str], all_by_default: bool = False) -> list[str]:
    """The devices a plain ``gpu.count`` is served from, in round-robin order."""
    suffixes = [g.removeprefix(GPU_KIND + "=") for g in gpus if g.startswith(GPU_KIND + "=")]
    indexed = sorted((s for s in suffixes if s.isdigit()), key=lambda s: (int(s), s))
    named = sorted(s for s in suffixes if not s.isdigit() and s != "all")
    family = indexed or named
    if family:
        return [f"{GPU_KIND}={s}" for s in family]
    if "all" in suffixes and all_by_default:
        return [ALL_GPUS]
    if "all" in suffixes:
        raise FailedPrecondition(
            f"{WHERE}: default GPU request resolved only to {ALL_GPUS}, which is not allowed on this platform; "
            f'set driver_config.cdi_devices to ["{ALL_GPUS}"] explicitly to request all GPUs'
        )
    raise FailedPrecondition(
        f"{WHERE}: no NVIDIA CDI GPU devices were discovered; set driver_config.cdi_devices explicitly"
    )


def selectable(gpus: Sequence[str], all_by_default: bool = False) -> bool:
    """Whether a plain GPU request can be served (the capability bits)."""
    try:
        default_family(gpus, all_by_default)
    except FailedPrecondition:
        return False
    return True


def choose(gpus: Sequence[str], count: int, start: int, all_by_default: bool = False) -> list[str]:
    """``count`` devices of the default family from position ``start`` on, wrapping around."""
    family = default_family(gpus, all_by_default)
    if count > len(family):
        only = "only 1 selectable NVIDIA CDI GPU device is" if len(family) == 1 else (
            f"only {len(family)} selectable NVIDIA CDI GPU devices are"
        )
        raise FailedPrecondition(f"{WHERE}: GPU sandbox requested {count} GPUs, but {only} available")
    return [family[(start + i) % len(family)] for i in range(count)]


@dataclass
class GpuSelector:
    """The round-robin cursor over the current inventory: validation peeks, create takes."""

    dirs: tuple[str, ...]
    all_by_default: bool = False  # the host is WSL2 (host/wsl.py)
    cursor: int = 0

    def inventory(self) -> Inventory:
        return scan(self.dirs)

    def selectable(self) -> bool:
        return selectable(self.inventory().gpus, self.all_by_default)

    def peek(self, count: int) -> list[str]:
        return choose(self.inventory().gpus, count, self.cursor, self.all_by_default)

    def take(self, count: int) -> list[str]:
        devices = self.peek(count)
        self.cursor += count
        return devices


# ---------------------------------------------------------------- requests


def requested_count(gpu: pb.GpuResourceRequirements | None, where: str) -> int | None:
    """GPUs asked for: None without a gpu request, 1 when it has no count; 0 is invalid."""
    if gpu is None:
        return None
    count = gpu.count if gpu.HasField("count") else 1
    if count == 0:
        raise InvalidArgument(f"{where}: must be greater than 0")
    return count


def check_explicit(devices: Sequence[str], count: int | None, where: str) -> None:
    """``driver_config.cdi_devices``: CDI names, used as given, one per requested GPU."""
    for device in devices:
        if not is_qualified(device):
            shown = repr(device) if len(device) <= 128 else f"({len(device)} characters)"
            raise InvalidArgument(f"{where}: must contain CDI qualified names (<vendor>/<class>=<name>), not {shown}")
    if count is None:
        raise InvalidArgument(f"{where}: requires a gpu request")
    if count != len(devices):
        raise InvalidArgument(
            f"{WHERE}.count: gpu count ({count}) must match driver_config.cdi_devices length ({len(devices)})"
        )


def check_settings(settings: config.Settings) -> None:
    for directory in settings.cdi_spec_dirs:
        if not os.path.isabs(directory):
            raise config.invalid("cdi_spec_dirs", f"{directory!r} is not an absolute path")
