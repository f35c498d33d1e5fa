"""podmand.driver.exitfiles: finding Podman's exit directory and reading the kernel's notices."""

from __future__ import annotations

import asyncio
import os
import struct
from pathlib import Path

from podmand.driver import exitfiles

CID = "ab" * 32


def conmon(proc: Path, pid: int, argv: list[str]) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_the_exit_directory_is_read_from_this_containers_conmon_only(tmp_path: Path) -> None:
    argv = ["/usr/bin/conmon", "--api-version", "1", "-c", CID, "--exit-dir", "/run/user/1001/libpod/tmp/exits"]
    conmon(tmp_path, 10, argv)
    conmon(tmp_path, 11, ["/usr/bin/conmon", "-c", "cd" * 32, "--exit-dir", "/elsewhere"])  # another container's
    conmon(tmp_path, 12, ["/bin/sleep", "-c", CID, "--exit-dir", "/tmp/evil"])  # not conmon: another PID namespace
    conmon(tmp_path, 13, ["/usr/bin/conmon", "-c", CID, "--exit-dir"])  # no value
    assert exitfiles.exit_dir_of(10, CID, tmp_path) == Path("/run/user/1001/libpod/tmp/exits")
    assert exitfiles.exit_dir_of(11, CID, tmp_path) is None
    assert exitfiles.exit_dir_of(12, CID, tmp_path) is None
    assert exitfiles.exit_dir_of(13, CID, tmp_path) is None
    assert exitfiles.exit_dir_of(14, CID, tmp_path) is None  # no such process
    assert exitfiles.exit_dir_of(0, CID, tmp_path) is None


def notice(mask: int, name: str) -> bytes:
    raw = name.encode() + b"\0" * (16 - len(name) % 16) if name else b""
    return struct.pack("iIII", 1, mask, 0, len(raw)) + raw


def test_notices_name_files_written_or_moved_in_and_say_when_the_queue_overflowed() -> None:
    buffer = notice(0x08, CID) + notice(0x80, "cd" * 32) + notice(0x100, "created-only") + notice(0x4000, "")
    assert exitfiles.parse(buffer) == ([CID, "cd" * 32], True)
    assert exitfiles.parse(notice(0x08, "x")[:10]) == ([], False)  # a truncated header is ignored


def test_a_file_written_in_the_directory_is_reported_by_name(tmp_path: Path) -> None:
    """What conmon does at an exit, on a real inotify descriptor."""

    async def main() -> list[str]:
        seen: list[str] = []
        got = asyncio.Event()
        watch = exitfiles.ExitWatch(tmp_path, lambda name: (seen.append(name), got.set()), lambda: None)
        assert watch.start() and watch.active
        try:
            (tmp_path / CID).write_text("3")
            await asyncio.wait_for(got.wait(), 10)
        finally:
            watch.close()
        assert not watch.active
        return seen

    assert asyncio.run(main()) == [CID]


def test_a_directory_that_cannot_be_watched_leaves_exits_to_the_events(tmp_path: Path) -> None:
    async def main() -> bool:
        watch = exitfiles.ExitWatch(tmp_path / "missing", lambda _name: None, lambda: None)
        return watch.start() or watch.active

    assert asyncio.run(main()) is False
    assert os.path.exists(tmp_path)
