"""The shipped files: one pex per architecture, for CPython 3.11-3.13, reproducible.

Only CPython 3.11 on x86_64 is at hand here, so for the other targets the pex's own
metadata must prove that the right wheels are inside and that its interpreter
selection admits them."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pytest

from podmand import __version__
from tests.e2e.conftest import USER

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
ARCHES = ("x86_64", "aarch64")
PYTHONS = ("311", "312", "313")
NATIVE = ("grpcio", "msgspec")  # compiled per CPython version
MAX_BYTES = 30 * 1024 * 1024


def pex_path(arch: str) -> Path:
    path = DIST / f"podmand-{__version__}-{arch}.pex"
    if not path.exists():
        pytest.fail(f"{path} missing: run ./build_pex.sh (tests/run.sh does)")
    return path


def pex_info(path: Path) -> dict[str, object]:
    with zipfile.ZipFile(path) as z:
        info: dict[str, object] = json.loads(z.read("PEX-INFO"))
        return info


@pytest.mark.parametrize("arch", ARCHES)
def test_wheels_for_every_target_and_nothing_else(arch: str) -> None:
    """Each native dependency is inside once per CPython 3.11/3.12/3.13 for this architecture,
    protobuf as its abi3 wheel, and no wheel of the other architecture."""
    wheels = list(pex_info(pex_path(arch))["distributions"])  # type: ignore[call-overload]
    other = next(a for a in ARCHES if a != arch)
    assert not [w for w in wheels if other in w]
    for name in NATIVE:
        for py in PYTHONS:
            found = [w for w in wheels if w.startswith(f"{name}-") and f"-cp{py}-cp{py}-" in w
                     and f"manylinux2014_{arch}" in w]
            assert len(found) == 1, (name, py, arch, wheels)
    assert [w for w in wheels if w.startswith("protobuf-") and "abi3" in w and arch in w]
    assert f"podmand-{__version__}-py3-none-any.whl" in wheels


@pytest.mark.parametrize("arch", ARCHES)
def test_interpreter_selection_admits_311_to_313(arch: str) -> None:
    """No interpreter constraint excludes a target, and the /bin/sh boot looks for 3.11-3.13 first."""
    path = pex_path(arch)
    info = pex_info(path)
    assert info["interpreter_constraints"] == []  # the platforms alone decide; all three are targets
    assert info["venv"] is True
    with open(path, "rb") as fh:
        head = fh.read(8192).decode("latin-1")
    assert head.startswith("#!/bin/sh")
    candidates = re.findall(r'^"(python3\.\d+t?)" \\$', head, re.MULTILINE)
    assert candidates[:3] == ["python3.11", "python3.12", "python3.13"], candidates


def test_sizes_and_checksums() -> None:
    """Each file is at most 30 MB and SHA256SUMS lists exactly them, correctly."""
    listed = {}
    for line in (DIST / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        listed[name] = digest
    assert sorted(listed) == sorted(p.name for p in map(pex_path, ARCHES))
    for name, digest in listed.items():
        data = (DIST / name).read_bytes()
        assert len(data) <= MAX_BYTES, name
        assert hashlib.sha256(data).hexdigest() == digest


def test_runs_read_only_with_cache_elsewhere() -> None:
    """Copied to a read-only place and run by another user with nothing in its environment,
    under the system CPython 3.11 without site packages, it unpacks into PEX_ROOT only."""
    here = Path(tempfile.mkdtemp(prefix="podmand-ro-"))
    cache = Path(tempfile.mkdtemp(prefix="podmand-pexroot-"))
    try:
        copy = here / "podmand.pex"
        shutil.copy(pex_path(os.uname().machine), copy)
        os.chmod(copy, 0o555)
        os.chmod(here, 0o555)
        shutil.chown(cache, USER, USER)
        result = subprocess.run(
            ["runuser", "-u", USER, "--", "env", "-i", "PATH=/usr/bin:/bin", f"PEX_ROOT={cache}", str(copy),
             "--version"],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"podmand {__version__}"
        assert sorted(p.name for p in here.iterdir()) == ["podmand.pex"]
        assert any(cache.iterdir())
        assert not stat.S_IMODE(here.stat().st_mode) & 0o222
    finally:
        os.chmod(here, 0o755)
        shutil.rmtree(here)
        shutil.rmtree(cache)


def test_two_builds_are_identical(tmp_path: Path) -> None:
    """Same checkout, same pins: the same bytes (SHA256SUMS of a second build matches)."""
    out = tmp_path / "dist"
    subprocess.run([str(ROOT / "build_pex.sh")], env={**os.environ, "DIST": str(out)}, check=True,
                   capture_output=True, timeout=900)
    assert (out / "SHA256SUMS").read_text() == (DIST / "SHA256SUMS").read_text()
