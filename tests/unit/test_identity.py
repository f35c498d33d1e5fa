"""Unit tests for podmand.identity: workload uid/gid/groups from the image's account files."""

from __future__ import annotations

import pytest

from podmand import identity
from podmand.errors import FailedPrecondition
from podmand.identity import Account, Group, Resolved

PASSWD = """\
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
# a comment line

sandbox:x:1000:1000:Sandbox:/home/sandbox:/bin/sh
broken line without colons
half:x:notanumber:1:::
nobody:x:65534:65534:nobody:/home:/bin/false
sandbox:x:2000:2000:duplicate, ignored:/:/bin/sh
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


def resolve(user: str = "", group: str = "", image_user: str = "") -> Resolved:
    return identity.resolve(user, group, image_user, PASSWD, GROUP, DIGEST)


def refused(match: str, **kwargs: str) -> str:
    with pytest.raises(FailedPrecondition, match=match) as info:
        resolve(**kwargs)
    assert info.value.message.startswith("workload identity:")
    return info.value.message


# ---------------------------------------------------------------- parsing


def test_parse_passwd_skips_comments_blank_and_malformed() -> None:
    accounts = identity.parse_passwd(PASSWD)
    assert accounts == [
        Account("root", 0, 0),
        Account("daemon", 1, 1),
        Account("sandbox", 1000, 1000),
        Account("nobody", 65534, 65534),
        Account("sandbox", 2000, 2000),
    ]


def test_parse_group_members() -> None:
    groups = {g.name: g for g in identity.parse_group(GROUP)}
    assert groups["extra"] == Group("extra", 1001, ("sandbox", "other"))
    assert groups["root"].members == ()
    assert "broken" not in groups and "weird" not in groups
    assert identity.parse_group("g:x:5") == [Group("g", 5, ())]


# ---------------------------------------------------------------- resolution


def test_default_when_nothing_configured() -> None:
    assert resolve() == Resolved(1000, 1000, (), "default", DIGEST)
    assert resolve(user="  ", group=" ", image_user=" ") == Resolved(1000, 1000, (), "default", DIGEST)
    assert (identity.DEFAULT_UID, identity.DEFAULT_GID) == (1000, 1000)


def test_image_user_by_name() -> None:
    """The first passwd entry wins; supplementary groups exclude the primary gid and are sorted."""
    assert resolve(image_user="sandbox") == Resolved(1000, 1000, (1001,), "image", DIGEST)


def test_image_user_by_number() -> None:
    assert resolve(image_user="1000") == Resolved(1000, 1000, (1001,), "image", DIGEST)


def test_image_user_and_group_by_name() -> None:
    """With an explicit group, the primary group no longer counts and 1000 becomes supplementary."""
    assert resolve(image_user="sandbox:extra") == Resolved(1000, 1001, (1000,), "image", DIGEST)


def test_image_user_and_numeric_group() -> None:
    assert resolve(image_user="sandbox:4242") == Resolved(1000, 4242, (1000, 1001), "image", DIGEST)


def test_policy_overrides_image_user() -> None:
    """A requested user/group beats Config.User (even a root one); source becomes policy."""
    assert resolve(user=" nobody ", image_user="root") == Resolved(65534, 65534, (), "policy", DIGEST)
    assert resolve(user="sandbox", group="nogroup", image_user="root:root") == Resolved(
        1000, 65534, (1000, 1001), "policy", DIGEST
    )


def test_policy_group_alone_keeps_image_user() -> None:
    assert resolve(group="extra", image_user="sandbox") == Resolved(1000, 1001, (1000,), "policy", DIGEST)


def test_numeric_uid_without_passwd_entry_with_group() -> None:
    """An arbitrary uid is fine with an explicit group; it has no supplementary groups."""
    assert resolve(user="4321", group="4321") == Resolved(4321, 4321, (), "policy", DIGEST)
    assert resolve(image_user="4321:extra") == Resolved(4321, 1001, (), "image", DIGEST)


def test_uid_without_passwd_entry_needs_group() -> None:
    message = refused("explicit workload group", image_user="4321")
    assert "'4321'" in message


def test_unknown_user_name() -> None:
    message = refused("user 'ghost' is not in the image's /etc/passwd", user="ghost")
    assert "ghost" in message


def test_unknown_group_name() -> None:
    refused("group 'ghosts' is not in the image's /etc/group", image_user="sandbox:ghosts")


@pytest.mark.parametrize(("kwargs", "origin"), [
    ({"image_user": "root"}, "image user 'root'"),
    ({"image_user": "0"}, "image user '0'"),
    ({"user": "root"}, "policy user 'root'"),
    ({"user": "0", "group": "1000"}, "policy user '0'"),
    ({"image_user": "sandbox:0"}, "image group '0'"),
    ({"image_user": "sandbox:root"}, "image group 'root'"),
    ({"user": "sandbox", "group": "root"}, "policy group 'root'"),
    ({"user": "daemon", "group": "wheel"}, None),  # gid 10, not root: accepted below
])
def test_root_refused(kwargs: dict[str, str], origin: str | None) -> None:
    if origin is None:
        assert resolve(**kwargs).gid == 10
        return
    message = refused(r"must not be root \(uid or gid 0\)", **kwargs)
    assert origin in message


def test_root_primary_group_refused() -> None:
    """A non-root uid whose passwd primary group is 0 is refused, naming the primary group."""
    passwd = "svc:x:500:0::/:/bin/sh\n"
    with pytest.raises(FailedPrecondition, match=r"primary group of image user 'svc'"):
        identity.resolve("", "", "svc", passwd, GROUP, DIGEST)


def test_root_supplementary_group_refused() -> None:
    group = GROUP + "admin:x:0:sandbox\n"
    with pytest.raises(FailedPrecondition, match=r"must not be root.*supplementary group 'admin'"):
        identity.resolve("", "", "sandbox", PASSWD, group, DIGEST)


def test_group_without_user() -> None:
    refused("without a user", image_user=":extra")
    refused("without a user", group="extra")


def test_out_of_range_ids() -> None:
    refused("out of range", user="4294967295", group="1000")
    refused("out of range", user="1000", group="99999999999")


def test_empty_digest_refused() -> None:
    with pytest.raises(FailedPrecondition, match="digest"):
        identity.resolve("", "", "", PASSWD, GROUP, "")


def test_image_user_split_at_first_colon_only() -> None:
    """``user:group:junk`` keeps ``group:junk`` as the group name, which then is unknown."""
    refused("group 'extra:junk'", image_user="sandbox:extra:junk")
