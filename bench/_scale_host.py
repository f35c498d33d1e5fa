"""Host side of bench/scale.py: the limits N sandboxes need (set, then restored)
and the Podman service's CPU time read from /proc.

Run as root.  Every change is undone by :meth:`HostLimits.restore`, which is safe to
call twice; scale.py calls it from ``finally`` and from ``atexit``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBID_FILES = (Path("/etc/subuid"), Path("/etc/subgid"))
AUTO_SIZE = 1024  # ids per userns=auto container: podmand/sandbox/usernamespace.py AUTO_USERNS_SIZE
MAXKEYS = Path("/proc/sys/kernel/keys/maxkeys")
MAXBYTES = Path("/proc/sys/kernel/keys/maxbytes")
INOTIFY = Path("/proc/sys/fs/inotify/max_user_instances")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def rootless_target(args: argparse.Namespace, why: str) -> int:
    """The rootless user's uid, with ``args.podman`` defaulted to its Podman socket
    (``PODMAN_ROOTLESS_SOCK``, else the user's runtime directory); a bench run by anyone
    but root stops here, saying ``why`` it needs root."""
    if os.geteuid() != 0:
        raise SystemExit(f"run as root ({why})")
    uid = pwd.getpwnam(args.user).pw_uid
    args.podman = args.podman or os.environ.get("PODMAN_ROOTLESS_SOCK") or f"/run/user/{uid}/podman/podman.sock"
    return uid



def subids_of(user: str, uid: int, text: str) -> int:
    """Subordinate ids ``user`` owns in one /etc/sub?id file."""
    total = 0
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[0] in (user, str(uid)):
            total += int(parts[2])
    return total


def first_free(texts: list[str]) -> int:
    """The first id after every range below the rootful ``containers`` range (as tests/setup-podman.sh)."""
    top = 100000
    for text in texts:
        for line in text.splitlines():
            parts = line.strip().split(":")
            if len(parts) == 3 and int(parts[1]) < 2147483647:
                top = max(top, int(parts[1]) + int(parts[2]))
    return top


def as_user(user: str, script: str) -> subprocess.CompletedProcess[str]:
    """A shell snippet as the rootless user, with the environment tests/setup-podman.sh gives it."""
    pw = pwd.getpwnam(user)
    env = [
        f"HOME={pw.pw_dir}",
        f"USER={user}",
        f"LOGNAME={user}",
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "LANG=C.UTF-8",
        f"XDG_RUNTIME_DIR=/run/user/{pw.pw_uid}",
    ]
    cmd = ["runuser", "-u", user, "--", "env", "-i", *env, "/bin/sh", "-c", f'cd "$HOME" && {script}']
    return subprocess.run(cmd, cwd="/", capture_output=True, text=True, check=False)


def renew_userns(user: str, uid: int, socket: str) -> str:
    """Podman learns of changed sub-id ranges only in a new user namespace: migrate (ends
    the pause process), end every process of the rootless service (once it has made its
    own namespace it is two, and setup-podman.sh records only the outer one, so its
    restart would leave the inner one serving in the old namespace), then let
    tests/setup-podman.sh start and record a new one.  Podman's view of the uid map."""
    pids = setup_service_pids(socket, uid)  # refuse before anything changes
    as_user(user, "podman system migrate")
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{pid}").exists() for pid in pids):
        if time.monotonic() > deadline:
            raise SystemExit(f"the Podman service {pids} did not stop within 60 s")
        time.sleep(0.05)  # no exit notification for a process that is not our child
    setup = ROOT / "tests" / "setup-podman.sh"
    subprocess.run(["bash", str(setup), "restart-rootless"], cwd="/", check=True, capture_output=True)
    return as_user(user, "podman info --format '{{.Host.IDMappings.UIDMap}}'").stdout.strip()


@dataclass
class HostLimits:
    """Sub-ids, key quota and inotify instances for ``n`` sandboxes (ids for ``n + spare``)."""

    user: str
    uid: int
    socket: str
    saved: dict[Path, str] = field(default_factory=dict)
    subids_added: bool = False
    notes: list[str] = field(default_factory=list)

    def _write(self, path: Path, text: str) -> None:
        self.saved.setdefault(path, path.read_text())
        path.write_text(text)

    def _raise(self, path: Path, want: int) -> None:
        have = int(path.read_text().split()[0])
        if have < want:
            self._write(path, f"{want}\n")
            self.notes.append(f"{path} {have} -> {want}")

    def apply(self, n: int, spare: int = 32) -> None:
        texts = [f.read_text() for f in SUBID_FILES]
        need = (n + spare) * AUTO_SIZE
        have = min(subids_of(self.user, self.uid, t) for t in texts)
        if have < need:
            size = -(-(need - have) // 65536) * 65536  # whole 65536 blocks: a 1024 slot never straddles two
            start = first_free(texts)
            for f, text in zip(SUBID_FILES, texts, strict=True):
                sep = "" if text.endswith("\n") or not text else "\n"
                self._write(f, f"{text}{sep}{self.user}:{start}:{size}\n")
            self.subids_added = True
            seen = renew_userns(self.user, self.uid, self.socket)
            self.notes.append(f"subordinate ids of {self.user}: {have} + {self.user}:{start}:{size}; Podman: {seen}")
        keys = 8 * n + 400  # runc's session keyring (and its key) per container, two a sandbox (a pair), with room
        self._raise(MAXKEYS, keys)
        self._raise(MAXBYTES, 100 * keys)
        self._raise(INOTIFY, 1024)

    def restore(self) -> None:
        """Put every file back as it was; a new user namespace if the sub-ids changed."""
        for path, text in self.saved.items():
            path.write_text(text)
        self.saved.clear()
        if self.subids_added:
            self.subids_added = False
            renew_userns(self.user, self.uid, self.socket)


RECORD = Path("/var/lib/podmand-test/rootless.service")  # written by tests/setup-podman.sh


def _starttime(pid: int) -> str:
    return (Path("/proc") / str(pid) / "stat").read_text().rsplit(") ", 1)[1].split()[19]


def _parent(pid: int) -> int:
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(") ", 1)[1].split()[1])


def setup_service_pids(socket: str, uid: int) -> list[int]:
    """The processes of the service on ``socket`` that tests/setup-podman.sh started (its
    recorded PID, checked by start time, and that process's descendants serving the same
    socket): the only service this script may stop.  Anything else: refuse."""
    try:
        pid_text, start, _uid, recorded_socket = RECORD.read_text().split()
        pid = int(pid_text)
        ours = recorded_socket == socket and _starttime(pid) == start
    except (OSError, ValueError, IndexError):
        ours = False
    if not ours:
        raise SystemExit(f"the Podman service on {socket} was not started by tests/setup-podman.sh "
                         f"(no matching {RECORD}): not stopping it; give the sub-ids by hand or use a smaller -n")
    found = []
    for other in service_pids(socket, uid):
        walk = other
        with contextlib.suppress(OSError, ValueError):
            while walk > 1 and walk != pid:
                walk = _parent(walk)
        if walk == pid:
            found.append(other)
    return found


def service_pids(socket: str, uid: int) -> list[int]:
    """The Podman API service serving ``socket``, found afresh (setup-podman.sh may restart
    it): every process of it, as rootless Podman re-executes itself inside its user
    namespace when it creates one (after a migrate), and the child does the work.  Only
    processes whose root is ours: tests/setup-podman5.sh's tree shares the host's pids, and
    its service has the host's user and socket path (run from the tree, the host's 4.3.1
    service must not be counted, nor the other way round)."""
    want = f"unix://{socket}".encode()
    here = os.stat("/")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            root = (entry / "root").stat()
            if (root.st_dev, root.st_ino) != (here.st_dev, here.st_ino):
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"system" in argv and b"service" in argv and want in argv:
            found.append(int(entry.name))
    if not found:
        raise SystemExit(f"no Podman service on {socket}")
    return found


def cpu_seconds(pids: list[int]) -> float:
    """utime+stime of the processes (all threads) plus cutime+cstime of the children they
    reaped (netavark, iptables...).  conmon and runc are not counted: conmon double-forks
    away from the service, and runc is conmon's child."""
    total = 0.0
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        total += sum(int(x) for x in fields[11:15]) / CLK_TCK
    return total


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0
