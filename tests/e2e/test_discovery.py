"""Finding Podman as Podman's own CLI does, through the pex against the real rootless
Podman: CONTAINER_HOST, CONTAINER_CONNECTION and the default connection, each a connection
written by the real ``podman system connection add`` run as the rootless test user in a
configuration directory of its own (XDG_CONFIG_HOME); a bad one is listed with its reason,
by serve and by doctor alike, and a named one that fails starts nothing. A socket podmand
finds is used only when no other user can change where its path leads: nothing under another
user's runtime directory, and no symlink unless the operator named it (issue 30)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from podmand._proto import compute_driver_pb2 as pb

from .conftest import Podmand
from .privatepodman import PodmanService


@pytest.fixture
def user_podmand(make_podmand: Callable[..., Podmand], podman_socket: str) -> Callable[..., Podmand]:
    """A podmand (not started) with no socket of podmand's own named, a Podman configuration
    directory of the test user's own, and ``alt/podman.sock``: the user's socket under another
    path (a symlink: used only when named), so the path serve reports says which candidate it took."""

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


@pytest.fixture
def own_service() -> Iterator[Callable[[Podmand], str]]:
    """A second real Podman service of the test user's, at ``alt/api.sock`` (a socket, not a
    link): what a found connection must lead to. Stopped by the PID this fixture started."""
    started: list[PodmanService] = []

    def start(daemon: Podmand) -> str:
        service = PodmanService(str(daemon.workdir / "alt" / "api.sock"))
        started.append(service)
        service.start()
        return service.socket

    yield start
    for service in started:
        service.kill(signal.SIGTERM)


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
                                                         own_service: Callable[[Podmand], str]) -> None:
    daemon = user_podmand()
    first = own_service(daemon)
    connection_add(daemon, "first", f"unix://{first}")  # the first connection is the default one
    connection_add(daemon, "second", f"unix://{alt(daemon)}")
    served_through(daemon, first)
    assert daemon.stop() == 0
    daemon.env["CONTAINER_CONNECTION"] = "second"  # named: its symlink is followed
    served_through(daemon, alt(daemon))


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


def test_an_untrusted_connections_file_is_not_read(user_podmand: Callable[..., Podmand],
                                                   own_service: Callable[[Podmand], str]) -> None:
    """A connections file others may write could point podmand at their socket: passed over, said why."""
    daemon = user_podmand()
    sock = own_service(daemon)
    connection_add(daemon, "e2e", f"unix://{sock}")
    config = daemon.workdir / "config" / "containers"
    [written] = [p for p in config.iterdir() if p.name in ("containers.conf", "podman-connections.json")]
    written.chmod(0o666)
    check = doctor_socket(daemon)
    assert f"{written} (Podman's configuration): not read: writable by group or others (mode 0666)" in \
        check["finding"], check
    assert sock not in check["finding"], check
    written.chmod(0o644)
    assert doctor_socket(daemon)["finding"].startswith(f"{sock} (default connection 'e2e') answers")


NOBODY = 65534  # another user: the owner of what the attacker made


def runtime_dir(parent: Path, owner: int, podman_socket: str) -> tuple[Path, Path]:
    """``<parent>/run`` as an XDG_RUNTIME_DIR owned by ``owner``, whose ``podman/podman.sock``
    is a symlink (``owner``'s) to the test user's real socket."""
    run = parent / "run"
    link = run / "podman" / "podman.sock"
    link.parent.mkdir(parents=True)
    link.symlink_to(podman_socket)
    for path in (run, link.parent, link):
        os.chown(path, owner, owner, follow_symlinks=False)
    run.chmod(0o755)
    return run, link


def test_a_link_in_another_users_runtime_dir_is_never_used(user_podmand: Callable[..., Podmand],
                                                            podman_socket: str) -> None:
    """Issue 30's try: another user's directory, set as XDG_RUNTIME_DIR, holds
    ``podman/podman.sock``, a link to the test user's own socket (whoever owns it could swap
    it for a socket of theirs at any time). doctor and serve pass it over, say why, and use
    the user's own socket."""
    daemon = user_podmand()
    foreign = daemon.workdir / "foreign"
    foreign.mkdir()
    run, link = runtime_dir(foreign, NOBODY, podman_socket)
    daemon.env["XDG_RUNTIME_DIR"] = str(run)
    uid = pwd_uid(daemon)
    why = (f"{link}: not used: its runtime directory XDG_RUNTIME_DIR={run} is owned by uid {NOBODY}, not {uid} "
           "(another user could have planted it)")
    served_through(daemon, podman_socket)
    check = doctor_socket(daemon)
    assert check["status"] == "OK" and check["finding"] == f"{podman_socket} answers (tried first: {why})", check


def test_a_found_symlink_is_used_only_when_named(user_podmand: Callable[..., Podmand], podman_socket: str) -> None:
    """The user's own runtime directory, and its own connection, each leading to the real
    socket through a symlink: passed over when found, with why; followed when named."""
    daemon = user_podmand()
    run, link = runtime_dir(daemon.workdir, pwd_uid(daemon), podman_socket)
    run.chmod(0o700)
    daemon.env["XDG_RUNTIME_DIR"] = str(run)
    connection_add(daemon, "linked", f"unix://{alt(daemon)}")  # the default connection: a link too
    check = doctor_socket(daemon)
    symlink = "not used: it is a symlink; podmand follows one only to a socket it is given (--podman-socket"
    assert check["status"] == "OK" and check["finding"].startswith(f"{podman_socket} answers (tried first: "), check
    assert f"{alt(daemon)} (default connection 'linked'): {symlink}" in check["finding"], check
    assert f"{link}: {symlink}" in check["finding"], check
    served_through(daemon, podman_socket)
    assert daemon.stop() == 0
    daemon.env["OPENSHELL_PODMAN_SOCKET"] = str(link)
    served_through(daemon, str(link))
