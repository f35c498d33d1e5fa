"""Checks of single fields of a sandbox request: free text, environment, labels
and the supervisor's SSH socket path. Each error names the field (``where``)."""

from __future__ import annotations

import posixpath
import re
from typing import Any

from . import names
from .errors import DriverError, InvalidArgument

# Patterns are used with fullmatch: "$" alone would let "abc\n" through.
_ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SOCKET_RE = re.compile(r"/[A-Za-z0-9._/-]+")
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


def check_text(where: str, value: str, *, allow_empty: bool = True) -> None:
    if not value and not allow_empty:
        raise InvalidArgument(f"{where}: is required")
    if _CONTROL.search(value):
        raise InvalidArgument(f"{where}: must not contain control characters")


def shown(value: str) -> str:
    """A caller's value for an error message, without echoing megabytes."""
    return repr(value) if len(value) <= names.MAX_ID else f"({len(value)} characters)"


def env_vars(where: str, env: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in env.items():
        if len(key) > MAX_ENV_KEY or not _ENV_KEY_RE.fullmatch(key):
            raise InvalidArgument(f"{where}: key {shown(key)} is not a valid environment variable name")
        if "\x00" in value:
            raise InvalidArgument(f"{where}[{key}]: value must not contain NUL")
        out[key] = value
    return out


def bounded_labels(where: str, labels: Any) -> dict[str, str]:
    """Template labels, bounded: every Podman event of the container repeats them,
    and one oversized event must not outgrow what a watch stream can read."""
    out: dict[str, str] = {}
    total = 0
    for key, value in labels.items():
        if not key or "=" in key or _CONTROL.search(key) or _CONTROL.search(value):
            raise InvalidArgument(f"{where}: invalid label {shown(key)}")
        size_key, size_value = len(key.encode()), len(value.encode())
        if size_key > MAX_LABEL_KEY:
            raise InvalidArgument(f"{where}: label key {shown(key)} is longer than {MAX_LABEL_KEY} bytes")
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
