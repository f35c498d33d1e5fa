"""podmand.sandbox.imagefiles: an image's files are read as they stream, never past a limit, and
the reader container never outlives the read (against the fake libpod's in-memory door, whose
handlers play Podman making or removing a container however the client goes away)."""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import AsyncIterator

import pytest

from podmand.driver.validation import PATH_COST, Facts, ImageFacts
from podmand.libpod import PodmanError, PodmanUnavailable
from podmand.sandbox import imagefiles, mountlinks
from podmand.sandbox.imagefiles import TooLarge, first_file, read_capped
from tests.fakes.harness import HeldCreate, libpod
from tests.fakes.libpod import Reply, Request

DEADLINE = 10.0


def tar_of(name: str, data: bytes, *, pax: bool = False) -> bytes:
    out = io.BytesIO()
    fmt = tarfile.PAX_FORMAT if pax else tarfile.GNU_FORMAT
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        if pax:
            info.pax_headers = {"comment": "x" * 600}  # a PAX header block comes first
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Chunks:
    """An archive as Podman streams it, counting what the reader pulled."""

    def __init__(self, data: bytes, size: int = 4096) -> None:
        self.pieces = [data[i : i + size] for i in range(0, len(data), size)]
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:  # type: ignore[misc]
        for piece in self.pieces:
            self.pulled += 1
            yield piece


def read(chunks: Chunks, limit: int) -> bytes:
    return asyncio.run(read_capped(chunks.__aiter__(), "/etc/passwd", limit))


def test_a_file_within_the_limit_is_read_whole() -> None:
    body = b"root:x:0:0::/root:/bin/sh\n" * 100
    data = read(Chunks(tar_of("passwd", body)), limit=len(body))
    assert first_file(data, len(body)) == body


def test_an_oversized_file_is_refused_at_its_header_before_its_data_is_read() -> None:
    chunks = Chunks(tar_of("passwd", b"a" * (4 * 1024 * 1024)))
    with pytest.raises(TooLarge) as exc:
        read(chunks, limit=1024 * 1024)
    assert exc.value.path == "/etc/passwd" and exc.value.limit == 1024 * 1024
    assert chunks.pulled == 1 and len(chunks.pieces) > 1000  # one chunk: the header's


def test_an_archive_that_outgrows_the_limit_is_cut_off_whatever_its_headers_say() -> None:
    chunks = Chunks(tar_of("passwd", b"a" * (2 * 1024 * 1024), pax=True))  # size in a PAX block first
    with pytest.raises(TooLarge):
        read(chunks, limit=1024 * 1024)
    assert chunks.pulled < len(chunks.pieces)


def test_first_file_checks_the_size_again() -> None:
    with pytest.raises(TooLarge):
        first_file(tar_of("passwd", b"a" * 100), limit=99)
    assert first_file(tar_of("passwd", b"a" * 100), limit=100) == b"a" * 100


def test_the_image_cache_is_bounded_in_images_and_in_size() -> None:
    cache = Facts(images=3, size=100)
    for i in range(5):
        cache.put(f"img{i}", ImageFacts(("p" * 10, "g" * 10), {}))
    assert len(cache) == 3 and cache.get("img0") is None and cache.get("img4") is not None
    cache.get("img2")  # used: kept over img3
    cache.put("big", ImageFacts(("p" * 50, "g" * 20), {}))
    assert cache.kept_size <= 100 and cache.get("img2") is not None and cache.get("img3") is None
    huge = ImageFacts(("p" * 200, ""), {})
    assert cache.put("huge", huge) == huge and cache.get("huge") is None  # used, never kept
    assert cache.kept_size <= 100


def test_the_paths_looked_up_count_and_only_the_latest_are_kept_per_image() -> None:
    """The caller's mount targets differ per request: each path kept counts its characters
    and PATH_COST, at most ``paths`` of them per image (the latest); the caller of put gets
    them all back, for the request in hand."""
    assert ImageFacts(("pp", "g"), {"/a": mountlinks.HERE, "/a/b": mountlinks.LINK}).size == 3 + 2 + 4 + 2 * PATH_COST
    cache = Facts(images=8, size=10 * 1024, paths=3)
    looked = {f"/p{i}": mountlinks.ABSENT for i in range(5)}
    given = cache.put("img", ImageFacts(None, looked))
    assert given.paths == looked
    kept = cache.get("img")
    assert kept is not None and list(kept.paths) == ["/p2", "/p3", "/p4"]
    assert cache.kept_size == kept.size == 3 * (3 + PATH_COST)
    many = {f"/q{i}": mountlinks.HERE for i in range(3)}
    cache.put("other", ImageFacts(None, many))
    small = Facts(images=8, size=4 * (3 + PATH_COST), paths=3)
    small.put("a", ImageFacts(None, dict(list(looked.items())[:3])))
    small.put("b", ImageFacts(None, many))  # 6 paths over a size of 4: the least recent image goes
    assert small.get("a") is None and small.get("b") is not None
# ---------------------------------------------------------------- the reader never outlives the read


def test_a_read_given_up_while_podman_makes_its_reader_removes_the_reader_once_made() -> None:
    """Issue 30, item 7: the read is cancelled (podmand stopping) while the create is in
    flight. Podman makes the container whether or not anyone still waits, and a removal sent
    before the create is done finds nothing: the create is let finish, then the reader is
    removed by name. (Before: the create's request was cancelled, and no removal was sent.)"""
    seen: list[str] = []

    async def main() -> None:
        async with libpod() as (fake, client):
            held = HeldCreate(fake, "reader")
            read = asyncio.ensure_future(imagefiles.read_image_files(client, "sha256:img", ["/etc/passwd"], "/s"))
            await asyncio.wait_for(held.arrived.wait(), DEADLINE)
            read.cancel()
            held.release.set()
            with pytest.raises(asyncio.CancelledError):
                await read
            assert not any("/archive" in call for call in fake.calls())  # nothing read once given up
            seen.extend(held.seen)

    asyncio.run(asyncio.wait_for(main(), DEADLINE))
    [made, removed] = seen
    assert made.startswith(f"made {imagefiles.READER_PREFIX}") and removed == made.replace("made", "removed")
    assert not imagefiles.ACTIVE and not imagefiles.UNREMOVED


def test_a_cancelled_removal_goes_on_and_shutdown_waits_for_it() -> None:
    """Cancelled while the reader is being removed (and cancelled again: the caller's deadline),
    the removal is not cut short: it goes on, and :func:`imagefiles.settle` (shutdown) waits
    for it. (Before: the removal's request was cancelled with the read.)"""
    removed: list[str] = []

    async def main() -> None:
        async with libpod() as (fake, client):
            arrived, release = asyncio.Event(), asyncio.Event()

            async def remove(req: Request) -> Reply:
                arrived.set()
                await release.wait()
                removed.append(req.path.rsplit("/", 1)[-1])
                return 200, {}, [{"Id": "reader"}]

            fake.route("DELETE", "/containers/[^/]+", remove)
            read = asyncio.ensure_future(imagefiles.read_image_files(client, "sha256:img", ["/etc/passwd"], "/s"))
            await asyncio.wait_for(arrived.wait(), DEADLINE)
            read.cancel()
            with pytest.raises(asyncio.CancelledError):
                await read
            assert removed == [] and imagefiles.ACTIVE  # still being removed: no garbage collection takes it
            settling = asyncio.ensure_future(imagefiles.settle(client))
            release.set()
            assert await settling == []

    asyncio.run(asyncio.wait_for(main(), DEADLINE))
    [name] = removed
    assert name.startswith(imagefiles.READER_PREFIX) and not imagefiles.ACTIVE and not imagefiles.UNREMOVED


def test_a_refused_create_is_raised_and_its_name_removed_all_the_same() -> None:
    """Podman's refusal of the create is the caller's error; a removal by name still follows
    (a create that failed part of the way may have made the container)."""

    async def main() -> list[str]:
        async with libpod() as (fake, client):
            fake.route("POST", "/containers/create", (500, {}, {"message": "no space left on device"}))
            fake.route("DELETE", "/containers/[^/]+", (404, {}, {"message": "no such container", "response": 404}))
            with pytest.raises(PodmanError, match="no space left"):
                await imagefiles.read_image_files(client, "sha256:img", ["/etc/passwd"], "/s")
            return fake.calls()

    calls = asyncio.run(asyncio.wait_for(main(), DEADLINE))
    assert [c.split(" ")[0] for c in calls] == ["POST", "DELETE"], calls
    assert calls[1].startswith(f"DELETE /containers/{imagefiles.READER_PREFIX}")
    assert not imagefiles.ACTIVE and not imagefiles.UNREMOVED


def test_a_reader_removed_under_the_read_is_an_outage_not_an_absent_file() -> None:
    """Podman answers 404 "no such container" for the archive of a reader someone else removed
    (seen: a test session's clean-up of another's containers): PodmanUnavailable, to retry,
    not /etc/passwd absent (which refused the image's USER as unknown); a missing path is
    still None, and the reader is removed by name either way."""

    async def main() -> None:
        async with libpod() as (fake, client):
            fake.route("GET", "/containers/[^/]+/archive",
                       (404, {}, {"cause": "no such file or directory", "message": "stat /etc/passwd: no such file "
                                  "or directory", "response": 404}))
            assert await imagefiles.read_image_files(client, "sha256:img", ["/etc/passwd"], "/s") == {
                "/etc/passwd": None}
            fake.route("GET", "/containers/[^/]+/archive",
                       (404, {}, {"cause": "no such container", "message": 'no container with name or ID "x" found: '
                                  "no such container", "response": 404}))
            with pytest.raises(PodmanUnavailable, match="was removed while it read /etc/passwd"):
                await imagefiles.read_image_files(client, "sha256:img", ["/etc/passwd"], "/s")
            assert [c.split(" ")[0] for c in fake.calls()].count("DELETE") == 2

    asyncio.run(asyncio.wait_for(main(), DEADLINE))
    assert not imagefiles.ACTIVE and not imagefiles.UNREMOVED
