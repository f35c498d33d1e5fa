"""The README's ctl walk-through, run as written against a live podmand."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import podman

from .conftest import ROOT, Podmand, containers_of


def walkthrough() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Operating it: podmand ctl", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, "no sh block in the ctl section"
    return match.group(1)


def test_ctl_walkthrough_works_as_written(make_podmand: Callable[..., Podmand], pex_file: Path,
                                          podman_client: podman.PodmanClient) -> None:
    """Every command of the block succeeds (set -e), in a shell run by the podman user,
    with XDG_RUNTIME_DIR pointing where podmand serves and dist/podmand.pex at hand."""
    runtime = Path(tempfile.mkdtemp(prefix="podmand-readme-"))
    try:
        os.chmod(runtime, 0o755)
        (runtime / "dist").mkdir()
        shutil.copy(pex_file, runtime / "dist" / "podmand.pex")
        daemon = make_podmand(start=False)
        shutil.chown(runtime, daemon.user, daemon.user)
        daemon.socket = str(runtime / "podmand" / "compute-driver.sock")
        daemon.env["OPENSHELL_COMPUTE_DRIVER_SOCKET"] = daemon.socket
        daemon.start()
        env = {**daemon.env, "XDG_RUNTIME_DIR": str(runtime)}
        script = "set -e\n" + walkthrough() + "wait\n"
        result = subprocess.run(
            ["runuser", "-u", daemon.user or "", "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()],
             "bash", "-c", script],
            cwd=runtime, capture_output=True, text=True, timeout=180,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "deleted: true" in result.stdout
        assert "demo-1" in result.stdout
        assert containers_of(podman_client, "demo-1") == []
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
