"""Unit tests for podmand.sandbox.identity: the identity the supervisor's OCI mode selects."""

from __future__ import annotations

from typing import Any

import pytest

from podmand.errors import FailedPrecondition
from podmand.sandbox import identity
from podmand.sandbox.identity import Account, Group, Resolved

PASSWD = """\
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
# a comment line

sandbox:x:1000:1000:Sandbox:/home/sandbox:/bin/sh
broken line without colons
half:x:notanumber:1:::
nobody:x:65534:65534:nobody:/home:/bin/false
"""

GROUP = """\
root:x:0:
daemon:x:1:
sandbox:x:1000:
extra:x:1001:sandbox,other
# comment
wheel:x:10:root
broken
weird:x:abc:sandbox
both:x:1000:sandbox
nogroup:x:65534:
"""

DIGEST = "sha256:feedface"


def resolve(user: str = "", group: str = "", image_user: str = "", limit: int | None = None) -> Resolved:
    return identity.resolve(user, group, image_user, PASSWD, GROUP, DIGEST, id_limit=limit)


def refused(match: str, **kwargs: Any) -> str:
    with pytest.raises(FailedPrecondition, match=match) as info:
        resolve(**kwargs)
    assert info.value.message.startswith("workload identity:")
    return info.value.message


# ---------------------------------------------------------------- parsing


def test_parse_passwd_keeps_only_seven_field_lines() -> None:
    accounts = identity.parse_passwd(PASSWD + "short:x:5:5\n")
    assert accounts == [
        Account("root", 0, 0),
        Account("daemon", 1, 1),
        Account("sandbox", 1000, 1000),
        Account("nobody", 65534, 65534),
    ]


def test_parse_group_members() -> None:
    groups = {g.name: g for g in identity.parse_group(GROUP)}
    assert groups["extra"] == Group("extra", 1001, ("sandbox", "other"))
    assert groups["root"].members == ()
    assert "broken" not in groups and "weird" not in groups
    assert identity.parse_group("g:x:5:") == [Group("g", 5, ())]
    assert identity.parse_group("g:x:5") == []  # the supervisor wants exactly 4 fields


# ---------------------------------------------------------------- OCI mode


def test_image_without_user_and_no_policy_user_is_refused() -> None:
    """The supervisor: 'OCI USER is required because run_as_user is omitted'."""
    message = refused("OCI USER is required because run_as_user is omitted")
    assert "run_as_user" in message
    # a policy user alone is not enough: the group would be the declaration user's primary group
    refused("OCI USER is required", user="sandbox")
    identity.check_declaration("sandbox", "sandbox", "")
    assert resolve(user="sandbox", group="sandbox") == Resolved(1000, 1000, (1000, 1001), "policy", DIGEST)


def test_image_user_by_name() -> None:
    """Named users get their gid and their /etc/group memberships, sorted and unique."""
    assert resolve(image_user="sandbox") == Resolved(1000, 1000, (1000, 1001), "image", DIGEST)


def test_numeric_image_user_gets_no_supplementary_groups() -> None:
    assert resolve(image_user="1000") == Resolved(1000, 1000, (), "image", DIGEST)
    assert resolve(image_user="+01000") == Resolved(1000, 1000, (), "image", DIGEST)  # Rust's u32 parse


def test_image_user_and_group_by_name() -> None:
    """With an explicit group, 1000 stays only as a membership (group 'both')."""
    assert resolve(image_user="sandbox:extra") == Resolved(1000, 1001, (1000, 1001), "image", DIGEST)


def test_image_user_and_numeric_group() -> None:
    assert resolve(image_user="sandbox:4242") == Resolved(1000, 4242, (1000, 1001, 4242), "image", DIGEST)


def test_policy_fields_win_field_by_field() -> None:
    """Both explicit: the image is not looked at, not even a root USER."""
    assert resolve(user=" nobody ", group="nogroup", image_user="root") == Resolved(
        65534, 65534, (65534,), "policy", DIGEST
    )
    assert resolve(user="sandbox", group="nogroup", image_user="root:root") == Resolved(
        1000, 65534, (1000, 1001, 65534), "policy", DIGEST
    )
    assert resolve(group="extra", image_user="sandbox") == Resolved(1000, 1001, (1000, 1001), "policy", DIGEST)
    # a policy user with the image's group component
    assert resolve(user="nobody", image_user="sandbox:extra") == Resolved(65534, 1001, (1001,), "policy", DIGEST)
    # a policy user alone takes the primary group of the image's USER, as the supervisor does
    assert resolve(user="nobody", image_user="sandbox") == Resolved(65534, 1000, (1000,), "policy", DIGEST)
    refused("OCI USER 'root' selects root", user="nobody", image_user="root")


def test_numeric_uid_without_passwd_entry() -> None:
    assert resolve(user="4321", group="4321") == Resolved(4321, 4321, (), "policy", DIGEST)
    assert resolve(image_user="2345:2346") == Resolved(2345, 2346, (), "image", DIGEST)
    assert resolve(image_user="4321:extra") == Resolved(4321, 1001, (), "image", DIGEST)
    refused("uses a numeric UID without an explicit group, but /etc/passwd has no matching primary GID",
            image_user="4321")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"image_user": "root"}, "OCI USER 'root' selects root"),
    ({"image_user": "0"}, "OCI USER '0' selects UID 0"),
    ({"image_user": "sandbox:0"}, "OCI USER 'sandbox:0' resolves to prohibited GID 0"),
    ({"image_user": "sandbox:root"}, "OCI USER 'sandbox:root' selects root group"),
    ({"image_user": "sandbox:"}, "OCI USER 'sandbox:' has an empty group component"),
    ({"image_user": ":extra"}, "OCI USER is required because run_as_user is omitted"),
    ({"image_user": " sandbox"}, "OCI user component ' sandbox' is malformed"),
    ({"image_user": "sandbox:extra:junk"}, "OCI group component 'extra:junk' is malformed"),
    ({"image_user": "ghost"}, "OCI USER name 'ghost' was not found in /etc/passwd"),
    ({"image_user": "sandbox:ghosts"}, "OCI group 'ghosts' was not found in /etc/group"),
    ({"user": "ghost", "group": "1000"}, "unrecognized sandbox identity 'ghost'; expected 'sandbox' or a numeric UID"),
    ({"user": "1000", "group": "ghosts"}, "unrecognized sandbox group identity 'ghosts'"),
    ({"user": "root", "group": "1000"}, "explicit process user 'root' resolves to prohibited id 0"),
    ({"user": "0", "group": "1000"}, r"process user UID must be in range \[1, 4294967294\]"),
    ({"user": "4294967295", "group": "1000"}, r"process user UID must be in range"),
    ({"user": "sandbox", "group": "root"}, "explicit process group 'root' resolves to prohibited id 0"),
    ({"user": "sandbox", "group": "0"}, r"process group GID must be in range"),
])
def test_refusals_carry_the_supervisors_reason(kwargs: dict[str, str], match: str) -> None:
    message = refused(match, **kwargs)
    assert message.startswith("workload identity: ")


def test_root_primary_group_refused() -> None:
    passwd = "svc:x:500:0::/:/bin/sh\n"
    with pytest.raises(FailedPrecondition, match=r"OCI USER 'svc' resolves to prohibited primary GID 0"):
        identity.resolve("", "", "svc", passwd, GROUP, DIGEST)


def test_membership_in_gid_zero_refused() -> None:
    group = GROUP + "admin:x:0:sandbox\n"
    with pytest.raises(FailedPrecondition, match=r"OCI user 'sandbox' is a member of prohibited GID 0"):
        identity.resolve("", "", "sandbox", PASSWD, group, DIGEST)


def test_duplicate_accounts_are_ambiguous() -> None:
    passwd = PASSWD + "sandbox:x:2000:2000::/:/bin/sh\n"
    with pytest.raises(FailedPrecondition, match="account identity is ambiguous in '/etc/passwd'"):
        identity.resolve("", "", "sandbox", passwd, GROUP, DIGEST)


def test_ids_outside_the_user_namespace_are_refused() -> None:
    """userns=auto maps 1024 ids: setuid(2345) would fail with EINVAL in the supervisor."""
    assert resolve(image_user="sandbox", limit=1024).uid == 1000
    message = refused("uid 2345 cannot exist in the sandbox's user namespace, which maps ids 0-1023",
                      image_user="2345:2346", limit=1024)
    assert "auto:size" in message
    refused("gid 1001 cannot exist", image_user="sandbox:extra", limit=1001)
    refused("supplementary gid 1001 cannot exist", image_user="sandbox", limit=1001)
    assert resolve(image_user="2345:2346", limit=4096).uid == 2345


def test_empty_digest_refused() -> None:
    with pytest.raises(FailedPrecondition, match="digest"):
        identity.resolve("", "", "sandbox", PASSWD, GROUP, "")


def test_declaration_checks_need_no_account_files() -> None:
    """What validation can refuse without reading the image (it allocates nothing)."""
    with pytest.raises(FailedPrecondition, match="uid 2345 cannot exist"):
        identity.check_declaration("", "", "2345:2346", id_limit=1024)
    with pytest.raises(FailedPrecondition, match="gid 5000 cannot exist"):
        identity.check_declaration("sandbox", "5000", "", id_limit=1024)
    with pytest.raises(FailedPrecondition, match="selects root"):
        identity.check_declaration("", "", "root")
    identity.check_declaration("", "", "2345:2346", id_limit=4096)
    identity.check_declaration("sandbox", "extra", "root")  # both explicit: the image is not looked at
