"""Per-sandbox host files under the state directory.

Secrets reach the supervisor as single-file bind mounts with Podman's ``U``
option: Podman chowns each file to the container's user, whatever the user
namespace, and the 0400 mode keeps every other uid out.  Directories are 0711
so that a remapped container root can traverse them but not list them.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import shutil
from pathlib import Path

from .. import names
from ..errors import FailedPrecondition
from . import proxy

DIR_MODE = 0o711
LAUNCH = "launch.json"  # the launch bundle, until its pair is made
OOM_KEPT = 4  # containers per sandbox whose first OOM flag is kept (first_oom)
FIXES = {  # what to do when writing the state directory fails with this errno
    errno.EROFS: "remount its filesystem read-write",
    errno.ENOSPC: "free space on its filesystem",
    errno.EDQUOT: "free space or raise the disk quota of the user podmand runs as",
}


class StateDirUnwritable(FailedPrecondition):
    """A write to the state directory failed: not the request's fault, and nothing is left of it."""


def unwritable(state_dir: Path, exc: OSError) -> StateDirUnwritable:
    """The one line that says which directory, what the OS said, and what fixes it."""
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = f"uid {os.geteuid()}"
    fix = FIXES.get(exc.errno or 0, f"make it writable again for {user}, the user podmand runs as")
    where = f" ({exc.filename})" if exc.filename else ""
    return StateDirUnwritable(
        f"state directory {state_dir} is not writable: {exc.strerror or exc}{where}; {fix}, then try again"
    )


def ensure_dir(path: Path) -> Path:
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)
    return path


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write via a temporary file and rename, so readers never see half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.chmod(tmp, mode)
    tmp.replace(path)


class SandboxFiles:
    """``<state>/sandboxes/<id>/``: the launch bundle, TLS copies, the stop marker and the last fence evidence. A failed
    write raises :class:`StateDirUnwritable`, a FAILED_PRECONDITION naming the directory."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "sandboxes"

    def setup(self) -> None:
        ensure_dir(self.root.parent)
        ensure_dir(self.root)

    def dir(self, sandbox_id: str) -> Path:
        """The sandbox's directory; refuses anything but a whole id (last line of
        defence: callers validate ids, and ids read back from Podman labels are
        not trusted here either)."""
        if not names.is_id(sandbox_id):
            raise ValueError(f"not a sandbox id: {sandbox_id[:64]!r}")
        return self.root / sandbox_id

    def write_tls(self, sandbox_id: str, tls: dict[str, Path]) -> None:
        """Copies of the TLS files, each 0400."""
        for name, src in tls.items():
            self.write(sandbox_id, name, src.read_bytes())

    def write_proxy(self, sandbox_id: str, auth: bytes | None, ca_bundle: bytes | None) -> None:
        """The corporate proxy's credential and CA bundle, copied per sandbox and mounted like the TLS files."""
        for name, data in ((proxy.AUTH_FILE, auth), (proxy.CA_FILE, ca_bundle)):
            if data is not None:
                self.write(sandbox_id, name, data)

    def write(self, sandbox_id: str, name: str, data: bytes) -> None:
        """Replace one root-only file (the launch bundle, a TLS or proxy copy) atomically."""
        self._put(sandbox_id, name, data, 0o400)

    def _put(self, sandbox_id: str, name: str, data: bytes, mode: int = 0o600) -> None:
        path = self.dir(sandbox_id)
        try:
            write_atomic(ensure_dir(path) / name, data, mode)
        except OSError as exc:
            raise unwritable(self.root.parent, exc) from None

    def _read(self, sandbox_id: str, name: str) -> str:
        """A small state file's text, or '' when absent (or the id is not one: such a
        sandbox has no files)."""
        try:
            return (self.dir(sandbox_id) / name).read_text()
        except (OSError, ValueError):
            return ""

    def generation(self, sandbox_id: str) -> str:
        return self._read(sandbox_id, "generation").strip()

    def set_generation(self, sandbox_id: str, generation: str) -> None:
        self._put(sandbox_id, "generation", generation.encode())

    def write_launch(self, sandbox_id: str, bundle: bytes) -> None:
        """The launch bundle (its JSON bytes, both tokens), kept 0400 only
        until the pair it launches is made: a restart finishes the create from it."""
        self.write(sandbox_id, LAUNCH, bundle)

    def write_resolver(self, sandbox_id: str) -> None:
        """The workload's /etc/resolv.conf (names.RESOLVER), 0444."""
        self._put(sandbox_id, names.RESOLVER_FILE, names.RESOLVER.encode(), 0o444)

    def launch(self, sandbox_id: str) -> bytes | None:
        try:
            return (self.dir(sandbox_id) / LAUNCH).read_bytes()
        except (OSError, ValueError):
            return None

    def making(self, sandbox_id: str) -> bool:
        """Whether the sandbox's create is unfinished: its launch bundle is still kept."""
        try:
            return (self.dir(sandbox_id) / LAUNCH).exists()
        except ValueError:
            return False

    def drop_launch(self, sandbox_id: str) -> None:
        """The pair holds the bundle now (its supervisor's ``auth.json``): none is kept here."""
        try:
            (self.dir(sandbox_id) / LAUNCH).unlink(missing_ok=True)
        except OSError as exc:
            raise unwritable(self.root.parent, exc) from None

    def remove(self, sandbox_id: str) -> None:
        shutil.rmtree(self.dir(sandbox_id), ignore_errors=True)

    def mark_stopped(self, sandbox_id: str, container_id: str) -> None:
        self._put(sandbox_id, "stopped", container_id.encode())

    def clear_stopped(self, sandbox_id: str) -> None:
        (self.dir(sandbox_id) / "stopped").unlink(missing_ok=True)

    def stopped_container(self, sandbox_id: str) -> str:
        """The container StopSandbox stopped last, or ''."""
        return self._read(sandbox_id, "stopped")

    def mark_created(self, sandbox_id: str, container_id: str) -> None:
        """Provisioning reached a container: a later restart must not recreate it silently."""
        self._put(sandbox_id, "created", container_id.encode())

    def created_container(self, sandbox_id: str) -> str:
        return self._read(sandbox_id, "created")

    def clear_created(self, sandbox_id: str) -> None:
        (self.dir(sandbox_id) / "created").unlink(missing_ok=True)

    def mark_failed(self, sandbox_id: str, reason: str, message: str) -> None:
        """A terminal provisioning failure, reported again (not retried) after a restart."""
        doc = json.dumps({"reason": reason, "message": message}).encode()
        self._put(sandbox_id, "failed", doc)

    def clear_failed(self, sandbox_id: str) -> None:
        (self.dir(sandbox_id) / "failed").unlink(missing_ok=True)

    def failure(self, sandbox_id: str) -> tuple[str, str] | None:
        """(reason, message) of a recorded terminal failure, or None."""
        try:
            doc = json.loads(self._read(sandbox_id, "failed") or "null")
            return str(doc["reason"]), str(doc["message"])
        except (ValueError, KeyError, TypeError):
            return None

    def keep_fence(self, sandbox_id: str, evidence: bytes) -> None:
        """The fence evidence last observed (a serialised DriverFenceEvidence): after a
        restart, the first snapshots, built from a list, carry it before any inspect."""
        self._put(sandbox_id, "fence", evidence)

    def kept_fence(self, sandbox_id: str) -> bytes:
        """What :meth:`keep_fence` kept, or b''."""
        try:
            return (self.dir(sandbox_id) / "fence").read_bytes()
        except (OSError, ValueError):
            return b""

    def first_oom(self, sandbox_id: str, container_id: str, finished_at: str = "") -> str:
        """The ``FinishedAt`` Podman's sticky OOM flag was first seen with on this container
        (snapshots.oom_of_this_run), or "". Given ``finished_at``, it is kept when none is."""
        try:
            doc = json.loads(self._read(sandbox_id, "oom") or "{}")
        except ValueError:
            doc = {}
        kept = {k: v for k, v in doc.items() if isinstance(v, str) and v} if isinstance(doc, dict) else {}
        if container_id in kept or not finished_at:
            return kept.get(container_id, "")
        if not self.dir(sandbox_id).is_dir():  # deleted (or never podmand's): nothing to keep it for
            return finished_at
        # the sandbox's newest containers only: a pair has two, each recreate makes more
        newest = [*kept.items()][-(OOM_KEPT - 1):]
        self._put(sandbox_id, "oom", json.dumps(dict([*newest, (container_id, finished_at)])).encode())
        return finished_at

    def sandbox_ids(self) -> list[str]:
        try:
            return sorted(p.name for p in self.root.iterdir() if p.is_dir() and names.is_id(p.name))
        except FileNotFoundError:
            return []
