"""podmand.sandbox.imagefiles: an image's files are read as they stream, never past a limit."""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import AsyncIterator

import pytest

from podmand.driver.validation import Accounts
from podmand.sandbox.imagefiles import TooLarge, first_file, read_capped


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


def test_the_account_cache_is_bounded_in_images_and_in_size() -> None:
    cache = Accounts(images=3, size=100)
    for i in range(5):
        cache.put(f"img{i}", ("p" * 10, "g" * 10))
    assert len(cache) == 3 and cache.get("img0") is None and cache.get("img4") is not None
    cache.get("img2")  # used: kept over img3
    cache.put("big", ("p" * 50, "g" * 30))
    assert cache.kept_size <= 100 and cache.get("img2") is not None and cache.get("img3") is None
    huge = ("p" * 200, "")
    assert cache.put("huge", huge) == huge and cache.get("huge") is None  # used, never kept
    assert cache.kept_size <= 100
