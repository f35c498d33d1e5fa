"""The README run as written (the first run of a new user on a stock host), and the ctl
walk-through of docs/operations.md."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import podman

from tests.checkout import copy_checkout
from tests.standin.test_split_podman import RUNTIME_IMAGE, SUPERVISOR_IMAGE, WORKLOAD_IMAGE
from tests.wait import wait_until

from .conftest import ROOT, SANDBOX_IMAGE, Podmand, pair_of
from .freshuser import fresh_user
from .test_autostart import marked


def walkthrough() -> str:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## podmand ctl", 1)[1]
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
        assert "Events (Podman):" in result.stdout and SANDBOX_IMAGE in result.stdout  # describe
        assert "IMAGE" in result.stdout and "Ready=True" in result.stderr  # list's columns, create --wait's steps
        assert pair_of(podman_client, "demo-1") == []
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def setup_block() -> list[str]:
    """The commands of the README's first code block ("Set up and run on this host"),
    comments stripped."""
    section = (ROOT / "README.md").read_text().split("## Set up and run on this host", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, "no sh block in the set-up section"
    return [line.split("#", 1)[0].strip() for line in match.group(1).splitlines() if line.split("#", 1)[0].strip()]


def test_first_run_as_a_fresh_user_with_the_system_python(tmp_path: Path) -> None:
    """Issue 13's first run: a new unprivileged user on a host without logind (no
    XDG_RUNTIME_DIR, no /run/user/<uid>), no Podman service, no store, only Debian's
    /usr/bin/python3 on PATH, runs the README's two commands as written and gets a
    Ready sandbox through ``ctl create --wait``; checked through podman-py on the
    Podman service podmand started for that user."""
    build, serve = setup_block()
    assert build.startswith("./build_pex.sh") and serve.startswith("dist/podmand.pex serve")
    with fresh_user("pfirst") as user:
        checkout = Path(user.home) / "podmand"
        copy_checkout(checkout, with_git=False)
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(checkout)], check=True)
        system_python = {"PATH": "/usr/bin:/bin"}  # Debian's python3: no pex, PEP 668, no packages of ours
        assert user.pids_of("podman") == [] and not Path(f"/run/user/{user.uid}").exists()

        built = user.run(["bash", "-c", f"set -e; {build}"], system_python, timeout=600, cwd=checkout)
        assert built.returncode == 0, built.stdout + built.stderr
        assert "build environment" in built.stdout + built.stderr  # it says what it does
        assert (checkout / "dist" / "podmand.pex").is_file()

        # podmand's default images live on ghcr.io, which this machine cannot reach: the split
        # topology's stand-ins (tests/images) stand in, loaded below once the store exists
        images = {"OPENSHELL_SANDBOX_IMAGE": WORKLOAD_IMAGE, "OPENSHELL_SANDBOX_RUNTIME_IMAGE": RUNTIME_IMAGE,
                  "OPENSHELL_SUPERVISOR_IMAGE": SUPERVISOR_IMAGE}
        log_path = tmp_path / "serve.log"
        mark = uuid.uuid4().hex  # finds podmand itself among the user's processes (runuser is its parent)
        with open(log_path, "wb") as log:
            daemon = user.popen(["bash", "-c", f"exec {serve}"], {**system_python, **images, "PODMAND_E2E_MARK": mark},
                                cwd=checkout, stdout=log, stderr=subprocess.STDOUT)
        try:
            def logs() -> str:
                return log_path.read_text(errors="replace")

            wait_until(lambda: "ready: serving" in logs() or daemon.poll() is not None, 90.0, "podmand ready", logs)
            assert daemon.poll() is None, logs()
            runtime = f"/tmp/podman-run-{user.uid}"
            assert f"at {runtime}/podman/podman.sock (new store: overlay)" in logs()

            cache = Path("/var/cache/podmand-test")
            path_env = "ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            for image, tar, changes in (  # as tests/images/build.sh loads them
                (WORKLOAD_IMAGE, "python-standin.tar", ["USER=sandbox", 'CMD=["/bin/sh"]']),
                (SUPERVISOR_IMAGE, "python-standin.tar", ['ENTRYPOINT=["/openshell-supervisor"]']),
                (RUNTIME_IMAGE, "runtime.tar", ['CMD=["/openshell-sandbox"]']),
            ):
                flags = [arg for change in (path_env, *changes) for arg in ("--change", change)]
                loaded = user.run(["podman", "import", "-q", *flags, str(cache / tar), image])
                assert loaded.returncode == 0, loaded.stderr

            sandbox_id = "first-run-1"
            created = user.run(["dist/podmand.pex", "ctl", "create", "--id", sandbox_id, "--name", "first",
                                "--wait", "--", "sleep", "600"], system_python, cwd=checkout, timeout=180)
            assert created.returncode == 0, created.stdout + created.stderr + logs()
            assert sandbox_id in created.stdout

            with podman.PodmanClient(base_url=f"unix://{runtime}/podman/podman.sock") as client:
                made = {c.attrs["Name"].lstrip("/"): c.attrs["State"]["Status"]
                        for c in pair_of(client, sandbox_id)}
                assert made == {f"openshell-default--first-{sandbox_id}": "running",
                                f"openshell-supervisor-{sandbox_id}": "running"}, made  # the pair
                assert client.info()["store"]["graphDriverName"] == "overlay"

            deleted = user.run(["dist/podmand.pex", "ctl", "delete", sandbox_id], cwd=checkout)
            assert deleted.returncode == 0 and "deleted: true" in deleted.stdout, deleted.stdout + deleted.stderr
            [podmand] = marked(user, mark)
            os.kill(podmand, signal.SIGTERM)
            assert daemon.wait(60) == 0, logs()
            assert user.pids_of("podman", "system", "service") == []  # podmand stopped what it started
        finally:
            for pid in marked(user, mark):
                os.kill(pid, signal.SIGKILL)
            daemon.wait(30)
