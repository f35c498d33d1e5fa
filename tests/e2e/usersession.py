"""The test user's systemd session, driven as that user: ``systemctl --user``, their journal,
files in their home. Only a systemd host has one (the VM lane, tests/setup-vm.sh); the e2e
tests restart the user's Podman through it there (``conftest.restart_rootless_podman``)."""

from __future__ import annotations

import pwd
import shutil
import subprocess
from pathlib import Path


class UserSession:
    """The test user's systemd manager, driven as that user (``systemctl --user``)."""

    def __init__(self, user: str) -> None:
        entry = pwd.getpwnam(user)
        self.user, self.uid, self.home = user, entry.pw_uid, Path(entry.pw_dir)
        self.runtime = Path(f"/run/user/{self.uid}")

    def run(self, *args: str, check: bool = True, timeout: float = 300,
            **extra: str) -> subprocess.CompletedProcess[str]:
        env = [f"HOME={self.home}", "PATH=/usr/bin:/bin", f"XDG_RUNTIME_DIR={self.runtime}",
               f"DBUS_SESSION_BUS_ADDRESS=unix:path={self.runtime}/bus", *(f"{k}={v}" for k, v in extra.items())]
        done = subprocess.run(["runuser", "-u", self.user, "--", "env", "-i", *env, *args],
                              capture_output=True, text=True, timeout=timeout, cwd="/")
        if check and done.returncode:
            raise AssertionError(f"{' '.join(args)}: exit {done.returncode}: {done.stdout}{done.stderr}")
        return done

    def systemctl(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", "--user", *args, check=check, timeout=timeout)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.systemctl("show", unit, *(f"--property={p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, unit: str) -> str:
        return self.run("journalctl", "--user", "-u", unit, "--no-pager", "-o", "cat", check=False).stdout

    def install(self, text: str, relative: str) -> Path:
        """Write a file the user owns under their home, its directories too."""
        path = self.home / relative
        for parent in reversed(path.relative_to(self.home).parents):
            d = self.home / parent
            if not d.exists():
                d.mkdir(mode=0o755)
                shutil.chown(d, self.user, self.user)
        path.write_text(text)
        shutil.chown(path, self.user, self.user)
        return path
