"""The runtime binary (``openshell-sandbox``, every workload's entrypoint): extracted
from the runtime image into a host cache, and kept unchanged for every sandbox that
runs it. (The class keeps its older name, from when this binary was the supervisor.)

Image volumes cannot be mounted under ``userns=auto`` (Podman 4.3.1 fails
with EPERM, and overlay cannot be idmapped), so the binary is copied out of a
created-never-started container once per image ID and bind-mounted read-only.

Every workload runs it, as root in its launcher form under rootless Podman
(pair/specs.py), so nothing may change it (issue 30): the cached
file is 0555 in a directory no sandbox maps, its SHA-256 recorded beside it, and
before every create and every start it is checked (a regular file of podmand's,
mode 0555, one link, its content the recorded digest; the content is hashed again
only when the file's stat changed) and extracted again when it is not. A sandbox
whose user namespace maps podmand's own uid (usernamespace.maps_own_uid) owns
that file from inside, so it gets a copy of its own in its state directory, which
it alone can reach, checked and replaced in the same way.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from pathlib import Path

from .. import names
from ..errors import FailedPrecondition
from ..libpod import PodmanClient, PodmanError
from .files import ensure_dir, unwritable, write_atomic
from .imagefiles import SUPERVISOR_LIMIT, TooLarge, read_image_files

MODE = 0o555
CHECKED = 1024  # fingerprints remembered (a path forgotten is hashed again at its next check)
BINARY = "openshell-sandbox"
DIGEST = BINARY + ".sha256"  # beside the binary, never mounted: "<image id> <sha256>"


def _fingerprint(st: os.stat_result) -> tuple[int, ...]:
    """What any write, chmod, chown or replacement of a file changes (ctime cannot be set back)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_uid)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class SupervisorCache:
    def __init__(self, podman: PodmanClient, state_dir: Path) -> None:
        self.podman = podman
        self.root = state_dir / "supervisor"
        self._lock = asyncio.Lock()
        self._checked: dict[Path, tuple[int, ...]] = {}  # path -> fingerprint last found intact, oldest first

    def path_for(self, image_id: str) -> Path:
        return self.root / image_id.replace(":", "-") / BINARY

    async def binary(self, image_id: str, own_dir: Path | None = None) -> Path:
        """Host path of the supervisor binary of ``image_id``, extracted once and checked
        each time; with ``own_dir`` (a sandbox that maps podmand's uid), that sandbox's own
        copy there."""
        shared = self.path_for(image_id)
        return await self._ensure(image_id, shared if own_dir is None else own_dir / BINARY)

    async def _ensure(self, image_id: str, path: Path) -> Path:
        """``path`` holds the intact binary of ``image_id``: the shared one checked (extracted
        again when changed), then ``path``, when another, copied from it when changed."""
        shared = self.path_for(image_id)
        async with self._lock:
            digest = self.intact(shared, image_id)
            if digest is None:
                digest = await self._extract(image_id, shared)
            if path != shared and self.intact(path, image_id) != digest:
                self._write(path, image_id, shared.read_bytes(), digest)
            return path

    def intact(self, path: Path, image_id: str) -> str | None:
        """The recorded digest of ``path`` when it is the unchanged binary of ``image_id``, else None."""
        try:
            st = os.lstat(path)
            recorded = (path.parent / DIGEST).read_text().split()
        except (OSError, UnicodeDecodeError):
            return None
        if len(recorded) != 2 or recorded[0] != image_id:
            return None
        fine = (stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == MODE and st.st_uid == os.geteuid()
                and st.st_nlink == 1 and st.st_size > 0)
        if not fine:
            return None
        if self._checked.get(path) != _fingerprint(st):
            if _sha256(path) != recorded[1]:
                return None
            self._remember(path, _fingerprint(st))
        return recorded[1]

    async def _extract(self, image_id: str, path: Path) -> str:
        try:
            files = await read_image_files(
                self.podman, image_id, [names.SUPERVISOR_IN_IMAGE], str(self.root.parent), limit=SUPERVISOR_LIMIT
            )
        except PodmanError as exc:
            raise FailedPrecondition(
                f"cannot read {names.SUPERVISOR_IN_IMAGE} from the supervisor image {image_id}: {exc.message}"
            ) from exc
        except TooLarge as exc:
            raise FailedPrecondition(f"the supervisor image {image_id}: {exc}") from None
        binary = files[names.SUPERVISOR_IN_IMAGE]
        if not binary:
            raise FailedPrecondition(f"the supervisor image {image_id} has no {names.SUPERVISOR_IN_IMAGE}")
        digest = hashlib.sha256(binary).hexdigest()
        self._write(path, image_id, binary, digest)
        return digest

    def _write(self, path: Path, image_id: str, data: bytes, digest: str) -> None:
        """The binary and its digest, each replaced atomically (a changed file's inode is left
        to whatever still holds it; the next start binds the new one)."""
        try:
            ensure_dir(self.root)
            ensure_dir(path.parent)
            write_atomic(path.parent / DIGEST, f"{image_id} {digest}\n".encode(), 0o444)
            write_atomic(path, data, MODE)
            self._remember(path, _fingerprint(os.lstat(path)))
        except OSError as exc:
            raise unwritable(self.root.parent, exc) from None

    def _remember(self, path: Path, fingerprint: tuple[int, ...]) -> None:
        """Keep ``path``'s intact fingerprint, the oldest dropped past CHECKED (each sandbox
        with a copy of its own adds one: the driver's memory stays bounded)."""
        self._checked.pop(path, None)
        self._checked[path] = fingerprint
        while len(self._checked) > CHECKED:
            del self._checked[next(iter(self._checked))]

    async def check(self, path: str) -> None:
        """Before a start: the binary a container binds at ``path`` (a supervisor cache's or a
        sandbox's copy, of this state directory or of the one a container was made under) is
        made whole again from the image when it changed; FailedPrecondition when it cannot be."""
        where = Path(path)
        image_id = self._image_of(where)
        if image_id is not None and self.intact(where, image_id) is not None:
            return
        if image_id is None or where.name != BINARY or where.parent.parent.name not in ("supervisor", "sandboxes"):
            raise FailedPrecondition(
                f"the supervisor binary {path} changed since podmand extracted it, and podmand cannot tell from "
                "which image; delete the sandbox and create it again"
            )
        await self._ensure(image_id, where)

    def _image_of(self, path: Path) -> str | None:
        """The supervisor image a binary was made from: its digest record, or for a
        supervisor cache its directory's name."""
        try:
            return (path.parent / DIGEST).read_text().split()[0]
        except (OSError, UnicodeDecodeError, IndexError):
            pass
        if path.parent.parent.name == "supervisor":
            return path.parent.name.replace("-", ":", 1)
        return None
