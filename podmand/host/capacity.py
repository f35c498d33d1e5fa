"""How many sandboxes this host can hold, figure by figure: pure arithmetic over
facts read from /etc/subuid, /proc/sys/kernel/keys and the descriptor limit.

``doctor`` reports each figure.
"""

from __future__ import annotations

import os
import pwd
import resource
from dataclasses import dataclass
from pathlib import Path

from ..sandbox import usernamespace

# runc joins each container to a new session keyring named "_ses.<container id>": one
# key of 70 quota bytes (measured: /proc/key-users), charged to the container's root.
KEY_BYTES_PER_SANDBOX = 70
KEYS_DIR = "/proc/sys/kernel/keys"
DESCRIPTOR_RESERVE = 256  # watch streams, RPCs, pulls: descriptors no sandbox holds


def parse_subids(text: str, name: str, uid: int | None) -> int:
    """Total count of the ``name:start:count`` lines naming the user (by name or uid)."""
    keys = {name} | ({str(uid)} if uid is not None else set())
    total = 0
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[0] in keys and parts[2].isdigit():
            total += int(parts[2])
    return total


def subid_sandboxes(subids: int, userns: str) -> int | None:
    """userns=auto sandboxes that fit in ``subids`` subordinate ids (each takes the size
    podmand asks for); None for other modes, which take no range of their own."""
    base, _, params = userns.partition(":")
    if base != "auto":
        return None
    return subids // usernamespace.auto_size(params)


@dataclass(frozen=True)
class KeyQuota:
    """The kernel's key quota of one user (``/proc/sys/kernel/keys``)."""

    maxkeys: int
    maxbytes: int


def key_sandboxes(quota: KeyQuota, userns: str) -> int | None:
    """Sandboxes one user's key quota allows; None when each sandbox's root is a host uid
    of its own (userns=auto), so each has a quota to itself."""
    if userns.partition(":")[0] == "auto":
        return None
    return min(quota.maxkeys, quota.maxbytes // KEY_BYTES_PER_SANDBOX)


def descriptor_sandboxes(soft: int, exit_watch: str) -> int | None:
    """Sandboxes the descriptor limit allows: one each only when exits are watched with
    a libpod /wait per container; None when sandboxes hold none."""
    if exit_watch != "wait" or soft == resource.RLIM_INFINITY:
        return None
    return max(0, soft - DESCRIPTOR_RESERVE)


def overall(figures: list[int | None]) -> int | None:
    """The host's capacity: the smallest bound (None: nothing bounds it)."""
    bounds = [f for f in figures if f is not None]
    return min(bounds) if bounds else None


# ---------------------------------------------------------------- facts


def subid_user(uid: int) -> tuple[str, int | None]:
    """Whose subordinate ranges Podman maps from: the user's own rootless, the
    ``containers`` user's rootful (userns=auto)."""
    if uid == 0:
        return "containers", None
    try:
        return pwd.getpwuid(uid).pw_name, uid
    except KeyError:
        return str(uid), uid


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def host_subids(uid: int) -> int:
    """Subordinate ids this host's files give the user Podman maps from (fewer of uids
    and gids; 0 when the files are missing, as in a container that talks to the host's Podman)."""
    name, owner = subid_user(uid)
    return min(parse_subids(_read(f"/etc/sub{kind}"), name, owner) for kind in ("uid", "gid"))


def key_quota(root: bool) -> KeyQuota | None:
    """The key quota of root or of any other user; None when the kernel does not say."""
    prefix = "root_" if root else ""
    try:
        return KeyQuota(*(int(_read(os.path.join(KEYS_DIR, prefix + f))) for f in ("maxkeys", "maxbytes")))
    except ValueError:
        return None
