"""A throwaway unprivileged user, as on a stock host: no Podman service, no
XDG_RUNTIME_DIR, no /run/user/<uid>, no storage.conf, a subordinate id range of
its own. Needs root. At the end every process of that user (and of its
subordinate ids: its containers) is killed, by pid, and the user removed: the
user did not exist before, so everything it ran was started by the test.

    with fresh_user() as user:
        user.run(["podman", "info"])            # CompletedProcess, text, as that user
        proc = user.popen([...], env={"K": "v"})  # extra environment on top of user.env()
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.wait import wait_until

SUBID_FLOOR = 100000
SUBID_CEILING = 2**31 - 1  # rootful userns=auto's "containers" range starts here


def free_subid_start(files: list[str], count: int) -> int:
    """The lowest start >= SUBID_FLOOR of ``count`` ids that overlaps no range in the given
    /etc/subuid-style texts."""
    ranges = []
    for text in files:
        for line in text.splitlines():
            parts = line.strip().split(":")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                ranges.append((int(parts[1]), int(parts[1]) + int(parts[2])))
    start = SUBID_FLOOR
    for low, high in sorted(ranges):
        if start + count <= low:
            break
        start = max(start, high)
    if start + count > SUBID_CEILING:
        raise RuntimeError("no free subordinate id range below 2^31")
    return start


@dataclass
class FreshUser:
    name: str
    uid: int
    gid: int
    home: str
    subids: range

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """A login-less environment: no XDG_RUNTIME_DIR, as under su/runuser/cron on a host without logind."""
        return {
            "HOME": self.home,
            "USER": self.name,
            "LOGNAME": self.name,
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            **(extra or {}),
        }

    def command(self, cmd: list[str], env: dict[str, str] | None = None) -> list[str]:
        return ["runuser", "-u", self.name, "--", "env", "-i", *[f"{k}={v}" for k, v in self.env(env).items()], *cmd]

    def run(self, cmd: list[str], env: dict[str, str] | None = None, timeout: float = 120.0,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        kwargs.setdefault("cwd", self.home)
        return subprocess.run(self.command(cmd, env), capture_output=True, text=True, timeout=timeout, **kwargs)

    def popen(self, cmd: list[str], env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[bytes]:
        kwargs.setdefault("cwd", self.home)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.command(cmd, env), **kwargs)

    def pids(self) -> list[int]:
        """Processes running as this user or one of its subordinate ids (its containers)."""
        out = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    owner = entry.stat().st_uid
                    if owner == self.uid or owner in self.subids:
                        out.append(int(entry.name))
        return out

    def pids_of(self, *words: str) -> list[int]:
        """This user's processes whose command line contains every one of ``words``."""
        out = []
        for pid in self.pids():
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if all(w in cmdline for w in words):
                    out.append(pid)
        return out


def _remove(user: FreshUser) -> None:
    def alive() -> list[int]:
        left = user.pids()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return left

    wait_until(lambda: not alive(), 30.0, f"the processes of {user.name} to end")
    subprocess.run(["userdel", "-r", user.name], capture_output=True)
    _remove_runtime_dirs(user.uid)


def _remove_runtime_dirs(uid: int) -> None:
    """Runtime directories named by ``uid``: at the start, left by an earlier user with that
    uid (uids are reused once a user is deleted); at the end, this user's."""
    tmp = os.environ.get("TMPDIR") or "/tmp"
    for leftover in (f"/run/user/{uid}", f"{tmp}/podman-run-{uid}", f"{tmp}/containers-user-{uid}",
                     f"{tmp}/storage-run-{uid}"):
        shutil.rmtree(leftover, ignore_errors=True)


@contextlib.contextmanager
def fresh_user(prefix: str = "pfresh", subids: int = 65536) -> Iterator[FreshUser]:
    if os.geteuid() != 0:
        raise RuntimeError("fresh_user needs root: it creates and removes a user")
    name = f"{prefix}{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "-m", "-K", "SUB_UID_COUNT=0", "-K", "SUB_GID_COUNT=0", name],
                   check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    user = FreshUser(name, entry.pw_uid, entry.pw_gid, entry.pw_dir, range(0))
    try:
        _remove_runtime_dirs(user.uid)
        if subids:  # 0: a user without a range (what doctor's subuids check flags)
            files = [Path(f).read_text() if os.path.exists(f) else "" for f in ("/etc/subuid", "/etc/subgid")]
            start = free_subid_start(files, subids)
            end = start + subids - 1
            subprocess.run(["usermod", "--add-subuids", f"{start}-{end}", "--add-subgids", f"{start}-{end}", name],
                           check=True, capture_output=True)
            user.subids = range(start, end + 1)
        yield user
    finally:
        _remove(user)
