"""Checks of single fields of a sandbox request: free text, environment, command,
labels, the supervisor's SSH socket path, and the size of the request as recorded.
Each error names the field (``where``) and never echoes a value (values may be
secrets): keys through :func:`shown`, and sizes."""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterator, Sequence
from typing import Any

from google.protobuf.message import Message

from .. import names
from ..errors import DriverError, InvalidArgument

# Patterns are used with fullmatch: "$" alone would let "abc\n" through.
_ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SOCKET_RE = re.compile(r"/[A-Za-z0-9._/-]+")
MAX_ENV_KEY = 256
MAX_LABEL_KEY = 253
MAX_LABEL_VALUE = 4096
MAX_LABELS_TOTAL = 64 * 1024  # bytes of all template labels: they travel in every Podman event
MAX_SOCKET_PATH = 107  # bytes; sun_path holds 108 with the NUL

# What a sandbox's processes start with. The supervisor, the container's first process,
# is exec'd with each caller variable as KEY=VALUE, all of them again as one JSON string
# (OPENSHELL_USER_ENVIRONMENT) and the command as another (OPENSHELL_MAIN_PROCESS_SPEC); it
# then execs the command with the variables. Linux takes at most MAX_ARG_STRLEN bytes
# per string (its NUL included) and ARG_MAX for all strings of one execve (a quarter of
# the stack limit: 2 MiB with the usual 8 MiB): a request past them would be accepted
# only for the container's start to fail with E2BIG ("exec openshell-sandbox: argument
# list too long"). The JSON copies are what bind: the totals leave about a quarter of
# one execve string for the escapes JSON adds, and the copies are checked as well.
MAX_ARG_STRLEN = 128 * 1024
MAX_ENCODED = MAX_ARG_STRLEN - 1024  # one of those JSON strings: room for its name and the document around it
MAX_ENV_VALUE = 32 * 1024  # bytes of one value: a PEM chain, a kubeconfig or a JSON document fits
MAX_ENV_TOTAL = 96 * 1024  # bytes of keys and values, template.environment and spec.environment together
MAX_COMMAND_ARGS = 1024  # arguments of spec.command
MAX_COMMAND_ARG = 32 * 1024  # bytes of one argument: an inline script (sh -c, python -c) fits
MAX_COMMAND_TOTAL = 96 * 1024  # bytes of all arguments
# The create request as recorded (secrets left out, base64 in one label of the sandbox's
# volume): Podman keeps it in its database and returns it with every volume list and
# inspect (podmand lists its volumes at start and at every garbage collection). Every
# field at its own bound at once is ~350 KiB encoded; this leaves room for the rest
# (driver_config, resources, ids), and bounds what podmand itself never bounds field
# by field (template.platform_config, spec.policy, many tiny entries).
MAX_RECORD = 512 * 1024

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
        "/run/netns",
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


def _kib(limit: int) -> str:
    return f"{limit // 1024} KiB"


def _encoded(value: object) -> int:
    """Bytes of ``value`` as JSON the way sandboxenv hands it to the supervisor
    (compact, ASCII with escapes)."""
    return len(json.dumps(value, separators=(",", ":")))


def env_vars(where: str, env: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in env.items():
        if len(key) > MAX_ENV_KEY or not _ENV_KEY_RE.fullmatch(key):
            raise InvalidArgument(f"{where}: key {shown(key)} is not a valid environment variable name")
        if "\x00" in value:
            raise InvalidArgument(f"{where}[{key}]: value must not contain NUL")
        size = len(value.encode())
        if size > MAX_ENV_VALUE:
            raise InvalidArgument(f"{where}[{key}]: value is {size} bytes, more than {_kib(MAX_ENV_VALUE)}")
        out[key] = value
    return out


def environment(*maps: tuple[str, Any]) -> dict[str, str]:
    """The caller's environment, ``(where, map)`` in order (a later map wins a key both
    set), each checked by :func:`env_vars` and bounded together: the record holds every
    map, the supervisor gets them merged, and then once more as one JSON string."""
    merged: dict[str, str] = {}
    total = 0
    for where, env in maps:
        checked = env_vars(where, env)
        total += sum(len(k) + len(v.encode()) for k, v in checked.items())  # keys are ASCII
        merged.update(checked)
    fields = " + ".join(where for where, _ in maps)
    if total > MAX_ENV_TOTAL:
        raise InvalidArgument(f"{fields}: {total} bytes of keys and values together, more than {_kib(MAX_ENV_TOTAL)}")
    encoded = _encoded(merged)
    if encoded > MAX_ENCODED:
        raise InvalidArgument(
            f"{fields}: {encoded} bytes once encoded as JSON for {names.ENV_USER_ENV} (escapes included), "
            f"more than {MAX_ENCODED}: it must fit in one execve string"
        )
    return merged


def command(where: str, args: Sequence[str]) -> list[str]:
    """The main process's argv, bounded: each argument, how many, and all of them
    (they reach the supervisor as one JSON string, and the workload's execve)."""
    if len(args) > MAX_COMMAND_ARGS:
        raise InvalidArgument(f"{where}: {len(args)} arguments, more than {MAX_COMMAND_ARGS}")
    total = 0
    for i, arg in enumerate(args):
        if "\x00" in arg:
            raise InvalidArgument(f"{where}[{i}]: must not contain NUL")
        size = len(arg.encode())
        if size > MAX_COMMAND_ARG:
            raise InvalidArgument(f"{where}[{i}]: {size} bytes, more than {_kib(MAX_COMMAND_ARG)}")
        total += size
    if total > MAX_COMMAND_TOTAL:
        raise InvalidArgument(f"{where}: {total} bytes of arguments, more than {_kib(MAX_COMMAND_TOTAL)}")
    out = list(args)
    encoded = _encoded(out)
    if encoded > MAX_ENCODED:
        raise InvalidArgument(
            f"{where}: {encoded} bytes once encoded as JSON for {names.ENV_MAIN_PROCESS} (escapes included), "
            f"more than {MAX_ENCODED}: it must fit in one execve string"
        )
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


def check_record(where: str, message: Message, encoded: int) -> None:
    """``message`` (the request as recorded) takes ``encoded`` bytes once encoded: at most
    :data:`MAX_RECORD`, or INVALID_ARGUMENT naming its biggest part (by size alone)."""
    if encoded <= MAX_RECORD:
        return
    size, part = max(_parts(where, message), default=(0, where))
    raise InvalidArgument(
        f"{where}: {encoded} bytes as podmand records the request (secrets left out, base64), "
        f"more than {_kib(MAX_RECORD)}; its biggest part is {part} ({size} bytes)"
    )


def _parts(where: str, message: Message) -> Iterator[tuple[int, str]]:
    """(encoded size, field path) of each field set in ``message``, going into the
    singular messages of its own .proto file (sandbox, spec, template, ...); others
    (maps, lists, Struct, the policy) count whole."""
    fields = [fd for fd, _ in message.ListFields()]
    for fd in fields:
        path = f"{where}.{fd.name}"
        nested = fd.message_type
        if nested is not None and not fd.is_repeated and nested.file is message.DESCRIPTOR.file:
            yield from _parts(path, getattr(message, fd.name))
            continue
        alone = type(message)()
        alone.CopyFrom(message)
        for other in fields:
            if other is not fd:
                alone.ClearField(other.name)
        yield alone.ByteSize(), path


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
