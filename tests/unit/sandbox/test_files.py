"""Unit tests for podmand.sandbox.files: state files are addressed only by whole ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from podmand.sandbox.files import SandboxFiles


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
    assert (files.generation(bad), files.stopped_container(bad), files.failure(bad), files.has_token(bad)) == (
        "", "", None, False
    )
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
