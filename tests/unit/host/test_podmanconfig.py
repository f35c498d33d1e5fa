"""containers.conf read as Podman reads it: the files in Podman's order, later ones winning,
and only trusted ones (this user's or root's, not writable by others)."""

from __future__ import annotations

import os
from pathlib import Path

from podmand.host import podmanconfig
from podmand.host.podmanconfig import Destination


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_files_come_in_podmans_order(tmp_path: Path) -> None:
    user = tmp_path / "xdg" / "containers" / "containers.conf"
    write(tmp_path / "xdg" / "containers" / "containers.conf.d" / "b.conf", "")
    write(tmp_path / "xdg" / "containers" / "containers.conf.d" / "a.conf", "")
    write(tmp_path / "xdg" / "containers" / "containers.conf.d" / "skip.toml", "")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": "/nowhere"}
    files = podmanconfig.config_files(env)
    assert files[:2] == [podmanconfig.SHARE, podmanconfig.ETC]
    assert files[-3:] == [str(user), str(user) + ".d/a.conf", str(user) + ".d/b.conf"]
    assert podmanconfig.config_files({"HOME": "/h"})[-1] == "/h/.config/containers/containers.conf"
    only = {"CONTAINERS_CONF": "/x.conf", "CONTAINERS_CONF_OVERRIDE": "/o.conf", **env}
    assert podmanconfig.config_files(only) == ["/x.conf", "/o.conf"]


def test_later_files_win_and_destinations_merge_by_name(tmp_path: Path) -> None:
    first = write(tmp_path / "one.conf", """
[engine]
active_service = "a"
[engine.service_destinations.a]
uri = "unix:///run/a.sock"
[engine.service_destinations.b]
uri = "ssh://core@host:22/run/b.sock"
identity = "/k"
is_machine = true
""")
    override = write(tmp_path / "two.conf", """
[engine]
active_service = "b"
[engine.service_destinations.a]
uri = "unix:///run/a2.sock"
""")
    engine = podmanconfig.load({"CONTAINERS_CONF": str(first), "CONTAINERS_CONF_OVERRIDE": str(override)},
                               os.geteuid())
    assert engine.active_service == "b"
    assert engine.destinations == {
        "a": Destination("unix:///run/a2.sock"),
        "b": Destination("ssh://core@host:22/run/b.sock", "/k", True),
    }
    assert engine.ignored == []


def test_untrusted_or_broken_files_are_passed_over_with_the_reason(tmp_path: Path) -> None:
    shared = write(tmp_path / "shared.conf", '[engine]\nactive_service = "evil"\n', 0o666)
    engine = podmanconfig.load({"CONTAINERS_CONF": str(shared)}, os.geteuid())
    assert engine.active_service == ""
    [ignored] = engine.ignored
    assert ignored.path == str(shared) and ignored.why == "not read: writable by group or others (mode 0666)"

    shared.chmod(0o644)
    assert podmanconfig.load({"CONTAINERS_CONF": str(shared)}, os.geteuid()).active_service == "evil"
    uid = os.geteuid()
    if uid == 0:  # another user's file, read by root
        os.chown(shared, 4242, 4242)
        owner, reader = 4242, 0
    else:  # this user's file, read for another user
        owner, reader = uid, uid + 4242
    text, why = podmanconfig.read_trusted(str(shared), reader)
    assert text is None and why == f"not read: owned by uid {owner}, not this user (uid {reader}) or root"

    broken = write(tmp_path / "broken.conf", "[engine\n")
    [ignored] = podmanconfig.load({"CONTAINERS_CONF": str(broken)}, os.geteuid()).ignored
    assert ignored.why.startswith("not read: not TOML")
    assert podmanconfig.load({"CONTAINERS_CONF": str(tmp_path / "none.conf")}, os.geteuid()).ignored == []


def test_trust_is_decided_on_the_owner_and_mode() -> None:
    def st(uid: int, mode: int) -> os.stat_result:
        return os.stat_result((mode, 0, 0, 1, uid, 0, 10, 0, 0, 0))

    reg = 0o100000
    assert podmanconfig.trust_problem(st(1000, reg | 0o644), 1000) == ""
    assert podmanconfig.trust_problem(st(0, reg | 0o644), 1000) == ""
    assert podmanconfig.trust_problem(st(1001, reg | 0o644), 1000) == (
        "owned by uid 1001, not this user (uid 1000) or root")
    assert podmanconfig.trust_problem(st(1000, reg | 0o664), 1000).startswith("writable by group or others")
    assert podmanconfig.trust_problem(st(1000, 0o040755), 1000) == "not a regular file"
