"""Logs that work whatever containers.conf's log_driver says: a fresh user whose
containers.conf chose journald, on a host where that user cannot read the journal
(none runs here). Plain ``podman run`` loses the output (Podman 5) or is refused
(Podman 4); podmand's sandbox, through the pex and the Podman service it starts
itself, logs with k8s-file (both containers of the pair), and ``ctl logs``, ``logs -f``
and ``describe`` show the workload's log: its runtime's lines and its main process's output."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import podman
import pytest

from tests.e2e.freshuser import FreshUser, fresh_user
from tests.wait import wait_until

from .conftest import DEADLINE, RUNTIME_IMAGE, SANDBOX_IMAGE, SUPERVISOR_IMAGE
from .test_ctl import Lines, fields

JOURNALD = '[containers]\nlog_driver = "journald"\n'
SAID = "main-process-said-hello"


@pytest.fixture(scope="module")
def user(podman_client: podman.PodmanClient) -> Iterator[FreshUser]:
    """A fresh user with journald in its containers.conf and the test images in its store
    (saved from the suite's rootless Podman, loaded with the user's own CLI)."""
    with fresh_user("plogs") as u:
        conf = Path(u.home, ".config", "containers")
        conf.mkdir(parents=True)
        (conf / "containers.conf").write_text(JOURNALD)
        subprocess.run(["chown", "-R", f"{u.uid}:{u.gid}", str(Path(u.home, ".config"))], check=True)
        for image in (SANDBOX_IMAGE, SUPERVISOR_IMAGE, RUNTIME_IMAGE):
            tar = Path(u.home, "image.tar")
            with open(tar, "wb") as out:
                for chunk in podman_client.images.get(image).save(named=True):
                    out.write(chunk)
            os.chown(tar, u.uid, u.gid)
            loaded = u.run(["podman", "load", "-q", "-i", str(tar)])
            assert loaded.returncode == 0, loaded.stderr
            tar.unlink()
        yield u


def podman_major(user: FreshUser) -> int:
    out = user.run(["podman", "version", "--format", "{{.Client.Version}}"])
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().split(".")[0])


def test_plain_podman_run_loses_the_output(user: FreshUser) -> None:
    """What podmand avoids: the same image under the user's own journald setting."""
    info = user.run(["podman", "info", "--format", "{{.Host.LogDriver}}"])
    assert info.stdout.strip() == "journald", info.stdout + info.stderr
    ran = user.run(["podman", "run", "--name", "plain", SANDBOX_IMAGE, "sh", "-c", "echo plain-output"])
    if podman_major(user) < 5:  # Podman 4 opens the journal at create: no journal, no container
        assert ran.returncode != 0 and "journal" in ran.stderr, ran.stdout + ran.stderr
        return
    assert ran.returncode == 0, ran.stderr  # Podman 5 runs it and sends the output nowhere readable
    kind = user.run(["podman", "inspect", "--format", "{{.HostConfig.LogConfig.Type}}", "plain"])
    assert kind.stdout.strip() == "journald", kind.stdout + kind.stderr
    logged = user.run(["podman", "logs", "plain"])
    assert "plain-output" not in logged.stdout + logged.stderr


def test_sandbox_logs_with_k8s_file_and_ctl_shows_them(user: FreshUser, pex_file: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "serve.log"
    env = {"OPENSHELL_SANDBOX_IMAGE": SANDBOX_IMAGE, "OPENSHELL_SUPERVISOR_IMAGE": SUPERVISOR_IMAGE,
           "OPENSHELL_SANDBOX_RUNTIME_IMAGE": RUNTIME_IMAGE, "OPENSHELL_STOP_TIMEOUT": "5"}

    def logs() -> str:
        return log_path.read_text(errors="replace")

    with open(log_path, "wb") as out:
        serve = user.popen([str(pex_file), "serve"], env, stdout=out, stderr=subprocess.STDOUT)
    follow: subprocess.Popen[str] | None = None
    try:
        wait_until(lambda: "ready: serving" in logs() or serve.poll() is not None, 90.0, "podmand ready", logs)
        assert serve.poll() is None, logs()

        def ctl(*args: str) -> subprocess.CompletedProcess[str]:
            return user.run([str(pex_file), "ctl", *args], env, timeout=DEADLINE + 30)

        box = f"logs-{uuid.uuid4().hex[:10]}"
        main = ["sh", "-c", f"echo {SAID}; exec sleep 600"]
        created = ctl("create", "--wait", "--id", box, "--name", "web", "--", *main)
        assert created.returncode == 0, created.stdout + created.stderr + logs()
        assert fields(created.stdout)["ready"] == "True", created.stdout

        with podman.PodmanClient(base_url=f"unix:///tmp/podman-run-{user.uid}/podman/podman.sock") as client:
            pair = client.containers.list(all=True, filters={"label": f"openshell.ai/sandbox-id={box}"})
            assert len(pair) == 2  # the workload and its supervisor
            for found in pair:
                assert client.containers.get(found.id).attrs["HostConfig"]["LogConfig"]["Type"] == "k8s-file"

            # The workload's log: the runtime's lines (stderr) and the main process's output (stdout).
            started = "openshell-sandbox: started the main process sh"
            shown = wait_until(lambda: (r := ctl("logs", box)).returncode == 0 and SAID in r.stdout and r,
                               DEADLINE, "the main process's output")
            assert started in shown.stderr and "as 1000:1000 in /sandbox" in shown.stderr, shown.stderr

            follow = subprocess.Popen(user.command([str(pex_file), "ctl", "logs", "-f", box], env),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            lines, out = Lines(follow, "stderr"), Lines(follow, "stdout")
            wait_until(lambda: lines.having(started) and out.having(SAID), DEADLINE, "logs -f to print what was logged")
            assert follow.poll() is None  # following while the container runs

        described = ctl("describe", box)
        assert described.returncode == 0, described.stderr
        assert fields(described.stdout)["State"].strip() == "running", described.stdout
        events = described.stdout.split("Events (Podman):", 1)[1].split()
        assert "create" in events and "start" in events, described.stdout

        stopped = ctl("stop", box)
        assert stopped.returncode == 0, stopped.stderr
        assert follow.wait(DEADLINE) == 0  # the stream ends with the container
        assert ctl("delete", box).returncode == 0
        assert "journal" not in logs(), logs()  # nor did the helper containers trip over it
    finally:
        if follow is not None and follow.poll() is None:
            follow.kill()
        for pid in user.pids_of("serve"):  # podmand itself (the user is new: it ran nothing else)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        serve.wait(30)
