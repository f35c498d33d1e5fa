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
from .libpod import PodmanClient, PodmanError, PodmanUnavailable

READER_PREFIX = "podmand-read-"
ACTIVE: set[str] = set()  # names of this process's readers in use


def first_file(data: bytes) -> bytes | None:
    """The first regular file of a tar archive, or None."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            if member.isfile():
                extracted = tar.extractfile(member)
                if extracted is not None:
                    return extracted.read()
    return None


async def read_image_files(
    podman: PodmanClient, image_id: str, paths: list[str], state_dir: str = ""
) -> dict[str, bytes | None]:
    """The content of each path in the image (None when absent).  The reader is
    labelled with podmand's state directory and listed in :data:`ACTIVE` while in
    use, so that one left behind (Podman away at removal, podmand killed) can be
    told from one in use and removed later."""
    reader = f"{READER_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
    spec = {
        "name": reader,
        "image": image_id,
        "entrypoint": ["/nonexistent"],
        "command": [],
        "labels": names.own_labels(state_dir),
    }
    ACTIVE.add(reader)
    try:
        await podman.create_container(spec)
        try:
            return await _copy_out(podman, reader, paths)
        finally:
            with contextlib.suppress(PodmanError, PodmanUnavailable):
                await podman.remove_container(reader, 0)
    finally:
        ACTIVE.discard(reader)


async def _copy_out(podman: PodmanClient, reader: str, paths: list[str]) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for path in paths:
        try:
            out[path] = first_file(await podman.archive(reader, path))
        except PodmanError as exc:
            if exc.status != 404:
                raise
            out[path] = None
        except tarfile.TarError:
            out[path] = None
    return out
