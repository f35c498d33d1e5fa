"""SELinux: whether podmand labels the bind mounts it makes.

On an SELinux host a bind-mounted file keeps its host label, which a container's
process may not read. Podman relabels a bind source when the mount carries ``z``
(a label every container may share) or ``Z`` (a label private to one container),
and ignores both where SELinux is off, so forcing labels on is harmless.
"""

from __future__ import annotations

import os

SELINUXFS = "/sys/fs/selinux"
SHARED = "z"  # the supervisor binary: one file for every sandbox
PRIVATE = "Z"  # per-sandbox files: token, credential, TLS copies
SETTING = "selinux (--selinux / PODMAND_SELINUX)"


def detect(podman_says: bool | None, selinuxfs: str = SELINUXFS) -> tuple[bool, str]:
    """(enabled, how it was found out). Podman's own view comes first: podmand may run
    in a container, where the host's selinuxfs is not mounted."""
    if podman_says is not None:
        return podman_says, "Podman's /info"
    return os.path.isdir(selinuxfs), selinuxfs


def relabel(setting: str, enabled: bool) -> bool:
    """Whether podmand adds ``z``/``Z`` to its own bind mounts."""
    return setting == "on" or (setting == "auto" and enabled)
