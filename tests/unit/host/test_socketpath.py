"""Unit tests for podmand.host.socketpath: the driver socket's directory is checked and made
private through one descriptor, so a directory swapped for a symlink is never followed."""

from __future__ import annotations

import os
import pathlib
import pwd
import stat
from pathlib import Path
from typing import Any

import pytest

from podmand.host import socketpath
from podmand.host.socketpath import SocketError, prepare_socket

SETTING = "--socket / OPENSHELL_COMPUTE_DRIVER_SOCKET"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A directory of this user's that podmand must never chmod (as root it could be /etc)."""
    where = tmp_path / "elsewhere"
    where.mkdir(mode=0o755)
    os.chmod(where, 0o755)
    return where


@pytest.mark.parametrize("swap", ["symlink", "file"])
def test_a_directory_swapped_after_the_check_is_refused(
    tmp_path: Path, target: Path, monkeypatch: pytest.MonkeyPatch, swap: str
) -> None:
    """The directory passes the first look and is made, then becomes a symlink (or a file)
    before its owner and mode are dealt with: refused with one line naming the setting,
    the symlink's target untouched."""
    parent = tmp_path / "run"
    real_mkdir = pathlib.Path.mkdir

    def mkdir_then_swap(self: Path, *args: Any, **kwargs: Any) -> None:
        real_mkdir(self, *args, **kwargs)
        if self == parent:
            os.rmdir(parent)
            if swap == "symlink":
                os.symlink(target, parent)
            else:
                parent.write_text("")

    monkeypatch.setattr(pathlib.Path, "mkdir", mkdir_then_swap)
    with pytest.raises(SocketError) as err:
        prepare_socket(str(parent / "d.sock"))
    what = "a symlink" if swap == "symlink" else "not a directory"
    assert str(err.value) == (
        f"driver socket directory {parent} is {what}; refusing to use it (choose another {SETTING})"
    )
    assert mode(target) == 0o755 and os.listdir(target) == []


def test_a_symlinked_directory_is_refused(tmp_path: Path, target: Path) -> None:
    parent = tmp_path / "run"
    parent.symlink_to(target)
    with pytest.raises(SocketError, match=f"is a symlink; refusing to use it \\(choose another {SETTING}\\)"):
        prepare_socket(str(parent / "d.sock"))
    assert mode(target) == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_another_users_directory_is_refused_and_left_alone(tmp_path: Path) -> None:
    parent = tmp_path / "run"
    parent.mkdir(mode=0o755)
    os.chown(parent, pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(SocketError) as err:
        prepare_socket(str(parent / "d.sock"))
    assert str(err.value) == (
        f"driver socket directory {parent} must be a directory owned by uid {os.geteuid()} (choose another {SETTING})"
    )
    assert mode(parent) == 0o755


def test_its_own_directory_is_made_private(tmp_path: Path) -> None:
    parent = tmp_path / "run"
    parent.mkdir(mode=0o755)
    os.chmod(parent, 0o755)
    assert socketpath.prepare_socket(str(parent / "d.sock")) == []
    assert mode(parent) == 0o700
