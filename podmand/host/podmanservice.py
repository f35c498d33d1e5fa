"""One ``podman system service`` as podmand's supervised child: started, restarted, stopped.
Its own module because that is process supervision, the same whatever command and
environment autostart.py chose.

The child is spawned bound to podmand (it dies with podmand, PR_SET_PDEATHSIG), in a
session of its own, with stderr on a pipe of podmand's; it must answer /_ping to count
as started; it is restarted with backoff if it exits while podmand serves (containers
survive: conmon is independent of it); and it is stopped with SIGTERM, then SIGKILL,
at podmand's exit.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import stat
import sys
import time

from .. import logs
from ..config import rundir
from ..errors import StartupError
from .discovery import answers, podman_socket_in
from .storageguard import OVERLAY_FLAG

log = logging.getLogger("podmand")
READY_TIMEOUT = 30.0  # seconds for a started service to answer /_ping (a first start creates the store)
STOP_TIMEOUT = 10.0  # seconds from SIGTERM to SIGKILL at podmand's exit
MAX_BACKOFF = 30.0
STABLE_AFTER = 60.0  # a service that ran this long before exiting restarts without delay growth
_PR_SET_PDEATHSIG = 1


class AutostartError(StartupError):
    """Podman's API service could not be started; the message says why and how to fix it."""


# Run in the child before it becomes podman: SIGTERM when podmand dies, however it dies
# (PR_SET_PDEATHSIG survives exec), and no start at all if podmand is already gone. A
# separate interpreter rather than preexec_fn: forking a process with gRPC's threads
# running is unsafe, while subprocess without preexec_fn spawns without a fork.
_BIND_TO_PARENT = (
    "import ctypes, os, sys\n"
    f"if ctypes.CDLL(None).prctl({_PR_SET_PDEATHSIG}, {int(signal.SIGTERM)}, 0, 0, 0) != 0 "
    "or os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def bound_to_parent(argv: list[str], parent: int) -> list[str]:
    """``argv`` run so that it dies with ``parent`` (the process spawning it)."""
    return [sys.executable, "-I", "-S", "-c", _BIND_TO_PARENT, str(parent), *argv]


class PodmanService:
    """One ``podman system service``: started, supervised, stopped.

    Rootless podman runs as two processes (the one started, and its child in the user
    namespace), so signals go to the process group (its own session), and stderr is a
    pipe of podmand's own: a child left behind holding it must not delay noticing an exit.
    Containers are unaffected: conmon runs in a session of its own."""

    def __init__(self, argv: list[str], env: dict[str, str], runtime: rundir.RuntimeDir) -> None:
        self.argv, self.env, self.runtime = argv, env, runtime
        self.socket_path = podman_socket_in(runtime)
        self.proc: asyncio.subprocess.Process | None = None
        self._group_killed = False  # the exited leader's group was killed: its pid is not ours any more
        self.stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._stopping = False
        self._reader: asyncio.Task[None] | None = None
        self._monitor: asyncio.Task[None] | None = None

    @property
    def overlay(self) -> bool:
        return OVERLAY_FLAG in self.argv

    async def start(self) -> None:
        """Spawn and wait until it answers /_ping; AutostartError (with its stderr) otherwise."""
        proc = await self.spawn()
        if await answers(self.socket_path, READY_TIMEOUT, lambda: proc.returncode is None):
            return
        if proc.returncode is None:
            await self._terminate(proc)
            raise AutostartError(self._failure(f"did not answer on {self.socket_path} within {READY_TIMEOUT:.0f} s"))
        self._kill_group_after_exit()
        await self._drain_stderr()
        raise AutostartError(self._failure(f"exited with status {proc.returncode}"))

    def _socket_dir(self) -> None:
        """The runtime directory checked on every (re)start (a /tmp one may have been cleaned
        away or replaced by another user's since), and ``podman/`` in it: ours, 0700, no symlink."""
        try:
            rundir.ensure(self.runtime)
        except rundir.RuntimeDirError as exc:
            raise AutostartError(str(exc)) from None
        path = os.path.dirname(self.socket_path)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise AutostartError(f"cannot create {path} for Podman's socket: {exc.strerror}") from None
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise AutostartError(f"{path} is a symlink, not a directory or not this user's; refusing "
                                 "to put Podman's socket there. Remove it")

    async def spawn(self) -> asyncio.subprocess.Process:
        self._socket_dir()
        await self._stop_reader()
        self.stderr.clear()
        read_end, write_end = os.pipe()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *bound_to_parent(self.argv, os.getpid()),
                env=self.env,
                cwd="/",  # rootless Podman returns to the caller's directory, which may be private
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=write_end,
                start_new_session=True,  # its own group; a terminal's Ctrl-C reaches podmand, which stops it
            )
            self._group_killed = False
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        self._reader = asyncio.create_task(self._read_stderr(read_end))
        return self.proc

    def _signal(self, sig: int) -> None:
        """To the service's process group, unless its leader was reaped and the group killed
        already: after that its pid may be reused by an unrelated process (group)."""
        if self.proc is not None and not self._group_killed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def _kill_group_after_exit(self) -> None:
        """Kill whatever the exited leader left in its group (its child in the user namespace may
        outlive it), once, right after the exit is seen: the group id stays reserved while members live."""
        self._signal(signal.SIGKILL)
        self._group_killed = True

    def _failure(self, what: str) -> str:
        said = " | ".join(self.stderr) or "nothing on stderr"
        text = f"podmand started Podman's API service ({' '.join(self.argv)}), but it {what}: {said}"
        if self.overlay:
            text += (
                ". podmand asked for the overlay storage driver because this user has no Podman store yet and "
                "no storage.conf names a driver (Podman would silently make a slow vfs store); native overlay "
                "needs Linux 5.13 or newer. Fix: install fuse-overlayfs and write ~/.config/containers/storage.conf "
                'with [storage] driver = "overlay" and [storage.options.overlay] mount_program = '
                '"/usr/bin/fuse-overlayfs", or accept vfs with driver = "vfs"'
            )
        return logs.redact(text)

    async def _read_stderr(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
        )
        try:
            async for raw in reader:
                line = logs.redact(raw.decode(errors="replace").rstrip())
                if line:
                    self.stderr.append(line)
                    log.debug("podman service: %s", line)
        finally:
            transport.close()

    async def _drain_stderr(self) -> None:
        """After an exit: its last lines, bounded (a process it left behind may hold the pipe open)."""
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), 2.0)

    async def _stop_reader(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    def supervise(self) -> None:
        self._monitor = asyncio.create_task(self._supervise(), name="podman-service")

    async def _supervise(self) -> None:
        """Restart the service whenever it exits while podmand serves, with backoff."""
        delay = 1.0
        while True:
            assert self.proc is not None
            started = time.monotonic()
            code = await self.proc.wait()
            self._kill_group_after_exit()
            if self._stopping:
                return
            if time.monotonic() - started >= STABLE_AFTER:
                delay = 1.0
            await self._drain_stderr()
            log.warning(
                "Podman's API service (pid %d) exited with status %s: %s; restarting it in %.0f s",
                self.proc.pid, code, " | ".join(self.stderr) or "nothing on stderr", delay,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF)
            try:
                await self.start()
            except (AutostartError, OSError) as exc:
                log.warning("restarting Podman's API service failed: %s", exc)
                continue
            log.info("restarted Podman's API service (pid %d) at %s", self.proc.pid, self.socket_path)

    async def _terminate(self, proc: asyncio.subprocess.Process) -> str:
        """SIGTERM to its group, wait bounded, then SIGKILL; says how it ended."""
        if proc.returncode is not None:
            self._kill_group_after_exit()  # a no-op when that was done already
            return f"had already exited with status {proc.returncode}"
        self._signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
            how = "stopped"
        except TimeoutError:
            self._signal(signal.SIGKILL)  # the leader still lives: its group is still its own
            await proc.wait()
            how = f"killed (no exit within {STOP_TIMEOUT:.0f} s of SIGTERM)"
        self._kill_group_after_exit()  # the rest of its group, if anything outlived it
        return how

    async def stop(self) -> None:
        self._stopping = True
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        if self.proc is None:
            return
        how = await self._terminate(self.proc)
        await self._stop_reader()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)  # ours: podman leaves it behind when it is killed
        log.info("Podman's API service (pid %d) %s", self.proc.pid, how)
