"""Unit tests for podmand.host.autostart, storageguard and podmanservice: when podmand starts
Podman's API, with what command, environment and storage driver, and how its child is bound to
it and stopped."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from podmand.config import Settings, rundir
from podmand.host import autostart, discovery, podmanservice, storageguard
from podmand.host.podmanservice import AutostartError, PodmanService
from podmand.host.storageguard import OVERLAY_FLAG, StorageFacts
from tests.wait import wait_until

ROOT = Path(__file__).resolve().parents[3]
RUN = rundir.RuntimeDir("/nonexistent/run", "XDG_RUNTIME_DIR")


def test_new_store_without_a_configured_driver_gets_overlay() -> None:
    assert storageguard.storage_flags(StorageFacts("/h/.local/share/containers/storage", False, "")) == [OVERLAY_FLAG]


def test_existing_store_or_configured_driver_is_left_to_podman() -> None:
    assert storageguard.storage_flags(StorageFacts("/s", True, "")) == []
    assert storageguard.storage_flags(StorageFacts("/s", False, "/etc/containers/storage.conf")) == []


def test_names_driver_reads_the_storage_table() -> None:
    assert storageguard.names_driver('[storage]\ndriver = "overlay"\n')
    assert storageguard.names_driver('[storage]\ndriver = "vfs"\nrunroot = "/x"\n')
    assert not storageguard.names_driver('[storage]\ndriver = ""\n')
    assert not storageguard.names_driver('[storage.options]\nmount_program = "/usr/bin/fuse-overlayfs"\n')
    assert not storageguard.names_driver("")
    assert storageguard.names_driver("[storage\nnot toml")  # not understood: left to Podman


def test_storage_confs_in_podmans_order() -> None:
    assert storageguard.storage_confs({}, "/home/u") == [
        "/home/u/.config/containers/storage.conf",
        "/etc/containers/storage.conf",
        "/usr/share/containers/storage.conf",
    ]
    assert storageguard.storage_confs({"XDG_CONFIG_HOME": "/c"}, "/home/u")[0] == "/c/containers/storage.conf"
    assert storageguard.storage_confs({"CONTAINERS_STORAGE_CONF": "/only.conf"}, "/home/u") == ["/only.conf"]


def test_storage_facts_from_a_home(tmp_path: Path) -> None:
    """The store and the user's storage.conf are found through HOME / XDG_* (the system files are
    this host's: the test host has none naming a driver, as a stock Debian 12)."""
    env = {"HOME": str(tmp_path), "CONTAINERS_STORAGE_CONF": str(tmp_path / ".config/containers/storage.conf")}
    facts = storageguard.storage_facts(env, 1000)
    assert facts == StorageFacts(str(tmp_path / ".local/share/containers/storage"), False, "")
    conf = tmp_path / ".config" / "containers" / "storage.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text('[storage]\ndriver = "overlay"\n')
    assert storageguard.storage_facts(env, 1000).driver_source == str(conf)
    (tmp_path / ".local/share/containers/storage").mkdir(parents=True)
    assert storageguard.storage_facts(env, 1000).store_exists
    assert storageguard.storage_facts({**env, "XDG_DATA_HOME": str(tmp_path / "d")}, 1000).store == str(
        tmp_path / "d/containers/storage"
    )
    assert storageguard.storage_facts({"HOME": str(tmp_path / "x"), "STORAGE_DRIVER": "vfs",
                                    "CONTAINERS_STORAGE_CONF": "/nonexistent"}, 1000).driver_source == "STORAGE_DRIVER"
    assert storageguard.storage_facts(env, 0).store == "/var/lib/containers/storage"  # rootful: not under HOME


def test_service_command_and_environment() -> None:
    argv = autostart.service_argv("/usr/bin/podman", "/tmp/podman-run-7/podman/podman.sock", [OVERLAY_FLAG])
    assert argv == ["/usr/bin/podman", "--storage-driver=overlay", "system", "service", "--time=0",
                    "unix:///tmp/podman-run-7/podman/podman.sock"]
    environ = {"HOME": "/home/u", "PATH": "/bin", "OPENSHELL_SANDBOX_IMAGE": "x", "PODMAND_STATE_DIR": "/s",
               "XDG_RUNTIME_DIR": "/gone", "NOTIFY_SOCKET": "/run/systemd/notify", "LISTEN_FDS": "1"}
    env = autostart.service_env(environ, "/tmp/podman-run-7", podmand_probes=False)
    assert env == {"HOME": "/home/u", "PATH": "/bin", "XDG_RUNTIME_DIR": "/tmp/podman-run-7"}
    # podmand probes health itself: Podman must not also run 'podman healthcheck run' timers.
    env = autostart.service_env({**environ, "DISABLE_HC_SYSTEMD": "false"}, "/tmp/podman-run-7", podmand_probes=True)
    assert env == {"HOME": "/home/u", "PATH": "/bin", "XDG_RUNTIME_DIR": "/tmp/podman-run-7",
                   "DISABLE_HC_SYSTEMD": "true"}


def test_why_not_start_names_the_setting_the_socket_and_a_missing_podman() -> None:
    assert autostart.why_not_start(Settings(), "/usr/bin/podman") == ""
    off = autostart.why_not_start(Settings(podman_autostart=False), "/usr/bin/podman")
    assert "podman_autostart is off" in off and "PODMAND_PODMAN_AUTOSTART" in off
    named = autostart.why_not_start(Settings(podman_socket="/x"), "/usr/bin/podman")
    assert "only when no socket is named" in named and "OPENSHELL_PODMAN_SOCKET" in named
    assert "podman is not installed" in autostart.why_not_start(Settings(), None)


def test_prepare_refuses_without_podman_on_path(tmp_path: Path) -> None:
    with pytest.raises(AutostartError, match="no 'podman' on PATH"):
        autostart.prepare(Settings(), {"PATH": str(tmp_path), "HOME": str(tmp_path)})


def test_prepare_builds_the_service_in_the_runtime_dir(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "podman"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    runtime = tmp_path / "run"
    runtime.mkdir()
    env = {"PATH": str(fake.parent), "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(runtime),
           "CONTAINERS_STORAGE_CONF": "/nonexistent"}
    service = autostart.prepare(Settings(), env)
    assert "DISABLE_HC_SYSTEMD" not in service.env  # no podmand probes: an image's HEALTHCHECK is Podman's to run
    assert autostart.prepare(Settings(health_check_interval=30), env).env["DISABLE_HC_SYSTEMD"] == "true"
    if os.geteuid() == 0:
        assert service.socket_path == "/run/podman/podman.sock"
        assert service.argv == [str(fake), "system", "service", "--time=0", "unix:///run/podman/podman.sock"]
    else:  # pragma: no cover - the suite runs as root; as a user the storage guard applies
        assert service.socket_path == f"{runtime}/podman/podman.sock"
        assert OVERLAY_FLAG in service.argv


def test_failure_with_overlay_names_cause_and_fix() -> None:
    service = PodmanService(["podman", OVERLAY_FLAG, "system", "service"], {}, RUN)
    service.stderr.append('Error: kernel does not support overlay fs: "overlay" is not supported')
    text = service._failure("exited with status 125")
    assert "exited with status 125: Error: kernel does not support overlay fs" in text
    assert "no Podman store yet" in text and "fuse-overlayfs" in text and 'driver = "vfs"' in text
    assert "fuse-overlayfs" not in PodmanService(["podman", "system", "service"], {}, RUN)._failure("x")


def test_stop_escalates_to_sigkill_for_a_child_ignoring_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(podmanservice, "STOP_TIMEOUT", 0.3)
    ready = tmp_path / "trapped"
    sock = tmp_path / "podman" / "podman.sock"

    async def scenario() -> tuple[int, str | None]:
        service = PodmanService(["sh", "-c", f"trap '' TERM; touch {ready}; exec sleep 600"], dict(os.environ),
                                rundir.RuntimeDir(str(tmp_path), "XDG_RUNTIME_DIR"))
        proc = await service.spawn()
        while not ready.exists():
            await asyncio.sleep(0.02)
        sock.write_text("")  # stands for the socket the service leaves behind
        await service.stop()
        return proc.returncode or 0, None

    code, _ = asyncio.run(scenario())
    assert code == -signal.SIGKILL
    assert not sock.exists()


def test_the_child_dies_with_podmand(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: a podmand killed with SIGKILL (no clean-up at all) takes its service along."""
    script = textwrap.dedent(f"""
        import asyncio, os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from podmand.host.podmanservice import PodmanService
        from podmand.config.rundir import RuntimeDir
        async def main():
            runtime = RuntimeDir({str(tmp_path)!r}, "XDG_RUNTIME_DIR")
            proc = await PodmanService(["sleep", "600"], dict(os.environ), runtime).spawn()
            print(proc.pid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        asyncio.run(main())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGKILL, out.stderr
    child = int(out.stdout.strip())

    def gone() -> bool:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        return state in ("Z", "X")  # reaped by init, or about to be

    wait_until(gone, 10.0, f"the service child {child} to die with its parent")


def test_a_service_that_fails_at_start_is_reported_with_its_stderr(tmp_path: Path) -> None:
    """What Podman says on stderr reaches the error, with the overlay fix when podmand asked for overlay."""
    fake = tmp_path / "podman"
    said = "Error: kernel does not support overlay fs: operation not permitted"
    fake.write_text(f"#!/bin/sh\necho '{said}' >&2\nexit 125\n")
    fake.chmod(0o755)
    sock = tmp_path / "run" / "podman" / "podman.sock"
    runtime = rundir.RuntimeDir(str(tmp_path / "run"), "fallback")
    service = PodmanService(autostart.service_argv(str(fake), str(sock), [OVERLAY_FLAG]), dict(os.environ), runtime)

    async def scenario() -> str:
        try:
            await service.start()
        except AutostartError as exc:
            return str(exc)
        finally:
            await service.stop()
        return "started"

    text = asyncio.run(scenario())
    assert f"exited with status 125: {said}" in text
    assert "Fix: install fuse-overlayfs" in text
    assert (sock.parent.stat().st_mode & 0o777) == 0o700


def test_discovery_waits_only_for_a_socket_that_may_come_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's socket (permission denied) never answers: podmand starts its own at once
    instead of waiting podman_wait; a refused connection (a service restarting) is retried."""
    rounds: list[str] = []

    def probing(problem: str) -> Callable[[discovery.Candidate], Awaitable[str]]:
        async def check(candidate: discovery.Candidate) -> str:
            rounds.append(candidate.path)
            return problem
        return check

    monkeypatch.setattr(discovery, "check", probing("permission denied (connect)"))
    with pytest.raises(discovery.NoPodmanSocket):
        asyncio.run(discovery.discover("/x.sock", 30.0))
    assert rounds == ["/x.sock"]
    rounds.clear()
    monkeypatch.setattr(discovery, "check", probing("connection refused (is the Podman service running?)"))
    with pytest.raises(discovery.NoPodmanSocket):
        asyncio.run(discovery.discover("/x.sock", 0.6))
    assert len(rounds) >= 2


async def _until(predicate: Callable[[], object], what: str, timeout: float = 15.0) -> None:
    """Wait on a condition inside the event loop, with a deadline."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_every_spawn_checks_the_fallback_runtime_dir_again(tmp_path: Path) -> None:
    """/tmp/podman-run-<uid> may be cleaned away or replaced by another user's symlink while podmand
    runs: a (re)start recreates it 0700, and refuses a symlink instead of following it."""
    runtime = rundir.RuntimeDir(str(tmp_path / "podman-run-x"), "fallback")
    service = PodmanService(["sleep", "600"], dict(os.environ), runtime)
    sock = Path(service.socket_path)

    async def spawn_and_stop() -> None:
        await service.spawn()
        await service.stop()

    asyncio.run(spawn_and_stop())
    assert sock.parent.is_dir() and (sock.parent.stat().st_mode & 0o777) == 0o700
    shutil.rmtree(runtime.path)  # cleaned away (systemd-tmpfiles, a reboot of /tmp)
    asyncio.run(spawn_and_stop())
    assert (os.stat(runtime.path).st_mode & 0o777) == 0o700
    shutil.rmtree(runtime.path)
    target = tmp_path / "planted"
    target.mkdir()
    os.symlink(target, runtime.path)
    with pytest.raises(AutostartError, match="is a symlink"):
        asyncio.run(service.spawn())
    assert not (target / "podman").exists()
    os.unlink(runtime.path)
    os.mkdir(runtime.path, 0o700)
    os.symlink(target, sock.parent)  # the podman/ directory itself replaced by a symlink
    with pytest.raises(AutostartError, match="podman"):
        asyncio.run(service.spawn())
    assert list(target.iterdir()) == []


def test_a_reaped_service_group_is_not_signalled_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its group is killed once, right after the exit is seen; stop() during the restart backoff
    must not signal that pid again (it may belong to another process group by then)."""
    monkeypatch.setattr(podmanservice, "MAX_BACKOFF", 600.0)
    signalled: list[tuple[int, int]] = []
    real_killpg = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        signalled.append((pgid, sig))
        real_killpg(pgid, sig)

    monkeypatch.setattr(os, "killpg", killpg)
    runtime = rundir.RuntimeDir(str(tmp_path), "XDG_RUNTIME_DIR")

    async def scenario() -> int:
        service = PodmanService(["sh", "-c", "exit 3"], dict(os.environ), runtime)
        proc = await service.spawn()
        service.supervise()
        await _until(lambda: proc.returncode is not None and signalled, "the exit to be handled")
        await service.stop()  # during the backoff (1 s)
        return proc.pid

    pid = asyncio.run(scenario())
    assert signalled == [(pid, signal.SIGKILL)]


def test_cancelled_during_start_stops_the_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while waiting for the service to answer must not leave it running."""
    runtime = rundir.RuntimeDir(str(tmp_path), "XDG_RUNTIME_DIR")
    service = PodmanService(["sleep", "600"], dict(os.environ), runtime)

    async def nothing(explicit: str, wait: float) -> str:
        raise discovery.NoPodmanSocket([])

    monkeypatch.setattr(autostart, "discover", nothing)
    monkeypatch.setattr(autostart, "prepare", lambda settings: service)

    async def scenario() -> None:
        async def use() -> None:
            async with autostart.podman_api(Settings()):
                pass

        task = asyncio.create_task(use())
        await _until(lambda: service.proc is not None, "the service to be spawned")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(scenario())
        assert service.proc is not None and service.proc.returncode is not None
    finally:
        if service.proc is not None and service.proc.returncode is None:
            os.killpg(service.proc.pid, signal.SIGKILL)  # the one this test started


def test_the_started_service_runs_without_podmans_own_healthcheck_timers(tmp_path: Path) -> None:
    """What Podman reads (libpod's disableHealthCheckSystemd) is in the environment the service runs with."""
    seen = tmp_path / "env"
    fake = tmp_path / "podman"
    fake.write_text(f"#!/bin/sh\nenv > {seen}\nexit 1\n")
    fake.chmod(0o755)
    runtime = rundir.RuntimeDir(str(tmp_path / "run"), "fallback")
    argv = autostart.service_argv(str(fake), str(tmp_path / "run" / "podman" / "podman.sock"), [])
    env = autostart.service_env({"PATH": os.defpath}, runtime.path, podmand_probes=True)
    service = PodmanService(argv, env, runtime)

    async def scenario() -> None:
        try:
            with pytest.raises(AutostartError, match="exited with status 1"):
                await service.start()
        finally:
            await service.stop()

    asyncio.run(scenario())
    assert "DISABLE_HC_SYSTEMD=true" in seen.read_text().splitlines()
