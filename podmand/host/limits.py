"""The descriptor limit: raised at start to what the host allows.

Every watch stream, spliced driver connection, libpod connection and
per-container ``/wait`` holds descriptors; the usual soft limit of 1024 is far
below the hard limit, and nothing is gained by running into it.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("podmand")


def nofile_target(soft: int, hard: int, nr_open: int) -> int:
    """The soft limit to ask for: the hard limit, or the kernel's per-process cap when
    the hard limit is unlimited (RLIMIT_NOFILE cannot be set to infinity); never lower."""
    target = nr_open if hard == resource.RLIM_INFINITY else hard
    return max(soft, target) if soft != resource.RLIM_INFINITY else soft


def nr_open() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 20  # the kernel's default


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; log and return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = nofile_target(soft, hard, nr_open())
    why = ""
    if target != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            target, why = soft, f" (raising it failed: {exc})"
    was = f" (was {soft})" if target != soft else ""
    log.info("descriptor limit (RLIMIT_NOFILE): soft %s%s, hard %s%s", _shown(target), was, _shown(hard), why)
    return target


def _shown(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)
