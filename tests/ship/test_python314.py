"""The pex under CPython 3.14: this machine's architecture's file starts and serves on it,
through pexboot.sh's own unpack and through pex's runtime (where Debian sid's python3 used to
stop at "The wheel tags for msgspec ... do not match").

The interpreter is ``python3.14`` on PATH when there is one (the suite running in a Debian
tree whose Python is 3.14), else Debian sid's in the minimal tree tests/setup-python314.sh
makes (tests/run.sh does), where the pex runs chrooted, as root: sid's binaries need sid's C
library. Each run sees only that interpreter on its PATH, so pexboot cannot pick an older one.
With neither, the tests are skipped, saying so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from podmand import __version__
from tests.fakes.libpod import FakeLibpod
from tests.ship.test_pex import pex_path
from tests.wait import wait_until

TREE = Path(os.environ.get("PODMAND_PY314_TREE", "/var/lib/podmand-test/py314"))


@dataclass
class Place:
    """A directory for one run: on this machine at ``host``, seen by the pex at ``inside``."""

    root: Path  # / or the tree the pex is chrooted into
    host: Path
    interpreter: str  # CPython 3.14's path as the pex sees it

    def inside(self, path: Path) -> str:
        return "/" + str(path.relative_to(self.root))

    def run(self, *args: str, env: tuple[str, ...] = (), **kw: object) -> list[str]:
        """The command that runs the pex with only CPython 3.14 on PATH and nothing else set."""
        chroot = ["chroot", str(self.root)] if self.root != Path("/") else []
        return [*chroot, "env", "-i", f"PATH={self.inside(self.host / 'bin')}",
                f"PEX_ROOT={self.inside(self.host / 'pexroot')}", *env, self.inside(self.host / "podmand.pex"), *args]


@pytest.fixture
def place() -> Iterator[Place]:
    found = shutil.which("python3.14")
    if found:
        root, interpreter = Path("/"), found
    elif (TREE / "usr/bin/python3.14").is_file():
        root, interpreter = TREE, "/usr/bin/python3.14"
    else:
        pytest.skip(f"no CPython 3.14 here: no python3.14 on PATH and no {TREE}/usr/bin/python3.14 "
                    "(bash tests/setup-python314.sh makes that tree; tests/run.sh runs it)")
    host = Path(tempfile.mkdtemp(prefix="podmand-py314-", dir=root / "tmp"))
    try:
        (host / "bin").mkdir()
        (host / "bin" / "python3.14").symlink_to(interpreter)
        (host / "pexroot").mkdir(mode=0o700)
        shutil.copy(pex_path(os.uname().machine), host / "podmand.pex")
        yield Place(root, host, interpreter)
    finally:
        shutil.rmtree(host)


def test_the_pex_unpacks_its_cpython_314_wheels_and_serves(place: Place) -> None:
    """--version names CPython 3.14 after pexboot unpacked the cp314 wheels (one grpcio, built
    for 3.14) into PEX_ROOT/podmand/<hash>/cp314; then serve, against a fake libpod, reaches
    its ready line and its health service answers SERVING."""
    version = subprocess.run(place.run("--version", env=("PEX_VERBOSE=1",)), capture_output=True, text=True,
                             timeout=120, check=False)
    assert version.returncode == 0, version.stderr[-2000:]
    lines = version.stdout.splitlines()
    assert lines[0] == f"podmand {__version__}", lines
    assert any(line.startswith("Python 3.14.") for line in lines), lines
    assert "unpacking" in version.stderr and "for pex's runtime" not in version.stderr, version.stderr[-2000:]
    with zipfile.ZipFile(place.host / "podmand.pex") as z:
        key = json.loads(z.read("PEX-INFO"))["pex_hash"]
    (home,) = (place.host / "pexroot" / "podmand" / key).iterdir()
    assert home.name == "cp314"
    assert [p.name for p in home.glob("grpc/_cython/cygrpc.*.so")] == [
        f"cygrpc.cpython-314-{os.uname().machine}-linux-gnu.so"]

    fake = FakeLibpod().start_in_thread(str(place.host / "podman.sock"))
    socket = place.host / "d.sock"
    proc = subprocess.Popen(
        place.run("serve", "--podman-socket", place.inside(place.host / "podman.sock"),
                  "--socket", place.inside(socket), "--state-dir", place.inside(place.host / "state"),
                  env=("OPENSHELL_SANDBOX_IMAGE=img:1", "OPENSHELL_SUPERVISOR_IMAGE=sup:1")),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("ready: serving" in line for line in log) or proc.poll() is not None, 60,
                   "podmand to serve under CPython 3.14", lambda: "".join(log)[-2000:])
        assert proc.poll() is None, "".join(log)[-2000:]
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        assert fake.count(r"GET .*/events") >= 1  # it talks to (the fake) Podman
    finally:
        proc.terminate()
        proc.wait(30)
        reader.join(10)
        fake.stop_thread()
    assert "Traceback" not in "".join(log), "".join(log)[-3000:]


def test_pex_runtime_runs_the_file_under_cpython_314(place: Place) -> None:
    """With a knob of pex's own set (PEX_PYTHON), pex's runtime resolves the file's cp314 wheels
    for this interpreter and runs it: where 3.14 used to fail on the wheels' tags."""
    result = subprocess.run(place.run("serve", "--help", env=("PEX_VERBOSE=1", f"PEX_PYTHON={place.interpreter}")),
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("usage: podmand serve"), result.stdout
    assert "for pex's runtime" in result.stderr
