"""The host's sandbox capacity in ``podmand doctor``: one line per figure that may
bound it, then the capacity itself, the smallest.  Pure, like doctorchecks.py."""

from __future__ import annotations

from dataclasses import dataclass

from ...host import capacity
from ...host.capacity import KeyQuota
from ...sandbox import usernamespace
from .hostchecks import Check, ok, warn

UNBOUNDED = "no bound"


@dataclass(frozen=True)
class CapacityFacts:
    userns: str
    subids: int  # the fewer of subordinate uids and gids Podman maps from
    keys: KeyQuota | None  # the quota a sandbox's key is charged to; None: unknown
    keys_of: str  # whose quota that is ("root", "non-root users")
    nofile: tuple[int, int, int]  # soft, hard, the soft limit serve raises it to
    exit_watch: str


def _count(n: int | None) -> str:
    return UNBOUNDED if n is None else f"{n} sandboxes"


def check_capacity(f: CapacityFacts) -> list[Check]:
    """One check per figure, then ``capacity``: the smallest.  A figure other than the
    subordinate ids that holds the host below them is a WARN with its fix."""
    base, _, params = f.userns.partition(":")
    soft, hard, raised = f.nofile
    figures: dict[str, int | None] = {
        "subordinate ids": capacity.subid_sandboxes(f.subids, f.userns),
        "kernel keys": capacity.key_sandboxes(f.keys, f.userns) if f.keys else None,
        "descriptors": capacity.descriptor_sandboxes(raised, f.exit_watch),
    }
    findings = {
        "subordinate ids": (
            f"{f.subids} subordinate ids, {usernamespace.auto_size(params)} per userns=auto sandbox" if base == "auto"
            else f"userns={base}: sandboxes share one mapping, the ids do not bound them"
        ),
        "kernel keys": (
            "each userns=auto sandbox's root is a host uid of its own, with a key quota of its own"
            if base == "auto"
            else f"unknown: {capacity.KEYS_DIR} cannot be read" if f.keys is None
            else f"{f.keys_of}: maxkeys {f.keys.maxkeys}, maxbytes {f.keys.maxbytes}, shared by every sandbox "
            f"(runc makes a session keyring per container, {capacity.KEY_BYTES_PER_SANDBOX} bytes)"
        ),
        "descriptors": (
            f"soft {soft}, hard {hard}; serve raises the soft limit to {raised}"
            + ("; exit_watch = wait holds one per running sandbox" if f.exit_watch == "wait"
               else f"; exit_watch = {f.exit_watch} holds none per sandbox")
        ),
    }
    fixes = {  # the figures an operator can raise
        "kernel keys": "as root: sysctl -w kernel.keys.maxkeys=<N> kernel.keys.maxbytes=<N*"
        f"{capacity.KEY_BYTES_PER_SANDBOX}> (and in /etc/sysctl.d to keep it), or use userns=auto",
        "descriptors": "raise the hard limit of podmand's service (LimitNOFILE=), or set exit_watch = events",
    }
    total = capacity.overall(list(figures.values()))
    ids = figures["subordinate ids"]
    checks = []
    for name, figure in figures.items():
        line = f"{_count(figure)}: {findings[name]}"
        binding = figure is not None and figure == total and (ids is None or figure < ids) and name in fixes
        checks.append(warn(f"capacity: {name}", line, fixes[name]) if binding else ok(f"capacity: {name}", line))
    bound = [name for name, figure in figures.items() if figure is not None and figure == total]
    overall = f"{_count(total)} at once (bounded by {', '.join(bound) or 'nothing'})"
    if total == 0:
        return [*checks, warn("capacity", overall, "see the 'subuids' finding")]
    return [*checks, ok("capacity", overall)]
