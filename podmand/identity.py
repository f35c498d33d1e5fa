"""Workload identity: which uid, gid and supplementary groups the sandbox's workload runs as.

The identity is resolved from the pinned image's own ``/etc/passwd`` and
``/etc/group`` (read from the image, never by running it), with the sandbox
policy's user/group overriding the image's ``Config.User``. Doing it up front
lets podmand refuse a root workload or an unknown user with FAILED_PRECONDITION
before anything starts, and hand the supervisor numbers instead of names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import FailedPrecondition

__all__ = ["DEFAULT_GID", "DEFAULT_UID", "Account", "Group", "Resolved", "parse_group", "parse_passwd", "resolve"]

DEFAULT_UID = 1000
DEFAULT_GID = 1000

_NUMBER_RE = re.compile(r"[0-9]+")
_ID_MAX = 2**32 - 2  # (uid_t)-1 is reserved


@dataclass(frozen=True)
class Account:
    """One ``/etc/passwd`` entry."""

    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class Group:
    """One ``/etc/group`` entry."""

    name: str
    gid: int
    members: tuple[str, ...]


@dataclass(frozen=True)
class Resolved:
    """The resolved identity; ``source`` is default/image/policy, ``digest`` the image it came from."""

    uid: int
    gid: int
    supplementary: tuple[int, ...]
    source: str
    digest: str


def _number(text: str) -> int | None:
    """A decimal id, or None when ``text`` is not one."""
    return int(text) if _NUMBER_RE.fullmatch(text) else None


def _lines(text: str) -> list[list[str]]:
    """Colon-split fields of the non-blank, non-comment lines."""
    return [line.split(":") for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def parse_passwd(text: str) -> list[Account]:
    """Parse ``/etc/passwd`` text; malformed lines are skipped."""
    accounts = []
    for fields in _lines(text):
        if len(fields) < 4 or not fields[0]:
            continue
        uid, gid = _number(fields[2]), _number(fields[3])
        if uid is None or gid is None:
            continue
        accounts.append(Account(fields[0], uid, gid))
    return accounts


def parse_group(text: str) -> list[Group]:
    """Parse ``/etc/group`` text; malformed lines are skipped."""
    groups = []
    for fields in _lines(text):
        if len(fields) < 3 or not fields[0]:
            continue
        gid = _number(fields[2])
        if gid is None:
            continue
        members = tuple(m.strip() for m in fields[3].split(",") if m.strip()) if len(fields) > 3 else ()
        groups.append(Group(fields[0], gid, members))
    return groups


def _not_root(value: int, what: str) -> None:
    """Refuse id 0, naming where it came from."""
    if value == 0:
        raise FailedPrecondition(f"workload identity: must not be root (uid or gid 0): {what} resolves to 0")


def _in_range(value: int, what: str) -> None:
    if value > _ID_MAX:
        raise FailedPrecondition(f"workload identity: {what} is out of range")


def resolve(user: str, group: str, image_user: str, passwd: str, group_file: str, digest: str) -> Resolved:
    """Resolve the workload identity; requested ``user``/``group`` override the image's ``Config.User``."""
    req_user, req_group = user.strip(), group.strip()
    img_user, _, img_group = image_user.strip().partition(":")
    img_user, img_group = img_user.strip(), img_group.strip()
    if not digest:
        raise FailedPrecondition("workload identity: the image digest is empty")

    name = req_user or img_user
    grp = req_group or img_group
    if not name and not grp:
        return Resolved(DEFAULT_UID, DEFAULT_GID, (), "default", digest)
    source = "policy" if (req_user or req_group) else "image"
    user_origin = f"{'policy' if req_user else 'image'} user {name!r}"
    group_origin = f"{'policy' if req_group else 'image'} group {grp!r}"
    if not name:
        raise FailedPrecondition(f"workload identity: {group_origin} is set without a user; configure a workload user")

    numeric_user = _number(name)
    account = next((a for a in parse_passwd(passwd) if a.name == name or a.uid == numeric_user), None)
    if numeric_user is not None:
        uid = numeric_user
    elif account is not None:
        uid = account.uid
    else:
        raise FailedPrecondition(
            f"workload identity: user {name!r} is not in the image's /etc/passwd; "
            "configure a non-root workload user present in the pinned image"
        )
    _in_range(uid, user_origin)
    _not_root(uid, user_origin)

    groups = parse_group(group_file)
    if not grp:
        if account is None:
            raise FailedPrecondition(
                f"workload identity: user {name!r} has no entry in the image's /etc/passwd; "
                "configure an explicit workload group for a uid without an image passwd entry"
            )
        gid = account.gid
        gid_origin = f"primary group of {user_origin}"
    else:
        numeric_group = _number(grp)
        if numeric_group is not None:
            gid = numeric_group
        else:
            found = next((g for g in groups if g.name == grp), None)
            if found is None:
                raise FailedPrecondition(f"workload identity: group {grp!r} is not in the image's /etc/group")
            gid = found.gid
        gid_origin = group_origin
    _in_range(gid, gid_origin)
    _not_root(gid, gid_origin)

    supplementary: set[int] = set()
    if account is not None:
        for g in groups:
            if account.name in g.members and g.gid != gid:
                _not_root(g.gid, f"supplementary group {g.name!r} of user {account.name!r}")
                supplementary.add(g.gid)
    return Resolved(uid, gid, tuple(sorted(supplementary)), source, digest)
