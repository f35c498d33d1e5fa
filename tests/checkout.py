"""A copy of the checkout as a user would have it: tracked and new files plus the git
metadata, none of what test runs leave behind (caches, build products, hypothesis's
root-only database), so an unprivileged user can build from it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def copy_checkout(dest: Path, *, with_git: bool = True) -> Path:
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    if with_git:  # the build takes its timestamp from the last commit
        if (ROOT / ".git").is_dir():
            shutil.copytree(ROOT / ".git", dest / ".git", symlinks=True)
        else:  # a worktree's .git file names its repository, which the copy then reads
            shutil.copy2(ROOT / ".git", dest / ".git")
    return dest
