"""Unit tests for podmand.sandbox.files: state files are addressed only by whole ids."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import grpc
import pytest

from podmand.sandbox import files as files_module
from podmand.sandbox.files import SandboxFiles, StateDirUnwritable


@pytest.mark.parametrize("bad", ["..", ".", "", "../x", "/etc", "a/b", "abc\n", "x" * 129])
def test_paths_never_leave_the_state_dir(tmp_path: Path, bad: str) -> None:
    """A non-id never names a path (DeleteSandbox('..') once removed the whole state directory)."""
    files = SandboxFiles(tmp_path / "state")
    files.setup()
    (tmp_path / "state" / "keep").write_text("x")
    with pytest.raises(ValueError, match="not a sandbox id"):
        files.dir(bad)
    with pytest.raises(ValueError):
        files.remove(bad)
    # reads of such ids answer "nothing recorded" instead of failing
    assert (files.generation(bad), files.stopped_container(bad), files.failure(bad), files.launch(bad),
            files.making(bad)) == ("", "", None, None, False)
    assert (tmp_path / "state" / "keep").read_text() == "x"


def test_markers_round_trip(tmp_path: Path) -> None:
    files = SandboxFiles(tmp_path)
    files.setup()
    files.mark_failed("sb-1", "ImagePullFailed", "no such image")
    files.mark_created("sb-1", "cid")
    assert files.failure("sb-1") == ("ImagePullFailed", "no such image")
    assert files.created_container("sb-1") == "cid"
    files.clear_failed("sb-1")
    files.clear_created("sb-1")
    assert (files.failure("sb-1"), files.created_container("sb-1")) == (None, "")
    (tmp_path / "sandboxes" / "odd dir").mkdir()
    assert files.sandbox_ids() == ["sb-1"]


def test_an_oom_flags_first_end_is_kept_once_per_container_and_bounded(tmp_path: Path) -> None:
    files = SandboxFiles(tmp_path)
    files.setup()
    assert files.first_oom("sb-1", "c0", "t1") == "t1" and not files.dir("sb-1").exists(), "no directory made"
    files.dir("sb-1").mkdir()
    assert files.first_oom("sb-1", "c0") == "", "a read keeps nothing"
    assert files.first_oom("sb-1", "c0", "t1") == "t1"
    assert files.first_oom("sb-1", "c0", "t2") == "t1", "the first end stays"
    for n in range(1, 2 * files_module.OOM_KEPT):  # containers a recreate made since
        files.first_oom("sb-1", f"c{n}", f"t{n}")
    assert files.first_oom("sb-1", "c0") == "", "only the newest containers are kept"
    newest = f"c{2 * files_module.OOM_KEPT - 1}"
    assert files.first_oom("sb-1", newest) == f"t{2 * files_module.OOM_KEPT - 1}"
    assert len((tmp_path / "sandboxes" / "sb-1" / "oom").read_text().split(",")) == files_module.OOM_KEPT
    (tmp_path / "sandboxes" / "sb-1" / "oom").write_text("[not a map")
    assert files.first_oom("sb-1", newest, "t9") == "t9", "a damaged record is written afresh"


@pytest.mark.parametrize(
    ("code", "fix"),
    [
        (errno.EACCES, "make it writable again for "),
        (errno.EPERM, "make it writable again for "),
        (errno.EROFS, "remount its filesystem read-write"),
        (errno.ENOSPC, "free space on its filesystem"),
        (errno.EDQUOT, "free space or raise the disk quota"),
        (errno.EIO, "make it writable again for "),
    ],
)
def test_a_failed_write_names_the_directory_the_reason_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, fix: str
) -> None:
    """Each write (token, credential, markers) fails as FAILED_PRECONDITION, one line, never a bare OSError."""
    files = SandboxFiles(tmp_path / "state")
    files.setup()
    sandbox = "sb-1"

    def refuse(path: str, *args: object) -> int:
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(files_module.os, "open", refuse)
    writes = [
        lambda: files.write(sandbox, "driver.credential", b"c"),
        lambda: files.set_generation(sandbox, "1"),
        lambda: files.mark_stopped(sandbox, "c1"),
        lambda: files.mark_created(sandbox, "c1"),
        lambda: files.mark_failed(sandbox, "R", "m"),
    ]
    for write in writes:
        with pytest.raises(StateDirUnwritable) as caught:
            write()
        message = caught.value.message
        assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert message.startswith(f"state directory {tmp_path / 'state'} is not writable: {os.strerror(code)} (")
        assert fix in message and message.endswith(", then try again") and "\n" not in message
    monkeypatch.undo()
    files.remove(sandbox)
    assert files.sandbox_ids() == []
    files.write(sandbox, "driver.credential", b"c")  # writable again: works again
    assert (files.dir(sandbox) / "driver.credential").read_bytes() == b"c"


def test_a_create_is_being_made_while_its_launch_bundle_is_kept(tmp_path: Path) -> None:
    files = SandboxFiles(tmp_path)
    files.setup()
    assert files.making("sb-1") is False
    files.write_launch("sb-1", b"{}")
    assert files.making("sb-1") is True and files.making("sb-2") is False
    files.drop_launch("sb-1")
    assert files.making("sb-1") is False
