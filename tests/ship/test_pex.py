"""The shipped files: one pex per architecture, for CPython 3.11-3.14, reproducible whoever
builds them, and a build that needs nothing but python3.

Only CPython 3.11 on x86_64 is at hand here (and 3.14 in a tree: test_python314.py), so for
the other targets the pex's own metadata must prove that the right wheels are inside and that its interpreter
selection admits them. The files checked are dist/'s, which tests/run.sh builds first
(PODMAND_DIST names another directory built with ./build_pex.sh --all)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from podmand import __version__
from tests.checkout import copy_checkout
from tests.e2e.conftest import USER

ROOT = Path(__file__).resolve().parents[2]
DIST = Path(os.environ.get("PODMAND_DIST", ROOT / "dist"))
BUILD = ROOT / "build_pex.sh"
ARCHES = ("x86_64", "aarch64")
PYTHONS = ("311", "312", "313", "314")
NATIVE = ("grpcio", "msgspec", "cffi")  # compiled per CPython version
MAX_BYTES = 32 * 1024 * 1024  # 30 MB until cryptography (issue 31: +5.4 MB); 3.14 fits by LZMA (issue 32)


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
    """Each native dependency is inside once per CPython 3.11/3.12/3.13/3.14 for this architecture,
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
    # one abi3 build of cryptography for all four (pexboot.sh unpacks abi3 wheels for each)
    assert len([w for w in wheels if w.startswith("cryptography-") and "-abi3-" in w
                and f"manylinux2014_{arch}" in w]) == 1, wheels
    assert f"podmand-{__version__}-py3-none-any.whl" in wheels


@pytest.mark.parametrize("arch", ARCHES)
def test_interpreter_selection_admits_311_to_314(arch: str) -> None:
    """No interpreter constraint excludes a target, pex's runtime (the fallback) lays out a venv,
    and the /bin/sh boot (pexboot.sh) looks for 3.11-3.14 first."""
    path = pex_path(arch)
    info = pex_info(path)
    assert info["interpreter_constraints"] == []  # the platforms alone decide; all four are targets
    assert info["venv"] is True
    head = boot_header(path)
    assert head.startswith("#!/bin/sh\n")
    candidates = re.findall(r"^for python in (.*); do$", head, re.MULTILINE)
    assert candidates and candidates[0].split()[:4] == ["python3.11", "python3.12", "python3.13", "python3.14"], \
        candidates


@pytest.mark.parametrize("arch", ARCHES)
def test_native_libraries_are_lzma_and_what_zipimport_reads_is_deflate(arch: str) -> None:
    """Every .so under .deps is an LZMA entry (what keeps four CPythons in 32 MB), every other
    file deflate: .bootstrap, __main__.py and __pex__ are imported from the zip by zipimport,
    which reads no LZMA (pex's runtime would not start)."""
    with zipfile.ZipFile(pex_path(arch)) as z:
        files = [i for i in z.infolist() if not i.is_dir()]
    native = [i for i in files if i.filename.startswith(".deps/") and i.filename.endswith(".so")]
    assert len(native) >= 4 * len(NATIVE)
    assert {i.compress_type for i in native} == {zipfile.ZIP_LZMA}
    assert {i.compress_type for i in files if i not in native} == {zipfile.ZIP_DEFLATED}


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
    """The file starts with pexboot.sh, keyed to the file's own pex hash and naming no path of the
    builder's, and the zip after it is whole, its offsets moved to where its entries now start
    (they count from the start of the file: none is off by the header's length)."""
    path = pex_path(arch)
    head = boot_header(path)
    key = pex_info(path)["pex_hash"]
    template = (ROOT / "pexboot.sh").read_text()
    assert head == template.replace("@KEY@", str(key)).replace("@VERSION@", __version__)
    assert not re.search(r"/(root|home|tmp|opt|var)/|\.pyenv|/usr/local/", head), head
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
        assert min(i.header_offset for i in z.infolist()) == len(head.encode())
        with open(path, "rb") as fh:
            fh.seek(-22, os.SEEK_END)
            end = fh.read()
        assert end[:4] == b"PK\x05\x06" and int.from_bytes(end[16:20], "little") == z.start_dir  # no prefix


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
        unpacked = list((cache / "podmand" / str(key)).iterdir())
        assert [p.name for p in unpacked] == [cpython_tag()]
        native = sorted(p.name for p in unpacked[0].glob("grpc/_cython/cygrpc.*.so"))
        assert len(native) == 1 and f"cpython-{cpython_tag()[2:]}-" in native[0], native
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


# The first start's trust in PEX_ROOT (pexboot.sh; docs/security.md, "The pex's own files"). Another
# local user (OTHER) plants a podmand whose main records who ran it; podmand's user (USER) then
# starts the pex. Each run gets a TMPDIR of its own, where a private unpack goes and is removed.
OTHER = "nobody"
PLANT = """import os, sys
home, mark, aside = sys.argv[1], sys.argv[2], sys.argv[3:]
for path in aside:  # the user's own directory moved out of the way: its parent lets anyone write
    os.rename(path, path + ".old")
os.makedirs(os.path.join(home, "podmand"))
with open(os.path.join(home, "podmand", "__main__.py"), "w") as fh:
    fh.write("import os\\nopen(%r, 'w').write(str(os.getuid()))\\n"
             "def main():\\n    print('TROJAN')\\n    return 0\\n" % mark)
"""


def cpython_tag() -> str:
    """cp3XY of the interpreter the boot picks under PATH=/usr/bin:/bin: pexboot.sh tries
    python3.11 to python3.14, then python3 (a sid host has 3.13 beside its 3.14 python3)."""
    for name in ("python3.11", "python3.12", "python3.13", "python3.14", "python3"):
        found = shutil.which(name, path="/usr/bin:/bin")
        if found:
            minor = subprocess.run([found, "-c", "import sys; print('%d%d' % sys.version_info[:2])"],
                                   capture_output=True, text=True, check=True).stdout.strip()
            return f"cp{minor}"
    raise AssertionError("no CPython on PATH=/usr/bin:/bin")


@contextlib.contextmanager
def boot_place() -> Iterator[Path]:
    """A directory of root's (0755): the pex, marks/ (1777, where a planted main would write)
    and tmp/, the user's own TMPDIR (0700)."""
    base = Path(tempfile.mkdtemp(prefix="podmand-pexboot-"))
    try:
        os.chmod(base, 0o755)
        pex = shutil.copy(pex_path(os.uname().machine), base / "podmand.pex")
        os.chmod(pex, 0o755)
        (base / "marks").mkdir(mode=0o1777)
        os.chmod(base / "marks", 0o1777)
        (base / "tmp").mkdir(mode=0o700)
        shutil.chown(base / "tmp", USER, USER)
        yield base
    finally:
        shutil.rmtree(base)


def user_cache(base: Path, name: str = "cache") -> Path:
    path = base / name
    path.mkdir(mode=0o755)
    shutil.chown(path, USER, USER)
    return path


def start(base: Path, pex_root: Path, *args: str, umask: str = "", verbose: bool = False
          ) -> subprocess.CompletedProcess[str]:
    """The pex as USER with nothing else in its environment."""
    env = ["PATH=/usr/bin:/bin", f"PEX_ROOT={pex_root}", f"TMPDIR={base / 'tmp'}", *(["PEX_VERBOSE=1"] * verbose)]
    shell = ["sh", "-c", f'umask {umask} && exec "$0" "$@"'] if umask else []
    return subprocess.run(["runuser", "-u", USER, "--", "env", "-i", *env, *shell, str(base / "podmand.pex"), *args],
                          capture_output=True, text=True, timeout=120, check=False)


def plant(base: Path, home: Path, *aside: Path) -> Path:
    """As OTHER: ``home/podmand/__main__.py``, after moving ``aside`` away; the mark it would write."""
    mark = base / "marks" / "ran"
    subprocess.run(["runuser", "-u", OTHER, "--", "/usr/bin/python3", "-c", PLANT, str(home), str(mark),
                    *map(str, aside)], capture_output=True, text=True, timeout=60, check=True)
    return mark


def assert_refused(result: subprocess.CompletedProcess[str], why: str, base: Path, mark: Path) -> None:
    """The start worked, from a private unpack that is gone, said why, and ran nothing planted."""
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[0] == f"podmand {__version__}", result.stdout
    assert "TROJAN" not in result.stdout and not mark.exists()
    assert f"{why}: unpacking privately for this run instead" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not list((base / "tmp").iterdir())


@pytest.mark.parametrize("inside", [False, True], ids=["pex_root_is_1777", "pex_root_made_by_other_in_1777"])
def test_a_podmand_planted_in_a_shared_pex_root_is_not_run(inside: bool) -> None:
    """A shared PEX_ROOT (1777), or one that another user made in a shared directory, where that
    user planted podmand/<hash>/cp3XY/podmand/__main__.py: the start refuses PEX_ROOT, naming it and
    why, runs from a private unpack removed at exit, and never the planted file (the old boot
    imported it)."""
    with boot_place() as base:
        shared = base / "shared"
        shared.mkdir()
        os.chmod(shared, 0o1777)
        root = shared / "pex" if inside else shared
        mark = plant(base, root / "podmand" / str(pex_info(base / "podmand.pex")["pex_hash"]) / cpython_tag())
        why = (f"{root} is owned by uid {pwd.getpwnam(OTHER).pw_uid}" if inside
               else f"{shared} is writable by group or others (mode 1777)")
        assert_refused(start(base, root, "--version"), why, base, mark)


@pytest.mark.parametrize("level", ["PEX_ROOT", "podmand/<hash>", "cp3XY"])
def test_a_level_others_can_write_is_not_imported(level: str) -> None:
    """The user's own cache, then one of its levels made writable by others (a+rwX, as the sidecar
    image's used to be) or by a group the other user is in, who swaps the level below for a planted
    podmand: the next start refuses that level and runs from a private unpack (the old boot ran the
    planted file)."""
    with boot_place() as base:
        root = user_cache(base)
        first = start(base, root, "--version")
        assert first.returncode == 0 and not first.stderr, first.stderr[-2000:]
        home = root / "podmand" / str(pex_info(base / "podmand.pex")["pex_hash"]) / cpython_tag()
        loose = {"PEX_ROOT": root, "podmand/<hash>": home.parent, "cp3XY": home}[level]
        mode = 0o775 if level == "podmand/<hash>" else 0o777
        os.chown(loose, -1, pwd.getpwnam(OTHER).pw_gid)
        os.chmod(loose, mode)
        below = loose / (home.relative_to(loose).parts[0] if loose != home else "podmand")
        mark = plant(base, home, below)
        assert_refused(start(base, root, "--version"), f"{loose} is writable by group or others (mode {mode:04o})",
                       base, mark)


@pytest.mark.parametrize("level", ["podmand", "cp3XY"])
def test_a_symlinked_level_is_not_imported(level: str) -> None:
    """A level of the user's cache that is a symlink (the user's own) to a directory where another
    user planted podmand: refused, naming the link (the old boot followed it and ran the file)."""
    with boot_place() as base:
        root = user_cache(base)
        elsewhere = base / "elsewhere"
        elsewhere.mkdir()
        os.chmod(elsewhere, 0o1777)
        key = str(pex_info(base / "podmand.pex")["pex_hash"])
        if level == "podmand":
            link, target = root / "podmand", elsewhere / "podmand"
            mark = plant(base, target / key / cpython_tag())
        else:
            (root / "podmand" / key).mkdir(parents=True)
            for made in (root / "podmand", root / "podmand" / key):
                shutil.chown(made, USER, USER)
            link, target = root / "podmand" / key / cpython_tag(), elsewhere / "home"
            mark = plant(base, target)
        link.symlink_to(target)
        os.lchown(link, pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid)
        assert_refused(start(base, root, "--version"), f"{link} is a symlink", base, mark)


def test_a_clean_cache_is_private_to_its_user_whatever_the_umask_and_reused() -> None:
    """Under umask 000, with PEX_ROOT reached through a symlinked parent (the parents are resolved,
    then checked): the first start unpacks into PEX_ROOT, the second imports from there; nothing
    either left in PEX_ROOT is writable by group or others, .pyc files included, as each package
    directory's __pycache__ is made with it (the old boot's unpack followed the umask: 0777, 0666)."""
    with boot_place() as base:
        real = user_cache(base, "real")
        (base / "link").symlink_to(real)
        said = []
        for _ in range(2):
            result = start(base, base / "link" / "pex", "--version", umask="000", verbose=True)
            assert result.returncode == 0, result.stderr[-2000:]
            assert result.stdout.startswith(f"podmand {__version__}\n"), result.stdout
            assert "privately" not in result.stderr, result.stderr
            said.append("unpacking" in result.stderr)
        assert said == [True, False]
        home = real / "pex" / "podmand" / str(pex_info(base / "podmand.pex")["pex_hash"]) / cpython_tag()
        assert (home / "podmand" / "__main__.py").is_file()
        loose = []
        for path in [real / "pex", *(real / "pex").rglob("*")]:
            st = path.lstat()
            if st.st_mode & 0o022 or st.st_uid != pwd.getpwnam(USER).pw_uid:
                loose.append(f"{path} {stat.S_IMODE(st.st_mode):04o} uid {st.st_uid}")
        assert not loose, loose[:20]
        packages = {p.parent for p in home.rglob("*.py")}
        assert all((p / "__pycache__").is_dir() for p in packages)
        assert list((home / "podmand" / "__pycache__").glob("*.pyc"))  # the imports wrote theirs there


def test_an_otel_directory_others_can_write_is_not_imported() -> None:
    """cp3XY/.otel writable by others (a+rwX), where another user put its own opentelemetry: a start
    with traces on refuses it and imports OpenTelemetry from a private unpack (the old boot imported
    the planted package)."""
    with boot_place() as base:
        root = user_cache(base)
        first = start(base, root, "serve", "--help")
        assert first.returncode == 0, first.stderr[-2000:]
        home = root / "podmand" / str(pex_info(base / "podmand.pex")["pex_hash"]) / cpython_tag()
        otel = home / ".otel"
        otel.mkdir(mode=0o777)
        os.chmod(otel, 0o777)
        shutil.chown(otel, USER, USER)
        mark = base / "marks" / "ran"
        subprocess.run(["runuser", "-u", OTHER, "--", "/usr/bin/python3", "-c",
                        "import os, sys; os.mkdir(sys.argv[1]); open(sys.argv[1] + '/__init__.py', 'w')"
                        ".write('open(%r, \"w\").write(\"otel\")\\n' % sys.argv[2])",
                        str(otel / "opentelemetry"), str(mark)], check=True, timeout=60)
        state = user_cache(base, "state")
        traced = start(base, root, "serve", "--otlp-endpoint", "http://127.0.0.1:9", "--podman-socket",
                       str(base / "none.sock"), "--socket", str(state / "d.sock"), "--state-dir", str(state / "s"))
        assert traced.returncode == 1, traced.stderr[-2000:]
        assert f"{otel} is writable by group or others (mode 0777): unpacking privately" in traced.stderr
        assert "traces: exporting spans to http://127.0.0.1:9" in traced.stderr, traced.stderr[-2000:]
        assert "no responsive Podman API socket" in traced.stderr and "Traceback" not in traced.stderr
        assert not mark.exists()
        assert not list((base / "tmp").iterdir())
