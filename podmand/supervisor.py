"""The supervisor binary, extracted from its image into a host cache.

Image volumes cannot be mounted under ``userns=auto`` (Podman 4.3.1 fails
with EPERM, and overlay cannot be idmapped), so the binary is copied out of a
created-never-started container once per image ID and bind-mounted read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import os
import tarfile
from pathlib import Path

from . import names
from .errors import FailedPrecondition
from .files import ensure_dir, write_atomic
from .podman import PodmanClient, PodmanError, PodmanUnavailable

_seq = itertools.count()


def binary_from_tar(data: bytes) -> bytes:
    """The first regular file of a tar archive."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar:
                if member.isfile():
                    extracted = tar.extractfile(member)
                    if extracted is not None:
                        return extracted.read()
    except tarfile.TarError as exc:
        raise FailedPrecondition(f"failed to extract the supervisor binary from its tar: {exc}") from exc
    raise FailedPrecondition("the supervisor image archive holds no regular file")


class SupervisorCache:
    def __init__(self, podman: PodmanClient, state_dir: Path) -> None:
        self.podman = podman
        self.root = state_dir / "supervisor"
        self._lock = asyncio.Lock()

    def path_for(self, image_id: str) -> Path:
        return self.root / image_id.replace(":", "-") / "openshell-sandbox"

    async def binary(self, image_id: str) -> Path:
        """Host path of the supervisor binary of ``image_id``, extracting it once."""
        path = self.path_for(image_id)
        async with self._lock:
            if path.is_file() and path.stat().st_size > 0:
                return path
            temp = f"podmand-supervisor-extract-{os.getpid()}-{next(_seq)}"
            spec = {
                "name": temp,
                "image": image_id,
                "entrypoint": [names.SUPERVISOR_IN_IMAGE],
                "command": [],
                "labels": {names.OWNER: names.OWNER_VALUE},
            }
            try:
                await self.podman.create_container(spec)
                data = await self.podman.archive(temp, names.SUPERVISOR_IN_IMAGE)
            except PodmanError as exc:
                raise FailedPrecondition(
                    f"cannot read {names.SUPERVISOR_IN_IMAGE} from the supervisor image {image_id}: {exc.message}"
                ) from exc
            finally:
                with contextlib.suppress(PodmanError, PodmanUnavailable):
                    await self.podman.remove_container(temp, 0)
            binary = binary_from_tar(data)
            ensure_dir(self.root)
            ensure_dir(path.parent)
            write_atomic(path, binary, 0o755)
            return path
