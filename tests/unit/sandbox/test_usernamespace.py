"""Unit tests for podmand.sandbox.usernamespace: driver_config.userns_mode (upstream PR #2141),
libpod's spelling of each mode, and the ids each mode maps."""

from __future__ import annotations

from typing import Any

import pytest

from podmand.config import Settings
from podmand.config.checks import validate as check_settings
from podmand.errors import ConfigError, FailedPrecondition, InvalidArgument
from podmand.libpod.models import HostIDMappings, IDMap, Info
from podmand.libpod.versions import UNKNOWN, Features, of
from podmand.sandbox import spec, usernamespace
from podmand.sandbox.usernamespace import requested

from .test_spec import with_driver_config

ROOTLESS = Features("5.4.2", rootless=True, subordinate_ids=65536)
WHERE = "sandbox.spec.template.driver_config.userns_mode: "


def settings(userns: str = "auto", **fields: Any) -> Settings:
    """Settings that let a sandbox ask for its mode, podmand's own uid included unless ``fields`` say."""
    s = Settings(**{"allow_driver_config": True, "allow_userns": True, "userns": userns,
                    "allow_userns_own_uid": True, **fields})
    check_settings(s)
    usernamespace.check_settings(s)
    return s


@pytest.mark.parametrize(
    ("value", "operator", "mode"),
    [
        ("auto", "auto", "auto"),
        (" auto:size=1024 ", "auto", "auto:size=1024"),
        ("keep-id", "keep-id", "keep-id"),
        ("keep-id:uid=1000,gid=1000", "host", "keep-id:uid=1000,gid=1000"),
        ("keep-id:gid=5", "nomap", "keep-id:gid=5"),
        ("nomap", "keep-id", "nomap"),
        ("", "auto", ""),
        ("   ", "auto", ""),
    ],
)
def test_accepted_modes(value: str, operator: str, mode: str) -> None:
    assert requested(value, settings(operator), ROOTLESS) == mode


@pytest.mark.parametrize("value", ["host", "ns:/proc/1/ns/user", "host:x"])
def test_host_and_ns_are_always_refused(value: str) -> None:
    """Even with allow_userns off: the field is named, and no operator setting opens them."""
    for s in (settings(), Settings(allow_driver_config=True)):
        with pytest.raises(InvalidArgument) as exc:
            requested(value, s, ROOTLESS)
        assert exc.value.message.startswith(WHERE) and "is never allowed" in exc.value.message


def test_refused_without_allow_userns() -> None:
    with pytest.raises(FailedPrecondition) as exc:
        requested("keep-id", Settings(allow_driver_config=True, userns="keep-id"), ROOTLESS)
    assert exc.value.message == (
        WHERE + "a sandbox's own user namespace mode is disabled; an operator must enable allow_userns "
        "(--allow-userns / PODMAND_ALLOW_USERNS)"
    )


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (3, "must be a string"),
        ("private", "is not a mode a sandbox may ask for"),
        ("container:abc", "is not a mode a sandbox may ask for"),
        ("keep-id:", "is malformed"),
        ("nomap:uid=1", "is malformed"),
        ("keep-id:uid=x", "uid must be a non-negative integer, not 'x'"),
        ("keep-id:uid=-1", "uid must be a non-negative integer"),
        ("keep-id:uid=4294967296", "uid must be a non-negative integer"),
        ("keep-id:size=10", "option 'size=10': only uid=N and gid=N, each once"),
        ("keep-id:uid=1,uid=2", "each once"),
        ("auto:uid=1", "only size=N"),
        ("auto:size=0", "auto size must be 1 to"),
    ],
)
def test_malformed_modes(value: Any, why: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        requested(value, settings("keep-id" if "keep-id" in str(value) or "nomap" in str(value) else "auto"),
                  ROOTLESS)
    assert exc.value.message.startswith(WHERE) and why in exc.value.message


@pytest.mark.parametrize(("value", "operator"), [("keep-id", "auto"), ("nomap", "auto:size=2048"), ("auto", "keep-id"),
                                                  ("auto:size=10", "nomap")])
def test_auto_does_not_mix_with_keep_id_or_nomap(value: str, operator: str) -> None:
    """keep-id and nomap take every subordinate id: Podman would refuse the auto sandboxes."""
    with pytest.raises(FailedPrecondition, match="take every subordinate id"):
        requested(value, settings(operator), ROOTLESS)


def test_keep_id_and_nomap_need_rootless_podman() -> None:
    rootful = Features("5.4.2", rootless=False)
    for value in ("keep-id", "nomap"):
        with pytest.raises(FailedPrecondition, match="needs rootless Podman"):
            requested(value, settings("host"), rootful)
    assert requested("auto", settings("host"), rootful) == "auto"
    assert requested("keep-id", settings("host"), UNKNOWN) == "keep-id"


@pytest.mark.parametrize(
    ("mode", "userns"),
    [
        ("nomap", {"nsmode": "no-map"}),  # the SpecGenerator's spelling (pkg/specgen/namespaces.go, 4.3 and 5.x)
        ("keep-id", {"nsmode": "keep-id"}),
        ("keep-id:uid=1000,gid=1000", {"nsmode": "keep-id", "value": "uid=1000,gid=1000"}),
    ],
)
def test_libpod_spelling(mode: str, userns: dict[str, str]) -> None:
    assert usernamespace.libpod(mode, Settings()) == {"userns": userns}


def test_the_driver_config_mode_reaches_the_plan() -> None:
    plan = spec.validate(with_driver_config({"userns_mode": "auto:size=4096"}), settings(userns_max_size=4096),
                         podman=ROOTLESS)
    assert plan.userns == "auto:size=4096" and plan.driver_config_used
    assert spec.validate(with_driver_config({"userns_mode": ""}), settings()).userns == "auto"
    box = with_driver_config({"userns_mode": "keep-id"})
    box.spec.template.user_namespaces = False
    with pytest.raises(InvalidArgument, match=r"conflicts with sandbox\.spec\.template\.user_namespaces: false"):
        spec.validate(box, settings("keep-id", allow_host_userns=True), podman=ROOTLESS)


@pytest.mark.parametrize(
    ("mode", "limit"),
    [("auto:size=4096", 4096), ("nomap", 65536), ("keep-id", 65537), ("keep-id:uid=1000,gid=1000", 65537),
     ("keep-id:uid=70000", 65536), ("host", 65537)],
)
def test_id_limit_follows_the_mode(mode: str, limit: int) -> None:
    """keep-id and host map the subordinate ids from 0 plus the user's own id; nomap only the former."""
    assert usernamespace.id_limit(mode, Settings(), ROOTLESS) == limit
    assert usernamespace.id_limit(mode, Settings(
            ), UNKNOWN) == (limit if mode.startswith("auto") else None)


def test_features_count_the_subordinate_ids() -> None:
    info = Info()
    info.host.security.rootless = True
    info.host.idMappings = HostIDMappings(
        uidmap=[IDMap(0, 1001, 1), IDMap(1, 100000, 65536), IDMap(65537, 300000, 1000)],
        gidmap=[IDMap(0, 1001, 1), IDMap(1, 100000, 65536)],
    )
    assert (of(info).rootless, of(info).subordinate_ids) == (True, 65536)
    info.host.security.rootless = False
    assert (of(info).rootless, of(info).subordinate_ids) == (False, None)


@pytest.mark.parametrize(
    ("operator", "fields", "most"),
    [("auto", {}, 1024), ("auto:size=2048", {}, 2048), ("host", {}, 1024), ("auto", {"userns_max_size": 8192}, 8192)],
)
def test_auto_size_is_capped(operator: str, fields: dict[str, Any], most: int) -> None:
    """auto:size=N asks for at most userns_max_size ids, by default the operator's own per-sandbox size:
    one sandbox cannot take the subordinate ids every later one needs (issue 30)."""
    s = settings(operator, **fields)
    assert requested(f"auto:size={most}", s, ROOTLESS) == f"auto:size={most}"
    with pytest.raises(FailedPrecondition) as exc:
        requested(f"auto:size={most + 1}", s, ROOTLESS)
    assert exc.value.message == (
        WHERE + f"auto size {most + 1} is more than the {most} ids a sandbox may ask for; an operator may raise "
        "userns_max_size (--userns-max-size / PODMAND_USERNS_MAX_SIZE)"
    )


@pytest.mark.parametrize(
    ("mode", "uidmap", "maps"),
    [("host", [], True), ("keep-id", [], True), ("keep-id:uid=1000,gid=1000", [], True), ("auto", [], False),
     ("auto:size=4096", [], False), ("nomap", [], False), ("private", ["0:1:65536"], False),
     ("private", ["0:1:100", "100:0:1"], True), ("private", ["0:0:65536"], True)],
)
def test_which_modes_map_podmands_own_uid(mode: str, uidmap: list[str], maps: bool) -> None:
    """Host id 0 is podmand's uid both ways: rootless Podman's intermediate namespace maps the user there."""
    assert usernamespace.maps_own_uid(mode, Settings(uidmap=uidmap)) is maps


@pytest.mark.parametrize(
    ("env", "field"),
    [({"userns": "keep-id"}, "userns"), ({"userns": "host"}, "userns"),
     ({"userns": "private", "uidmap": ["0:0:1", "1:1:65536"], "gidmap": ["0:1:65536"]}, "userns"),
     ({"allow_host_userns": True}, "allow_host_userns")],
)
def test_the_operators_own_uid_mapping_needs_the_opt_in(env: dict[str, Any], field: str) -> None:
    s = Settings(**env)
    check_settings(s)
    with pytest.raises(ConfigError) as exc:
        usernamespace.check_settings(s)
    assert str(exc.value).startswith(f"invalid setting {field} (") and (
        "allow_userns_own_uid (--allow-userns-own-uid / PODMAND_ALLOW_USERNS_OWN_UID)" in str(exc.value))
    usernamespace.check_settings(Settings(**env, allow_userns_own_uid=True))


def test_a_sandboxs_keep_id_needs_the_opt_in() -> None:
    """keep-id asked for in driver_config maps podmand's uid: refused, naming the field and the setting,
    whatever the operator's own mode; nomap and auto do not need it."""
    s = settings("nomap", allow_userns_own_uid=False)
    with pytest.raises(FailedPrecondition) as exc:
        requested("keep-id:uid=1000", s, ROOTLESS)
    assert exc.value.message == (
        WHERE + "userns keep-id maps podmand's own uid into the sandbox, whose root could then change podmand's "
        "files mounted there; an operator must enable allow_userns_own_uid (--allow-userns-own-uid / "
        "PODMAND_ALLOW_USERNS_OWN_UID)"
    )
    assert requested("nomap", s, ROOTLESS) == "nomap"
