"""Workload identity: the uid, gid and groups the stock supervisor will run the workload as.

podmand hands the supervisor the image's raw ``Config.User`` (its "OCI mode":
``OPENSHELL_OCI_IMAGE_USER`` set, ``OPENSHELL_SANDBOX_UID/GID`` empty) and the
supervisor resolves it against the image's own ``/etc/passwd`` and
``/etc/group``, with the policy's ``run_as_user`` / ``run_as_group`` winning
field by field. This module repeats that resolution, reading the pinned
image's files without running it, so that:

* ``status.resolved_identity`` says what the supervisor will really run;
* a sandbox the supervisor would refuse at start (no ``USER`` and no policy
  user, root, an unknown name, a uid the user namespace cannot map) is refused
  up front with the supervisor's own reason instead of an exited container.

Threat model: the image and the request are the caller's. Nothing here runs
image code, and a resolved id of 0 or membership in gid 0 is never accepted.
The account files are read more leniently than the supervisor reads them
(malformed lines are skipped rather than refused; a numeric uid takes its first
passwd match; no size or symlink limits): such an image passes here and the
supervisor then refuses it at start with its own message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import FailedPrecondition

__all__ = [
    "MAX_ID",
    "Account",
    "Group",
    "Resolved",
    "check_declaration",
    "parse_group",
    "parse_passwd",
    "resolve",
]

MAX_ID = 2**32 - 2  # the supervisor's MAX_SANDBOX_UID; (uid_t)-1 is reserved
_MAX_COMPONENT = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NO_USER = (
    "OCI USER is required because run_as_user is omitted: the image declares no USER; add a non-root USER "
    "to the image, or name both the user and the group in the policy"
)


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
    """The resolved identity; ``source`` is image/policy, ``digest`` the image it came from."""

    uid: int
    gid: int
    supplementary: tuple[int, ...]
    source: str
    digest: str


def _refuse(why: str) -> FailedPrecondition:
    return FailedPrecondition(f"workload identity: {why}")


def _u32(text: str) -> int | None:
    """Rust's ``u32`` parse, as the supervisor applies it: digits, optional leading '+'."""
    digits = text[1:] if text.startswith("+") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = int(digits)
    return value if value <= 2**32 - 1 else None


def _lines(text: str) -> list[list[str]]:
    """Colon-split fields of the non-blank, non-comment lines."""
    return [line.split(":") for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def parse_passwd(text: str) -> list[Account]:
    """Well-formed ``/etc/passwd`` entries (7 fields, numeric ids); others are skipped."""
    accounts = []
    for fields in _lines(text):
        if len(fields) != 7 or not fields[0]:
            continue
        uid, gid = _u32(fields[2]), _u32(fields[3])
        if uid is not None and gid is not None:
            accounts.append(Account(fields[0], uid, gid))
    return accounts


def parse_group(text: str) -> list[Group]:
    """Well-formed ``/etc/group`` entries (4 fields, numeric gid); others are skipped."""
    groups = []
    for fields in _lines(text):
        if len(fields) != 4 or not fields[0]:
            continue
        gid = _u32(fields[2])
        if gid is not None:
            members = tuple(m.strip() for m in fields[3].split(",") if m.strip())
            groups.append(Group(fields[0], gid, members))
    return groups


def _component(kind: str, value: str) -> None:
    if (
        not value
        or len(value.encode()) > _MAX_COMPONENT
        or value != value.strip()
        or _CONTROL.search(value)
        or ":" in value
    ):
        raise _refuse(f"OCI {kind} component {value!r} is malformed")


def _split(decl: str) -> tuple[str, str | None]:
    user, sep, group = decl.partition(":")
    return user, (group if sep else None)


def _check_limit(what: str, value: int, id_limit: int | None) -> None:
    if id_limit is not None and value >= id_limit:
        raise _refuse(
            f"{what} {value} cannot exist in the sandbox's user namespace, which maps ids 0-{id_limit - 1}; "
            "use a smaller id or a larger namespace (userns auto:size=N)"
        )


def check_declaration(policy_user: str, policy_group: str, image_user: str, *, id_limit: int | None = None) -> None:
    """What can be refused from the request and the image's ``Config.User`` alone, before any file is read."""
    for kind, value in (("uid", policy_user), ("gid", policy_group)):
        number = _u32(value)
        if number is not None:
            _check_limit(kind, number, id_limit)
    if policy_user and policy_group:
        return  # the supervisor does not look at the image then
    user, group = _split(image_user)
    for kind, value, chosen in (("uid", user, not policy_user), ("gid", group or "", not policy_group)):
        number = _u32(value)
        if chosen and number is not None:
            _check_limit(kind, number, id_limit)
    # The declaration's user is needed for the uid, or for the primary group
    # when neither the policy nor the declaration names a group.
    if not policy_user or (not policy_group and group is None):
        if not user:
            raise _refuse(_NO_USER)
        _component("user", user)
        if user == "root":
            raise _refuse(f"OCI USER {image_user!r} selects root")
        if _u32(user) == 0:
            raise _refuse(f"OCI USER {image_user!r} selects UID 0")
    if not policy_group and group is not None:
        if group == "":
            raise _refuse(f"OCI USER {image_user!r} has an empty group component")
        _component("group", group)
        if group == "root":
            raise _refuse(f"OCI USER {image_user!r} selects root group")
        if _u32(group) == 0:
            raise _refuse(f"OCI USER {image_user!r} resolves to prohibited GID 0")


def _one(matches: list[Account] | list[Group], path: str) -> Account | Group | None:
    if len(matches) > 1:
        raise _refuse(f"account identity is ambiguous in {path!r}")
    return matches[0] if matches else None


def _account(name: str, accounts: list[Account]) -> Account | None:
    found = _one([a for a in accounts if a.name == name], "/etc/passwd")
    assert found is None or isinstance(found, Account)
    return found


def _group_named(name: str, groups: list[Group]) -> Group | None:
    found = _one([g for g in groups if g.name == name], "/etc/group")
    assert found is None or isinstance(found, Group)
    return found


def _policy_id(kind: str, value: str, lookup: dict[str, int]) -> int:
    """A policy-supplied user or group: a number in [1, MAX_ID] or a name the image knows."""
    number = _u32(value)
    label = "UID" if kind == "user" else "GID"
    if number is not None:
        if not 1 <= number <= MAX_ID:
            raise _refuse(f"process {kind} {label} must be in range [1, {MAX_ID}]")
        return number
    if value not in lookup:
        if value == "sandbox":
            raise _refuse(f"explicit process {kind} 'sandbox' was not found in the image")
        noun = "identity" if kind == "user" else "group identity"
        raise _refuse(
            f"unrecognized sandbox {noun} {value!r}; expected 'sandbox' or a numeric {label} in range [1, {MAX_ID}]"
        )
    if lookup[value] == 0:
        raise _refuse(f"explicit process {kind} {value!r} resolves to prohibited id 0")
    return lookup[value]


def _oci_user(user: str, decl: str, accounts: list[Account]) -> tuple[int, int | None]:
    """The declaration's user: (uid, primary gid from /etc/passwd if known)."""
    if not user:
        raise _refuse(_NO_USER)
    numeric = _u32(user)
    if numeric is not None:
        entry = next((a for a in accounts if a.uid == numeric), None)
        return numeric, entry.gid if entry else None
    account = _account(user, accounts)
    if account is None:
        raise _refuse(f"OCI USER name {user!r} was not found in /etc/passwd")
    if account.uid == 0:
        raise _refuse(f"OCI USER {decl!r} resolves to prohibited UID 0")
    return account.uid, account.gid


def _groups_of(name: str, gid: int, groups: list[Group]) -> tuple[int, ...]:
    """What the supervisor gives a named user: its gid plus every /etc/group membership."""
    out = {gid}
    for g in groups:
        if name in g.members:
            if g.gid == 0:
                raise _refuse(f"OCI user {name!r} is a member of prohibited GID 0")
            out.add(g.gid)
    return tuple(sorted(out))


def resolve(
    policy_user: str,
    policy_group: str,
    image_user: str,
    passwd: str,
    group_file: str,
    digest: str,
    *,
    id_limit: int | None = None,
) -> Resolved:
    """The identity the supervisor's OCI mode selects, field by field as it does:
    the policy's user and group win; an omitted group comes from the declaration's
    group, else from the *declaration user's* primary group (so an image without
    USER needs both policy fields). Named users get their gid and /etc/group
    memberships as supplementary groups; numeric users get none.

    ``id_limit``: ids the sandbox's user namespace can map are ``< id_limit``
    (None: unknown); the supervisor's setuid to anything else fails."""
    policy_user, policy_group = policy_user.strip(), policy_group.strip()
    if not digest:
        raise _refuse("the image digest is empty")
    check_declaration(policy_user, policy_group, image_user, id_limit=id_limit)
    accounts, groups = parse_passwd(passwd), parse_group(group_file)
    decl_user, decl_group = _split(image_user)
    source = "policy" if policy_user or policy_group else "image"
    needs_primary = not policy_group and decl_group is None
    oci_uid, primary = _oci_user(decl_user, image_user, accounts) if not policy_user or needs_primary else (0, None)

    uid = _policy_id("user", policy_user, {a.name: a.uid for a in accounts}) if policy_user else oci_uid
    if policy_group:
        gid = _policy_id("group", policy_group, {g.name: g.gid for g in groups})
    elif decl_group is not None:
        numeric_group = _u32(decl_group)
        if numeric_group is not None:
            gid = numeric_group
        else:
            found = _group_named(decl_group, groups)
            if found is None:
                raise _refuse(f"OCI group {decl_group!r} was not found in /etc/group")
            gid = found.gid
    elif primary is not None:
        if primary == 0:
            raise _refuse(f"OCI USER {image_user!r} resolves to prohibited primary GID 0")
        gid = primary
    else:
        raise _refuse(
            f"OCI USER {image_user!r} uses a numeric UID without an explicit group, "
            "but /etc/passwd has no matching primary GID"
        )
    if gid == 0:
        raise _refuse(f"OCI USER {image_user!r} resolves to prohibited GID 0")

    if not policy_user:
        name = decl_user if _u32(decl_user) is None else ""
    elif _u32(policy_user) is None:
        name = next((a.name for a in accounts if a.uid == uid), policy_user)
    else:
        name = ""
    supplementary = _groups_of(name, gid, groups) if name else ()

    for what, value in (("uid", uid), ("gid", gid), *(("supplementary gid", g) for g in supplementary)):
        _check_limit(what, value, id_limit)
    return Resolved(uid, gid, supplementary, source, digest)
