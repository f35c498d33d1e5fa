"""The supervisor binary, extracted from its image into a host cache.

Image volumes cannot be mounted under ``userns=auto`` (Podman 4.3.1 fails
with EPERM, and overlay cannot be idmapped), so the binary is copied out of a
created-never-started container once per image ID and bind-mounted read-only.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from .. import names
from ..errors import FailedPrecondition
from ..libpod import PodmanClient, PodmanError
from .files import ensure_dir, write_atomic
from .imagefiles import SUPERVISOR_LIMIT, TooLarge, read_image_files


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
            ensure_dir(self.root)
            ensure_dir(path.parent)
            write_atomic(path, binary, 0o755)
            return path
