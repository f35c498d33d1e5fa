"""Per-sandbox host files under the state directory.

Secrets reach the sandbox as single-file bind mounts with Podman's ``U``
option: Podman chowns each file to the container's root, whatever the user
namespace, and the 0400 mode keeps every other uid out.  Directories are 0711
so that a remapped container root can traverse them but not list them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .. import names
from . import proxy

DIR_MODE = 0o711


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
    """``<state>/sandboxes/<id>/``: token, TLS copies and the stop marker."""

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

    def write_secrets(self, sandbox_id: str, token: str, tls: dict[str, Path]) -> None:
        """Write the token (``<jwt>\\n``) and copies of the TLS files, each 0400."""
        if token:
            self.write(sandbox_id, "sandbox.jwt", token.strip().encode() + b"\n")
        for name, src in tls.items():
            self.write(sandbox_id, name, src.read_bytes())

    def write_proxy(self, sandbox_id: str, auth: bytes | None, ca_bundle: bytes | None) -> None:
        """The corporate proxy's credential and CA bundle, copied per sandbox and mounted like the token."""
        for name, data in ((proxy.AUTH_FILE, auth), (proxy.CA_FILE, ca_bundle)):
            if data is not None:
                self.write(sandbox_id, name, data)

    def write(self, sandbox_id: str, name: str, data: bytes) -> None:
        """Replace one root-only file (launch bundle, driver credential) atomically."""
        write_atomic(ensure_dir(self.dir(sandbox_id)) / name, data, 0o400)

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
        write_atomic(ensure_dir(self.dir(sandbox_id)) / "generation", generation.encode(), 0o600)

    def has_token(self, sandbox_id: str) -> bool:
        return names.is_id(sandbox_id) and (self.dir(sandbox_id) / "sandbox.jwt").exists()

    def remove(self, sandbox_id: str) -> None:
        shutil.rmtree(self.dir(sandbox_id), ignore_errors=True)

    def mark_stopped(self, sandbox_id: str, container_id: str) -> None:
        d = ensure_dir(self.dir(sandbox_id))
        write_atomic(d / "stopped", container_id.encode(), 0o600)

    def clear_stopped(self, sandbox_id: str) -> None:
        (self.dir(sandbox_id) / "stopped").unlink(missing_ok=True)

    def stopped_container(self, sandbox_id: str) -> str:
        """The container StopSandbox stopped last, or ''."""
        return self._read(sandbox_id, "stopped")

    def mark_created(self, sandbox_id: str, container_id: str) -> None:
        """Provisioning reached a container: a later restart must not recreate it silently."""
        write_atomic(ensure_dir(self.dir(sandbox_id)) / "created", container_id.encode(), 0o600)

    def created_container(self, sandbox_id: str) -> str:
        return self._read(sandbox_id, "created")

    def clear_created(self, sandbox_id: str) -> None:
        (self.dir(sandbox_id) / "created").unlink(missing_ok=True)

    def mark_failed(self, sandbox_id: str, reason: str, message: str) -> None:
        """A terminal provisioning failure, reported again (not retried) after a restart."""
        doc = json.dumps({"reason": reason, "message": message}).encode()
        write_atomic(ensure_dir(self.dir(sandbox_id)) / "failed", doc, 0o600)

    def clear_failed(self, sandbox_id: str) -> None:
        (self.dir(sandbox_id) / "failed").unlink(missing_ok=True)

    def failure(self, sandbox_id: str) -> tuple[str, str] | None:
        """(reason, message) of a recorded terminal failure, or None."""
        try:
            doc = json.loads(self._read(sandbox_id, "failed") or "null")
            return str(doc["reason"]), str(doc["message"])
        except (ValueError, KeyError, TypeError):
            return None

    def sandbox_ids(self) -> list[str]:
        try:
            return sorted(p.name for p in self.root.iterdir() if p.is_dir() and names.is_id(p.name))
        except FileNotFoundError:
            return []
