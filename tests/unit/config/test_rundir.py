"""Unit tests for podmand.config.rundir: the runtime directory Podman would pick, and the fallback's safety."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podmand import config
from podmand.config import rundir
from podmand.host import discovery

UID = 4242  # not this process's uid, so every ownership decision is visible


def as_owned_by(owner: int, *paths: Path | str) -> object:
    """An lstat that reports ``paths`` (resolved) as owned by ``owner``; everything else as it is."""
    targets = {os.path.realpath(p) for p in paths}

    def lstat(path: str) -> os.stat_result:
        st = os.lstat(path)
        if path in targets:
            fields = list(st)
            fields[4] = owner  # st_uid
            return os.stat_result(fields)
        return st

    return lstat


def test_root_uses_run() -> None:
    assert rundir.resolve({"XDG_RUNTIME_DIR": "/somewhere"}, 0) == rundir.RuntimeDir("/run", "root")


def test_xdg_runtime_dir_of_ours_wins(tmp_path: Path) -> None:
    got = rundir.resolve({"XDG_RUNTIME_DIR": str(tmp_path)}, UID, as_owned_by(UID, tmp_path))  # type: ignore[arg-type]
    assert got == rundir.RuntimeDir(str(tmp_path), "XDG_RUNTIME_DIR")


def test_unusable_xdg_runtime_dir_is_passed_over_with_a_note(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    got = rundir.resolve({"XDG_RUNTIME_DIR": str(missing), "TMPDIR": str(tmp_path)}, UID)
    assert got.source == "fallback"
    assert f"XDG_RUNTIME_DIR={missing} does not exist" in got.note
    foreign = rundir.resolve({"XDG_RUNTIME_DIR": str(tmp_path)}, UID, as_owned_by(7, tmp_path))  # type: ignore[arg-type]
    assert foreign.source == "fallback"
    assert "is owned by uid 7, not 4242" in foreign.note


def test_run_user_is_used_when_it_exists_and_is_ours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/run/user/<uid> cannot be faked on disk without root: its lookup is redirected to a tmp dir."""
    real_lstat = os.lstat

    def lstat(path: str) -> os.stat_result:
        if path == f"/run/user/{UID}":
            fields = list(real_lstat(tmp_path))
            fields[4] = UID
            return os.stat_result(fields)
        return real_lstat(path)

    got = rundir.resolve({}, UID, lstat)
    assert got == rundir.RuntimeDir(f"/run/user/{UID}", "/run/user", "")


def test_without_xdg_or_run_user_podmans_tmp_fallback_is_chosen(tmp_path: Path) -> None:
    assert rundir.resolve({}, UID).path == f"/tmp/podman-run-{UID}"
    got = rundir.resolve({"TMPDIR": str(tmp_path)}, UID)
    assert got == rundir.RuntimeDir(str(tmp_path / f"podman-run-{UID}"), "fallback", f"/run/user/{UID} does not exist")
    assert not (tmp_path / f"podman-run-{UID}").exists()  # resolve only looks
    assert rundir.resolve({}, UID).under_tmp


def fallback_here(tmp_path: Path) -> rundir.RuntimeDir:
    return rundir.RuntimeDir(str(tmp_path / f"podman-run-{os.geteuid()}"), "fallback")


def test_ensure_creates_the_fallback_0700(tmp_path: Path) -> None:
    runtime = fallback_here(tmp_path)
    assert rundir.ensure(runtime) == runtime.path
    assert (os.stat(runtime.path).st_mode & 0o777) == 0o700
    assert rundir.ensure(runtime) == runtime.path  # and accepts it again


def test_ensure_refuses_a_symlinked_fallback(tmp_path: Path) -> None:
    runtime = fallback_here(tmp_path)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.symlink(tmp_path / "elsewhere", runtime.path)
    with pytest.raises(rundir.RuntimeDirError, match="is a symlink; refusing"):
        rundir.ensure(runtime)


def test_ensure_refuses_a_fallback_writable_by_others(tmp_path: Path) -> None:
    runtime = fallback_here(tmp_path)
    os.mkdir(runtime.path)
    os.chmod(runtime.path, 0o777)
    with pytest.raises(rundir.RuntimeDirError, match=r"writable by group or others \(mode 0777\)"):
        rundir.ensure(runtime)


def test_fallback_problem_names_a_foreign_owner(tmp_path: Path) -> None:
    fields = list(os.lstat(tmp_path))
    fields[4] = 7
    fields[0] = 0o40700
    assert rundir.fallback_problem(os.stat_result(fields), UID) == "is owned by uid 7, not 4242"
    fields[4] = UID
    assert rundir.fallback_problem(os.stat_result(fields), UID) == ""
    (tmp_path / "file").write_text("")
    assert rundir.fallback_problem(os.lstat(tmp_path / "file"), os.geteuid()) == "is not a directory"


def test_ensure_leaves_other_sources_alone(tmp_path: Path) -> None:
    missing = str(tmp_path / "not-created")
    assert rundir.ensure(rundir.RuntimeDir(missing, "XDG_RUNTIME_DIR")) == missing
    assert not os.path.exists(missing)


def test_ensure_holding_creates_only_a_fallback_holding_the_path(tmp_path: Path) -> None:
    runtime = fallback_here(tmp_path)
    rundir.ensure_holding("/elsewhere/driver.sock", runtime)
    assert not os.path.exists(runtime.path)
    rundir.ensure_holding(f"{runtime.path}/podmand/compute-driver.sock", runtime)
    assert os.path.isdir(runtime.path)
    xdg = rundir.RuntimeDir(str(tmp_path / "xdg"), "XDG_RUNTIME_DIR")
    rundir.ensure_holding(f"{xdg.path}/podmand/compute-driver.sock", xdg)
    assert not os.path.exists(xdg.path)


def test_default_driver_socket_and_podman_candidate_follow_the_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without logind both the driver socket and the Podman socket podmand looks for are in the fallback."""
    monkeypatch.setattr(os, "geteuid", lambda: UID)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    fallback = tmp_path / f"podman-run-{UID}"
    assert config.default_socket() == str(fallback / "podmand" / "compute-driver.sock")
    found = discovery.candidates("", {"TMPDIR": str(tmp_path), "HOME": "/home/u"})
    assert str(fallback / "podman" / "podman.sock") in found
    assert found[-1] == "/run/podman/podman.sock"
