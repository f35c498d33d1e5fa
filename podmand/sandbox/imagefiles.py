"""Reading files out of an image without running anything in it.

A container is created from the pinned image ID, never started; files are
copied out through the libpod archive API, and the container is removed.
Used for the supervisor binary and for the image's account files; the same reader
says whether the components of paths are symbolic links in the image (every mount's
destination: mountlinks.py), from the archive endpoint's stat of each, nothing copied.

A reader never outlives its read, however the read ends (the image's refusal, an error,
the caller giving up, podmand's stop): the create runs to its answer even when the read
is cancelled meanwhile (Podman makes the container whether or not anyone still waits,
and a removal sent before the create is done finds nothing to remove), and the removal
that follows is shielded from the caller's cancellation. Shutdown waits for the removals
under way and tries once more those Podman did not answer (:func:`settle`).

A reader removed from under the read (by hand, by another program's cleanup) is
:class:`PodmanUnavailable`, a read to retry, never "the file is absent": taken as absent,
/etc/passwd would refuse the image's USER for good.

The image is the caller's, so its files are too: each is read as it streams,
never past a limit (the tar header's size is checked before its data is read),
and a file over the limit is :class:`TooLarge`, not memory taken from every
other tenant of the driver.
"""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import names
from ..libpod import PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable, path_stat, quote
from . import mountlinks

READER_PREFIX = "podmand-read-"
ACTIVE: set[str] = set()  # names of this process's readers in use
# Readers whose removal Podman did not answer (it was restarting): removed at the next
# chance (:func:`remove_unremoved`, each resync), not left for the next full collection.
UNREMOVED: set[str] = set()
# Removals under way (:func:`dispose`): shutdown waits for them (:func:`settle`).
_DISPOSING: set[asyncio.Task[None]] = set()
# Bytes of one account file (/etc/passwd, /etc/group). Real ones are a few KiB, and a
# directory of tens of thousands of accounts fits in 1 MiB; the supervisor reads them
# whole as well. A bigger one is a hostile image.
ACCOUNT_FILE_LIMIT = 1024 * 1024
# The supervisor binary, from the operator's supervisor image (upstream's is about 30 MB).
SUPERVISOR_LIMIT = 256 * 1024 * 1024
_TAR_SLACK = 64 * 1024  # headers, PAX records, padding and end blocks around the one file
_BLOCK = tarfile.BLOCKSIZE


class TooLarge(Exception):
    """A file of the image is larger than podmand reads."""

    def __init__(self, path: str, limit: int) -> None:
        super().__init__(f"{path} is larger than {limit} bytes")
        self.path = path
        self.limit = limit


def first_file(data: bytes, limit: int | None = None) -> bytes | None:
    """The first regular file of a tar archive, or None; TooLarge past ``limit``."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            if member.isfile():
                if limit is not None and member.size > limit:
                    raise TooLarge(member.name, limit)
                extracted = tar.extractfile(member)
                if extracted is not None:
                    return extracted.read()
    return None


def _declared_size(header: bytes) -> int | None:
    """The size the first tar header gives a regular file, or None when it says no such thing."""
    try:
        info = tarfile.TarInfo.frombuf(header, "utf-8", "surrogateescape")
    except tarfile.TarError:
        return None
    return info.size if info.isfile() else None


async def read_capped(chunks: AsyncIterator[bytes], path: str, limit: int) -> bytes:
    """An archive of one file as it streams: TooLarge as soon as its first header
    declares more than ``limit`` bytes, or the archive grows past the limit and
    its slack (a PAX header first, or a lying size)."""
    buf = bytearray()
    checked = False
    async for chunk in chunks:
        buf += chunk
        if not checked and len(buf) >= _BLOCK:
            checked = True
            size = _declared_size(bytes(buf[:_BLOCK]))
            if size is not None and size > limit:
                raise TooLarge(path, limit)
        if len(buf) > limit + _TAR_SLACK:
            raise TooLarge(path, limit)
    return bytes(buf)


@dataclass(frozen=True)
class ImageRead:
    """What one reader saw of an image."""

    files: dict[str, bytes | None]  # each path asked for: its content, None when absent; {} when not read
    # Each path looked up: mountlinks.LINK, HERE, FILE or ABSENT (only those not known before).
    looked: dict[str, str] = field(default_factory=dict)

    @property
    def link(self) -> bool:
        """Whether a symbolic link was found (then no file was read)."""
        return mountlinks.LINK in self.looked.values()


async def read_image_files(
    podman: PodmanClient, image_id: str, paths: list[str], state_dir: str = "", *, limit: int = ACCOUNT_FILE_LIMIT
) -> dict[str, bytes | None]:
    """The content of each path in the image (None when absent), each at most ``limit``
    bytes (else :class:`TooLarge`): :func:`read_image`'s files."""
    return (await read_image(podman, image_id, paths, state_dir, limit=limit)).files


async def read_image(
    podman: PodmanClient,
    image_id: str,
    paths: list[str],
    state_dir: str = "",
    *,
    limit: int = ACCOUNT_FILE_LIMIT,
    walks: Sequence[str] = (),
    known: Mapping[str, str] | None = None,
) -> ImageRead:
    """The content of each path in the image (None when absent), each at most ``limit``
    bytes (else :class:`TooLarge`), and what each component of ``walks`` is in the image
    (:func:`look`; ``known``: what is known of it already). Once a symbolic link is found
    no file is read (the request is refused for it). The reader is labelled with
    podmand's state directory (and every other label podmand reads, neutral:
    :func:`names.own_labels`) and listed in :data:`ACTIVE` while in use, so that one left
    behind (Podman away at removal, podmand killed) can be told from one in use and
    removed later."""
    reader = f"{READER_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
    spec = {
        "name": reader,
        "image": image_id,
        "entrypoint": ["/nonexistent"],
        "command": [],
        "labels": names.own_labels(state_dir),
        # The image's own files, not the image's VOLUMEs: Podman would make each an anonymous
        # volume (empty until a start copies the image's files in, and not removed with the
        # reader: nothing else would ever remove it).
        "image_volume_mode": "ignore",
    }
    ACTIVE.add(reader)
    created = asyncio.ensure_future(podman.create_container(spec))
    try:
        await asyncio.shield(created)  # cancelled: the create still ends, then the removal follows it
        looked = await look(podman, reader, walks, known or {})
        if mountlinks.LINK in looked.values():
            return ImageRead({}, looked)
        return ImageRead(await _copy_out(podman, reader, paths, limit) if paths else {}, looked)
    finally:
        await dispose(podman, reader, created)


async def look(podman: PodmanClient, container: str, walks: Sequence[str], known: Mapping[str, str]) -> dict[str, str]:
    """What each component of each of ``walks`` is in ``container`` (mountlinks.LINK,
    HERE, FILE or ABSENT), shallowest first, until its walk ends (a link, an absent one,
    a file, the path itself); only those ``known`` does not say, each once. Podman's stat of a path
    follows links in all but its last component: looked at shallowest first, a link is
    found where it is."""
    looked: dict[str, str] = {}
    while todo := mountlinks.to_look(walks, {**known, **looked}):
        for path in todo:
            # HEAD of the archive endpoint: only its stat (an lstat: the last component is not followed)
            resp = await podman.request("HEAD", f"/containers/{quote(container)}/archive", query={"path": path})
            stat = path_stat(resp.status, resp.headers, f"{path!r} in {container}")
            looked[path] = (
                mountlinks.ABSENT if stat is None
                else mountlinks.LINK if stat.symlink
                else mountlinks.HERE if stat.is_dir
                else mountlinks.FILE
            )
    return looked


async def dispose(podman: PodmanClient, name: str, created: asyncio.Future[Any]) -> None:
    """Remove podmand's helper container ``name`` (and take it out of :data:`ACTIVE`) once
    its create, ``created``, has ended, however it ended: a refused or failed create may
    still have made it, and one its caller gave up on is made all the same. Shielded from
    the caller's cancellation: one more leaves the removal running (shutdown waits for it:
    :func:`settle`). A removal Podman does not answer puts the name in :data:`UNREMOVED`.
    Bounded by the client's deadlines of the create and of the removal."""
    removal = asyncio.ensure_future(_remove_after(podman, name, created))
    _DISPOSING.add(removal)
    removal.add_done_callback(_DISPOSING.discard)
    await asyncio.shield(removal)


async def _remove_after(podman: PodmanClient, name: str, created: asyncio.Future[Any]) -> None:
    try:
        await asyncio.wait((created,))
        if not created.cancelled():
            created.exception()  # its failure is the reader's caller's (or moot): retrieved here
        try:
            await podman.remove_container(name, 0)  # False: nothing was made, or it is gone
        except (PodmanError, PodmanUnavailable, PodmanUnreadable):
            UNREMOVED.add(name)
    finally:
        ACTIVE.discard(name)


async def settle(podman: PodmanClient) -> list[str]:
    """At shutdown, once nothing reads any more: wait for the removals under way, then
    remove the readers Podman did not remove before; what was removed."""
    while _DISPOSING:
        await asyncio.wait(set(_DISPOSING))
    return await remove_unremoved(podman)


async def remove_unremoved(podman: PodmanClient) -> list[str]:
    """Remove the readers whose removal failed before (one call each, no list); what
    was removed. Those Podman still does not answer for stay for the next time."""
    removed = []
    for name in sorted(UNREMOVED):
        try:
            await podman.remove_container(name, 0)  # False: gone already; done either way
        except PodmanUnavailable:
            break
        except PodmanError:
            continue
        UNREMOVED.discard(name)
        removed.append(f"container:{name}")
    return removed


async def _copy_out(podman: PodmanClient, reader: str, paths: list[str], limit: int) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for path in paths:
        try:
            async with asyncio.timeout(podman.timeouts.request), podman.archive(reader, path) as chunks:
                data = await read_capped(chunks, path, limit)
            out[path] = first_file(data, limit)
        except TimeoutError:
            raise PodmanUnavailable(f"Podman did not send {path} of the image in time") from None
        except PodmanError as exc:
            if exc.status != 404:
                raise
            if "no such container" in exc.message.lower():  # not the path: the reader itself is gone
                raise PodmanUnavailable(f"podmand's image reader {reader} was removed while it read {path}") from None
            out[path] = None
        except TooLarge as exc:
            raise TooLarge(path, exc.limit) from None  # the image's path, not the tar member's name
        except tarfile.TarError:
            out[path] = None
    return out
