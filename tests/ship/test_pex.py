"""The shipped files: one pex per architecture, for CPython 3.11-3.13, reproducible whoever
builds them, and a build that needs nothing but python3.

Only CPython 3.11 on x86_64 is at hand here, so for the other targets the pex's own
metadata must prove that the right wheels are inside and that its interpreter
selection admits them. The files checked are dist/'s, which tests/run.sh builds first
(PODMAND_DIST names another directory built with ./build_pex.sh --all)."""

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
from tests.checkout import copy_checkout
from tests.e2e.conftest import USER

ROOT = Path(__file__).resolve().parents[2]
DIST = Path(os.environ.get("PODMAND_DIST", ROOT / "dist"))
BUILD = ROOT / "build_pex.sh"
ARCHES = ("x86_64", "aarch64")
PYTHONS = ("311", "312", "313")
NATIVE = ("grpcio", "msgspec", "cffi")  # compiled per CPython version
MAX_BYTES = 32 * 1024 * 1024  # 30 MB until cryptography (issue 31: +5.4 MB)


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
    protobuf and cryptography as their abi3 wheels, and no wheel of the other architecture."""
    wheels = list(pex_info(pex_path(arch))["distributions"])  # type: ignore[call-overload]
    other = next(a for a in ARCHES if a != arch)
    assert not [w for w in wheels if other in w]
    for name in NATIVE:
        for py in PYTHONS:
            found = [w for w in wheels if w.startswith(f"{name}-") and f"-cp{py}-cp{py}-" in w
                     and f"manylinux2014_{arch}" in w]
            assert len(found) == 1, (name, py, arch, wheels)
    assert [w for w in wheels if w.startswith("protobuf-") and "abi3" in w and arch in w]
    # one abi3 build of cryptography for all three (pexboot.sh unpacks abi3 wheels for each)
    assert len([w for w in wheels if w.startswith("cryptography-") and "-abi3-" in w
                and f"manylinux2014_{arch}" in w]) == 1, wheels
    assert f"podmand-{__version__}-py3-none-any.whl" in wheels


@pytest.mark.parametrize("arch", ARCHES)
def test_interpreter_selection_admits_311_to_313(arch: str) -> None:
    """No interpreter constraint excludes a target, pex's runtime (the fallback) lays out a venv,
    and the /bin/sh boot (pexboot.sh) looks for 3.11-3.13 first."""
    path = pex_path(arch)
    info = pex_info(path)
    assert info["interpreter_constraints"] == []  # the platforms alone decide; all three are targets
    assert info["venv"] is True
    head = boot_header(path)
    assert head.startswith("#!/bin/sh\n")
    candidates = re.findall(r"^for python in (.*); do$", head, re.MULTILINE)
    assert candidates and candidates[0].split()[:3] == ["python3.11", "python3.12", "python3.13"], candidates


def test_sizes_and_checksums() -> None:
    """Each file is at most 32 MB and SHA256SUMS lists exactly them, correctly."""
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
        assert result.stdout.splitlines()[0] == f"podmand {__version__}"  # then Python, libraries, Podman
        assert sorted(p.name for p in here.iterdir()) == ["podmand.pex"]
        assert any(cache.iterdir())
        assert not stat.S_IMODE(here.stat().st_mode) & 0o222
    finally:
        os.chmod(here, 0o755)
        shutil.rmtree(here)
        shutil.rmtree(cache)


def boot_header(path: Path) -> str:
    """The /bin/sh script in front of the pex's zip."""
    with open(path, "rb") as fh:
        data = fh.read(16384)
    return data[: data.index(b"PK\x03\x04")].decode()


@pytest.mark.parametrize("arch", ARCHES)
def test_boot_header_is_pexboot_and_names_no_builder(arch: str) -> None:
    """The file starts with pexboot.sh, keyed to the file's own pex hash, padded to the length of
    pex's header (the zip's offsets count from the start of the file), and naming no path of the
    builder's."""
    path = pex_path(arch)
    head = boot_header(path)
    key = pex_info(path)["pex_hash"]
    template = (ROOT / "pexboot.sh").read_text()
    text = template.replace("@KEY@", str(key)).replace("@VERSION@", __version__)
    assert head.startswith(text) and set(head[len(text):]) <= {"#", "\n"}, head[len(text):][:200]
    assert not re.search(r"/(root|home|tmp|opt|var)/|\.pyenv|/usr/local/", head), head
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None


def test_first_start_unpacks_one_python_second_starts_from_it() -> None:
    """The first start unpacks the running CPython's wheels (one grpcio, not three) into
    PEX_ROOT/podmand/<pex hash>/cp3XY; the second one runs from there without unpacking; with a
    knob of pex's own set (PEX_PYTHON) the file still runs, through pex's runtime."""
    cache = Path(tempfile.mkdtemp(prefix="podmand-pexroot-"))
    try:
        shutil.chown(cache, USER, USER)
        # A copy the user can reach: the checkout may sit in a directory only root enters.
        pex = shutil.copy(pex_path(os.uname().machine), cache / "podmand.pex")
        key = pex_info(Path(pex))["pex_hash"]
        said = []
        for extra in ([], [], ["PEX_PYTHON=/usr/bin/python3"]):
            result = subprocess.run(
                ["runuser", "-u", USER, "--", "env", "-i", "PATH=/usr/bin:/bin", f"PEX_ROOT={cache}", "PEX_VERBOSE=1",
                 *extra, str(pex), "serve", "--help"],
                capture_output=True, text=True, timeout=120, check=False,
            )
            assert result.returncode == 0, result.stderr[-2000:]
            assert result.stdout.startswith("usage: podmand serve"), result.stdout
            said.append(("unpacking" in result.stderr, "for pex's runtime" in result.stderr))
        assert said == [(True, False), (False, False), (False, True)]
        minor = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, check=True).stdout.strip()
        unpacked = list((cache / "podmand" / str(key)).iterdir())
        assert [p.name for p in unpacked] == [f"cp{minor}"]
        native = sorted(p.name for p in unpacked[0].glob("grpc/_cython/cygrpc.*.so"))
        assert len(native) == 1 and f"cpython-{minor}-" in native[0], native
    finally:
        shutil.rmtree(cache)


def test_otel_is_unpacked_on_its_first_import_only() -> None:
    """The first start unpacks neither OpenTelemetry nor what no import reads (.pyi, .proto,
    RECORD); a start with traces on unpacks OTel into cp3XY/.otel and imports it from there
    (here it then stops at the missing Podman socket, with its one clear line)."""
    cache = Path(tempfile.mkdtemp(prefix="podmand-pexroot-"))
    try:
        shutil.chown(cache, USER, USER)
        pex = shutil.copy(pex_path(os.uname().machine), cache / "podmand.pex")
        key = pex_info(Path(pex))["pex_hash"]

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["runuser", "-u", USER, "--", "env", "-i", "PATH=/usr/bin:/bin", f"PEX_ROOT={cache}", "PEX_VERBOSE=1",
                 str(pex), *args],
                capture_output=True, text=True, timeout=120, check=False,
            )

        first = run("serve", "--help")
        assert first.returncode == 0, first.stderr[-2000:]
        (home,) = (cache / "podmand" / str(key)).iterdir()
        files = [p.relative_to(home).as_posix() for p in home.rglob("*") if p.is_file()]
        assert [f for f in files if f.startswith("podmand/")], files
        assert not [f for f in files if f.startswith(("opentelemetry", ".otel", "google/rpc/"))
                    or f.endswith((".pyi", ".proto", "/RECORD"))]
        traced = run("serve", "--otlp-endpoint", "http://127.0.0.1:9", "--podman-socket", str(cache / "none.sock"),
                     "--socket", str(cache / "d.sock"), "--state-dir", str(cache / "state"))
        assert traced.returncode == 1, traced.stderr[-2000:]
        assert "traces: exporting spans to http://127.0.0.1:9" in traced.stderr, traced.stderr[-2000:]
        assert f"unpacking 8 of {len(pex_info(Path(pex))['distributions'])} wheels into {home}/.otel" in traced.stderr  # type: ignore[arg-type]
        assert "no responsive Podman API socket" in traced.stderr and "Traceback" not in traced.stderr
        assert (home / ".otel" / "opentelemetry" / "sdk").is_dir() and (home / ".otel" / "google" / "rpc").is_dir()
    finally:
        shutil.rmtree(cache)


def test_help_documents_the_knobs() -> None:
    """--help names the flag and every environment knob; an unknown argument is refused with status 2."""
    text = subprocess.run([str(BUILD), "--help"], capture_output=True, text=True, timeout=30, check=True).stdout
    for knob in ("--all", "PYTHON=", "ARCHES=", "DIST="):
        assert knob in text, knob
    bad = subprocess.run([str(BUILD), "--bogus"], capture_output=True, text=True, timeout=30, check=False)
    assert bad.returncode == 2 and "--bogus" in bad.stderr


def test_a_fresh_user_with_the_system_python_builds_the_same_bytes() -> None:
    """`./build_pex.sh --all` as an unprivileged user with Debian's own Python (PATH=/usr/bin:/bin,
    a fresh HOME: no pex, no pip or pex cache, no build environment; a checkout owned by root):
    it makes its pinned build environment, shows each step, and writes byte for byte the files in
    dist/, which the test virtualenv's interpreter built (pyenv's when tests/run.sh runs from a
    root shell, a different path): same checkout and pins, same bytes, whoever builds."""
    system = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    if system != "3.11":
        pytest.skip(f"the system Python is {system}, not 3.11: a pex names its builder's minor version "
                    "(__main__.py), so its bytes are those of dist/ only when 3.11 builds (Debian 12's)")
    base = Path(tempfile.mkdtemp(prefix="podmand-build-"))
    try:
        shutil.chown(base, USER, USER)
        os.chmod(base, 0o755)
        checkout = copy_checkout(base / "checkout")  # root's files, readable by all, as a fresh clone
        result = subprocess.run(
            ["runuser", "-u", USER, "--", "env", "-i", "PATH=/usr/bin:/bin", f"HOME={base}/home", f"DIST={base}/dist",
             str(checkout / "build_pex.sh"), "--all"],
            capture_output=True, text=True, timeout=900, check=False, cwd="/",
        )
        assert result.returncode == 0, result.stderr[-3000:]
        steps = re.findall(r"^build_pex: \[ *\d+s\] (\S+)", result.stderr, re.M)
        assert steps[0] == "build" and "x86_64:" in steps and "aarch64:" in steps and "checksums:" in steps, steps
        assert "making" in result.stderr.splitlines()[0]
        assert (base / "dist" / "SHA256SUMS").read_text() == (DIST / "SHA256SUMS").read_text()
    finally:
        shutil.rmtree(base)
