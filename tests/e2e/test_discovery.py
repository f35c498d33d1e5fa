"""Finding Podman as Podman's own CLI does, through the pex against the real rootless
Podman: CONTAINER_HOST, CONTAINER_CONNECTION and the default connection, each a connection
written by the real ``podman system connection add`` run as the rootless test user in a
configuration directory of its own (XDG_CONFIG_HOME); a bad one is listed with its reason,
by serve and by doctor alike, and a named one that fails starts nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable

import pytest

from podmand._proto import compute_driver_pb2 as pb

from .conftest import Podmand


@pytest.fixture
def user_podmand(make_podmand: Callable[..., Podmand], podman_socket: str) -> Callable[..., Podmand]:
    """A podmand (not started) with no socket of podmand's own named, a Podman configuration
    directory of the test user's own, and ``alt/podman.sock``: the user's socket under another
    path (a symlink), so the path serve reports says which candidate it took."""

    def make(env: dict[str, str] | None = None) -> Podmand:
        daemon = make_podmand({"OPENSHELL_PODMAN_SOCKET": "", **(env or {})}, start=False)
        config, alt = daemon.workdir / "config", daemon.workdir / "alt"
        for directory in (config, alt):
            directory.mkdir(mode=0o700)
            shutil.chown(directory, daemon.user, daemon.user)
        (alt / "podman.sock").symlink_to(podman_socket)
        daemon.env["XDG_CONFIG_HOME"] = str(config)
        return daemon

    return make


def connection_add(daemon: Podmand, *args: str) -> None:
    """The real ``podman system connection add``, as the rootless test user, in its own config dir."""
    assert daemon.user and os.geteuid() == 0  # runuser drops to the user: never add one as root
    argv = ["runuser", "-u", daemon.user, "--", "env", "-i", *[f"{k}={v}" for k, v in daemon.env.items()],
            "podman", "system", "connection", "add", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    written = list((daemon.workdir / "config" / "containers").iterdir())
    assert written and all(p.stat().st_uid != 0 for p in written), written  # the user's file, not root's


def alt(daemon: Podmand) -> str:
    return str(daemon.workdir / "alt" / "podman.sock")


def served_through(daemon: Podmand, path: str) -> None:
    daemon.log_path.unlink(missing_ok=True)  # start() waits for a ready line: this run's
    daemon.start()
    [ready] = [line for line in daemon.logs().splitlines() if "ready: serving" in line]
    assert f" at {path}, rootless" in ready, ready
    assert daemon.stub.ListSandboxes(pb.ListSandboxesRequest()) is not None  # Podman answers through it


def serve_fails(daemon: Podmand) -> str:
    done = subprocess.run(daemon.command("serve"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "ready" not in done.stderr
    assert "started Podman's API service" not in done.stderr
    return done.stderr


def doctor_socket(daemon: Podmand) -> dict[str, str]:
    done = subprocess.run(daemon.command("doctor", "--json"), capture_output=True, text=True, timeout=180)
    [check] = [c for c in json.loads(done.stdout) if c["name"] == "podman socket"]
    return dict(check)


def test_container_host_names_the_socket(user_podmand: Callable[..., Podmand]) -> None:
    daemon = user_podmand()
    daemon.env["CONTAINER_HOST"] = f"unix://{alt(daemon)}"
    served_through(daemon, alt(daemon))


def test_container_connection_and_the_default_connection(user_podmand: Callable[..., Podmand],
                                                         podman_socket: str) -> None:
    daemon = user_podmand()
    second = daemon.workdir / "alt" / "second.sock"
    second.symlink_to(podman_socket)
    connection_add(daemon, "first", f"unix://{alt(daemon)}")  # the first connection is the default one
    connection_add(daemon, "second", f"unix://{second}")
    served_through(daemon, alt(daemon))
    assert daemon.stop() == 0
    daemon.env["CONTAINER_CONNECTION"] = "second"
    served_through(daemon, str(second))


def test_bad_connections_are_listed_with_why_by_serve_and_doctor(user_podmand: Callable[..., Podmand]) -> None:
    daemon = user_podmand()
    gone = str(daemon.workdir / "alt" / "gone.sock")
    connection_add(daemon, "broken", f"unix://{gone}")
    line = f"{gone} (default connection 'broken'): does not exist"
    check = doctor_socket(daemon)  # the default connection fails; the user's own socket answers
    assert check["status"] == "OK" and line in check["finding"], check
    assert check["finding"].startswith(f"/run/user/{pwd_uid(daemon)}/podman/podman.sock answers"), check

    daemon.env["CONTAINER_CONNECTION"] = "broken"  # named: no fallback, nothing started
    err = serve_fails(daemon)
    named = f"{gone} (connection 'broken' (CONTAINER_CONNECTION)): does not exist"
    assert f"  {named}\n" in err, err
    assert "one is (CONTAINER_CONNECTION)" in err and "/run/user/" not in err, err
    check = doctor_socket(daemon)
    assert check["status"] == "FAIL" and named in check["finding"] and "one is (CONTAINER_CONNECTION)" in \
        check["finding"], check

    daemon.env["CONTAINER_CONNECTION"] = "nosuch"
    assert "nosuch (connection 'nosuch' (CONTAINER_CONNECTION)): no such connection" in serve_fails(daemon)

    del daemon.env["CONTAINER_CONNECTION"]
    daemon.env["CONTAINER_HOST"] = "ssh://alice@build.invalid:2222/run/user/1000/podman/podman.sock"
    err = serve_fails(daemon)
    assert "ssh://alice@build.invalid:2222/run/user/1000/podman/podman.sock (CONTAINER_HOST): not supported" in err
    assert "'ssh -nNT -L /run/user/" in err and ":/run/user/1000/podman/podman.sock -p 2222 alice@build.invalid'" in err
    assert "and set CONTAINER_HOST=unix:///run/user/" in err, err


def pwd_uid(daemon: Podmand) -> int:
    import pwd

    assert daemon.user
    return pwd.getpwnam(daemon.user).pw_uid


def test_an_untrusted_connections_file_is_not_read(user_podmand: Callable[..., Podmand]) -> None:
    """A connections file others may write could point podmand at their socket: passed over, said why."""
    daemon = user_podmand()
    connection_add(daemon, "e2e", f"unix://{alt(daemon)}")
    config = daemon.workdir / "config" / "containers"
    [written] = [p for p in config.iterdir() if p.name in ("containers.conf", "podman-connections.json")]
    written.chmod(0o666)
    check = doctor_socket(daemon)
    assert f"{written} (Podman's configuration): not read: writable by group or others (mode 0666)" in \
        check["finding"], check
    assert alt(daemon) not in check["finding"], check
    written.chmod(0o644)
    assert doctor_socket(daemon)["finding"].startswith(f"{alt(daemon)} (default connection 'e2e') answers")
