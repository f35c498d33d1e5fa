"""Reading files out of an image without running anything in it.

A container is created from the pinned image ID, never started; files are
copied out through the libpod archive API, and the container is removed.
Used for the supervisor binary and for the image's account files.
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import uuid

from . import names
from .podman import PodmanClient, PodmanError, PodmanUnavailable

READER_PREFIX = "podmand-read-"


def first_file(data: bytes) -> bytes | None:
    """The first regular file of a tar archive, or None."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            if member.isfile():
                extracted = tar.extractfile(member)
                if extracted is not None:
                    return extracted.read()
    return None


async def read_image_files(podman: PodmanClient, image_id: str, paths: list[str]) -> dict[str, bytes | None]:
    """The content of each path in the image (None when absent)."""
    reader = f"{READER_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
    spec = {
        "name": reader,
        "image": image_id,
        "entrypoint": ["/nonexistent"],
        "command": [],
        "labels": {names.OWNER: names.OWNER_VALUE},
    }
    await podman.create_container(spec)
    out: dict[str, bytes | None] = {}
    try:
        for path in paths:
            try:
                out[path] = first_file(await podman.archive(reader, path))
            except PodmanError as exc:
                if exc.status != 404:
                    raise
                out[path] = None
            except tarfile.TarError:
                out[path] = None
    finally:
        with contextlib.suppress(PodmanError, PodmanUnavailable):
            await podman.remove_container(reader, 0)
    return out
