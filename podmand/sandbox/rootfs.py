"""Rootfs tar sources: a flat root filesystem the gateway stages for podmand.

The gateway writes the tar into a slot (a ``req-<uuid>`` directory) under the
staging directory podmand advertises, and names it in the sandbox's
``driver_config.rootfs_tar_path``. podmand imports it through libpod, pins the
image ID, runs the sandbox from it as from a pulled image, and deletes the slot
whatever happens: imported, failed, or refused. ``ValidateSandboxCreate`` only
looks: the gateway sends the same path again with the create.

Only the gateway's own shape is taken, ``<staging dir>/req-<uuid>/<file>``: the
path is a tenant's request, and a refused create deletes what it names, so it
must not name anything but one file in one slot. :func:`check_path` is pure
(shape, and containment before symlinks); :func:`open_staged` opens the file and
checks the open descriptor (where it really is, a regular file, the size limit),
so what is checked is what is imported; :func:`remove_slot` unlinks that one file
and removes its slot if it is then empty, never following a symlink.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import posixpath
import re
import stat
from pathlib import Path
from typing import BinaryIO, NamedTuple

from ..config import Settings, invalid
from ..errors import FailedPrecondition, InvalidArgument
from ..libpod import PodmanClient

log = logging.getLogger("podmand.sandbox.rootfs")

KEY = "rootfs_tar_path"
SETTING_DIR = "rootfs_staging_dir"
WHERE = f"sandbox.spec.template.driver_config.{KEY}"
REPOSITORY = "localhost/podmand-rootfs"  # tagged with the sandbox id: one image per sandbox
STAGING_DIR = "rootfs-staging"  # under the state directory, unless rootfs_staging_dir says otherwise
MAX_PATH = 4096
MAX_NAME = 255  # bytes in one path component (NAME_MAX)
# The gateway's slot (upstream OpenShell, crates/openshell-server/src/compute/rootfs_tar.rs):
# "req-" and a fresh UUID v4 as Rust's uuid crate prints it (lowercase, hyphenated),
# holding one file whose name the gateway took from the client (at most 128 bytes, no
# path separator or backslash, not starting with "."; the gateway keeps a dot file of
# its own in the slot while the driver request runs, which a path must never name).
SLOT_PREFIX = "req-"
_SLOT_RE = re.compile(r"req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MAX_FILE_NAME = 128
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_settings(s: Settings) -> None:
    path = s.rootfs_staging_dir
    if path and (not posixpath.isabs(path) or _CONTROL.search(path)):
        raise invalid(SETTING_DIR, "must be an absolute path")


def enabled(s: Settings) -> bool:
    """Whether rootfs tars are accepted (and advertised): a limit, and a staging
    directory resolved at start (:func:`prepare_staging`)."""
    return s.rootfs_max_bytes > 0 and bool(s.rootfs_staging_dir)


def prepare_staging(s: Settings, state_dir: Path) -> None:
    """Resolve ``rootfs_staging_dir`` to the absolute real path advertised to the
    gateway, creating it 0700 when missing. The gateway writes slots into it, so it
    runs as podmand's user (rootless: the same user), or the operator gives a
    directory both may write; an existing directory's mode is left as it is."""
    if s.rootfs_max_bytes <= 0:
        s.rootfs_staging_dir = ""
        return
    path = Path(s.rootfs_staging_dir or state_dir / STAGING_DIR).absolute()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        real = path.resolve(strict=True)
        st = real.stat()
    except OSError as exc:
        raise invalid(SETTING_DIR, f"cannot create {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise invalid(SETTING_DIR, f"{path} is not a directory")
    if not os.access(real, os.W_OK | os.X_OK):
        raise invalid(SETTING_DIR, f"{path} is not writable by uid {os.geteuid()} (podmand deletes staged tars)")
    if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
        log.warning("rootfs staging directory %s is world-writable: any local user could stage or swap tars", real)
    _check_apart(s, state_dir, real)
    s.rootfs_staging_dir = str(real)


def _check_apart(s: Settings, state_dir: Path, staging: Path) -> None:
    """Refuse a staging directory that is, holds, or lies in podmand's state directory
    or its socket's directory: the gateway names paths in it, so it could name
    podmand's own files (tokens, keys). The default ``<state>/rootfs-staging`` is
    podmand's own, used for nothing else: it may lie in them."""
    state = state_dir.resolve()
    sock = s.socket
    dedicated = staging == state / STAGING_DIR
    for own in (state, Path(os.path.realpath(posixpath.dirname(sock)))):
        if staging == own or staging in own.parents or (own in staging.parents and not dedicated):
            raise invalid(SETTING_DIR, f"{staging} overlaps podmand's own {own}; choose a directory apart from it")


def check_path(value: object, s: Settings) -> str:
    """``value`` as a file directly in a gateway slot, ``<staging dir>/req-<uuid>/<file>``,
    before symlinks are looked at (INVALID_ARGUMENT naming the field), or
    FAILED_PRECONDITION when this podmand takes no rootfs tars."""
    if not enabled(s):
        raise FailedPrecondition(
            f"{WHERE}: rootfs tar sources are not supported here (rootfs_max_bytes is 0: "
            "--rootfs-max-bytes / PODMAND_ROOTFS_MAX_BYTES)"
        )
    if not isinstance(value, str) or not value.startswith("/") or _CONTROL.search(value) or len(value) > MAX_PATH:
        raise InvalidArgument(f"{WHERE}: must be an absolute path of at most {MAX_PATH} characters")
    parts = value.split("/")[1:]
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidArgument(f"{WHERE}: must be normalised (no empty, '.' or '..' segments, no trailing '/')")
    if any(len(p.encode("utf-8", "surrogateescape")) > MAX_NAME for p in parts):
        raise InvalidArgument(f"{WHERE}: each path component must be at most {MAX_NAME} bytes")
    root = s.rootfs_staging_dir.rstrip("/")
    if not value.startswith(root + "/"):
        raise InvalidArgument(f"{WHERE}: must be inside the rootfs staging directory {s.rootfs_staging_dir}")
    inner = value[len(root) + 1 :].split("/")
    if len(inner) != 2 or not _SLOT_RE.fullmatch(inner[0]):
        raise InvalidArgument(
            f"{WHERE}: must name a file directly in a slot the gateway staged, "
            f"{root}/{SLOT_PREFIX}<uuid>/<file> (a lowercase UUID, one file name)"
        )
    name = inner[1]
    if name.startswith(".") or "\\" in name or len(name.encode("utf-8", "surrogateescape")) > MAX_FILE_NAME:
        raise InvalidArgument(
            f"{WHERE}: the file name in the slot must be at most {MAX_FILE_NAME} bytes, "
            "without a backslash, not starting with '.'"
        )
    return value


def slot(path: str, s: Settings) -> Path | None:
    """The slot directory holding ``path`` when :func:`check_path` takes it, else
    None: a path of any other shape names no slot, and nothing of it is touched."""
    try:
        check_path(path, s)
    except (InvalidArgument, FailedPrecondition):
        return None
    return Path(path).parent


def remove_slot(path: str, s: Settings) -> bool:
    """Delete the staged tar ``path`` names and then its slot, when :func:`check_path`
    takes ``path`` (a refused path is never touched); True when the file was removed.

    The file is unlinked (a symlink goes, never what it points at) through the slot
    directory opened without following a symlink, and the slot is removed with
    rmdir: only when nothing else is left in it (the gateway deletes a slot it still
    keeps something in). A slot that is no directory is left as it is."""
    found = slot(path, s)
    if found is None:
        return False
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        root_fd = os.open(s.rootfs_staging_dir, flags)
    except OSError as exc:
        log.warning("could not open the rootfs staging directory %s: %s", s.rootfs_staging_dir, exc.strerror)
        return False
    try:
        try:
            slot_fd = os.open(found.name, flags | os.O_NOFOLLOW, dir_fd=root_fd)
        except FileNotFoundError:
            return False  # gone already
        except OSError as exc:  # ELOOP, ENOTDIR: a symlink or a file where the slot should be
            log.warning("rootfs staging slot %s is not a directory (%s): left as it is", found, exc.strerror)
            return False
        try:
            os.unlink(Path(path).name, dir_fd=slot_fd)
        except FileNotFoundError:
            removed = False
        except OSError as exc:  # EISDIR (a directory in place of the tar), EPERM, ...
            log.warning("could not remove staged rootfs tar %s: %s", path, exc.strerror)
            return False
        else:
            removed = True
            log.info("removed staged rootfs tar %s", path)
        finally:
            os.close(slot_fd)
        try:
            os.rmdir(found.name, dir_fd=root_fd)
        except FileNotFoundError:
            pass
        except OSError as exc:  # ENOTEMPTY: the gateway's, or another file, still in it
            log.info("kept rootfs staging slot %s: %s", found, exc.strerror)
        else:
            log.info("removed rootfs staging slot %s", found)
        return removed
    finally:
        os.close(root_fd)


class Staged(NamedTuple):
    file: BinaryIO
    size: int


def open_staged(path: str, s: Settings) -> Staged:
    """Open the staged tar after checking it: inside the staging directory once
    symlinks are resolved, the last component no symlink, a regular file, not
    empty, at most ``rootfs_max_bytes``. The caller closes the file."""
    check_path(path, s)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        why = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened: {exc.strerror}"
        raise InvalidArgument(f"{WHERE}: {path} {why}") from None
    try:
        # Where the open descriptor really is: a directory swapped for a symlink after
        # any check by path would still be followed by the open itself.
        if not os.readlink(f"/proc/self/fd/{fd}").startswith(s.rootfs_staging_dir.rstrip("/") + "/"):
            raise InvalidArgument(f"{WHERE}: resolves outside the rootfs staging directory {s.rootfs_staging_dir}")
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidArgument(f"{WHERE}: {path} is not a regular file")
        if st.st_size == 0:
            raise InvalidArgument(f"{WHERE}: {path} is empty")
        if st.st_size > s.rootfs_max_bytes:
            raise InvalidArgument(
                f"{WHERE}: {path} is {st.st_size} bytes, more than rootfs_max_bytes ({s.rootfs_max_bytes})"
            )
        os.set_blocking(fd, True)
        file = os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise
    return Staged(file, st.st_size)


def check_staged(path: str, s: Settings) -> None:
    """:func:`open_staged`, for validation only."""
    staged = open_staged(path, s)
    with contextlib.closing(staged.file):
        pass


async def import_staged(podman: PodmanClient, path: str, s: Settings, ref: str) -> str:
    """Check and import the staged tar as ``ref``; the image ID. InvalidArgument when
    the file fails its checks, PodmanError when Podman refuses it."""
    staged = open_staged(path, s)
    with contextlib.closing(staged.file):
        inactivity = s.pull_inactivity_timeout or None
        return await podman.import_image(staged.file, staged.size, ref, inactivity)


def reference(sandbox_id: str) -> str:
    """The local name of a sandbox's imported rootfs (ids are valid tags: names.ID_RE)."""
    return f"{REPOSITORY}:{sandbox_id}"


def sandbox_of(tag: str) -> str | None:
    """The sandbox id of an image name podmand gave an imported rootfs."""
    repo, sep, sandbox_id = tag.rpartition(":")
    return sandbox_id if sep and repo == REPOSITORY and sandbox_id else None
