"""Discovery in Podman's order: CONTAINER_CONNECTION, then CONTAINER_HOST (either decisive),
the default connection, the machines, then the well-known places; every candidate listed
with its reason, and the planted-socket rules applied to each. ``podman machine inspect``
is injected (no machine runs here)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest

from podmand.config import Settings
from podmand.host import autostart, discovery, hostgateway
from podmand.host.connections import Candidate
from tests.fakes.libpod import FakeLibpod

DEADLINE = 30.0


def no_machine(name: str) -> str | None:
    return None


def setup(tmp_path: Path, conns: dict[str, dict[str, object]], default: str = "") -> dict[str, str]:
    path = tmp_path / "connections.json"
    path.write_text(json.dumps({"Connection": {"Default": default, "Connections": conns}}))
    return {"PODMAN_CONNECTIONS_CONF": str(path), "CONTAINERS_CONF": str(tmp_path / "none.conf"),
            "HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(tmp_path / "xdg")}


def test_container_connection_then_container_host_each_decisive(tmp_path: Path) -> None:
    env = setup(tmp_path, {"a": {"URI": "unix:///run/a.sock"}, "b": {"URI": "unix:///run/b.sock"}}, "b")
    both = {**env, "CONTAINER_CONNECTION": "a", "CONTAINER_HOST": "unix:///run/h.sock"}
    got = discovery.plan("", both, no_machine)
    assert got.named_by == "CONTAINER_CONNECTION"  # Podman 5's order
    assert got.candidates == [Candidate("/run/a.sock", "connection 'a' (CONTAINER_CONNECTION)", named=True)]
    (tmp_path / "none.conf").write_text("")
    (tmp_path / "none.conf").chmod(0o666)  # not read, and listed, unless CONTAINER_HOST alone decides
    assert discovery.plan("", env, no_machine).candidates[0].refused.startswith("not read: writable by group")
    host = discovery.plan("", {**env, "CONTAINER_HOST": "unix:///run/h.sock"}, no_machine)
    assert (host.named_by, host.candidates) == ("CONTAINER_HOST", [Candidate("/run/h.sock", "CONTAINER_HOST",
                                                                             named=True)])
    missing = discovery.plan("", {**env, "CONTAINER_CONNECTION": "zz"}, no_machine).candidates
    assert [(c.path, c.refused.partition(" (")[0]) for c in missing][1:] == [("zz", "no such connection")]
    own = discovery.plan("/x/p.sock", both, no_machine)  # podmand's own setting outranks both
    assert [c.path for c in own.candidates] == ["/x/p.sock"] and own.named_by.startswith("podman_socket")


def test_default_connection_then_machines_then_well_known(tmp_path: Path) -> None:
    machine = json.dumps([{"Name": "m2", "ConnectionInfo": {"PodmanSocket": {"Path": str(tmp_path / "m2.sock")}}}])
    env = setup(tmp_path, {
        "far": {"URI": "ssh://me@far.example/run/user/1000/podman/podman.sock"},
        "m1": {"URI": "ssh://core@127.0.0.1:1/run/podman/podman.sock", "IsMachine": True},
        "m2": {"URI": "ssh://core@127.0.0.1:2/run/podman/podman.sock", "IsMachine": True},
    }, "far")
    got = discovery.plan("", env, lambda name: machine if name == "m2" else None)
    assert got.named_by == ""
    far, m1, m2, *known = got.candidates
    assert far.source == "default connection 'far'" and "ssh -nNT -L" in far.refused
    assert (m1.machine, m1.path.endswith("/podman/m1-api.sock")) == ("m1", True)
    assert (m2.machine, m2.path) == ("m2", str(tmp_path / "m2.sock"))
    assert [c.path for c in known] == discovery.candidates("", env)


async def tried(plan: discovery.Plan) -> list[str]:
    return [a.line() for a in await discovery.attempts(plan)]


def test_a_found_socket_must_be_ours_in_a_directory_only_we_may_write(tmp_path: Path) -> None:
    """A connection's or a machine's socket in a directory others may write, or another user's,
    is never contacted; the same socket named by the operator is taken as named."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    sock = shared / "api.sock"
    fake = FakeLibpod().start_in_thread(str(sock))
    try:
        found = discovery.Plan([Candidate(str(sock), "default connection 'x'")])
        [line] = asyncio.run(asyncio.wait_for(tried(found), DEADLINE))
        assert line == (f"{sock} (default connection 'x'): not used: {shared} on its path is writable by group "
                        "or others (mode 0777) (another user could plant or swap the socket)")
        assert fake.requests == []
        shared.chmod(0o700)
        os.chown(sock, 4243, 4243, follow_symlinks=False)
        [line] = asyncio.run(asyncio.wait_for(tried(found), DEADLINE))
        assert "the socket is owned by uid 4243" in line and fake.requests == []
        named = discovery.Plan([Candidate(str(sock), "CONTAINER_HOST", named=True)])
        assert asyncio.run(asyncio.wait_for(tried(named), DEADLINE)) == [f"{sock} (CONTAINER_HOST): "]
        assert fake.requests
        os.chown(sock, os.geteuid(), os.getegid(), follow_symlinks=False)
        assert asyncio.run(asyncio.wait_for(tried(found), DEADLINE)) == [f"{sock} (default connection 'x'): "]
    finally:
        fake.stop_thread()


def test_discover_returns_the_machine_and_a_named_socket_stops_autostart(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "m"
    home.mkdir(mode=0o700)
    sock = home / "dev-api.sock"
    machine = json.dumps([{"Name": "dev", "ConnectionInfo": {"PodmanSocket": {"Path": str(sock)}}}])
    env = setup(tmp_path, {"dev": {"URI": "ssh://core@127.0.0.1:1/run/podman/podman.sock", "IsMachine": True}},
                "dev")
    fake = FakeLibpod().start_in_thread(str(sock))
    try:
        found = asyncio.run(asyncio.wait_for(discovery.discover("", 0.0, env, lambda name: machine), DEADLINE))
    finally:
        fake.stop_thread()
    assert (found.path, found.machine) == (str(sock), "dev")
    served = hostgateway.for_machine(Settings(), found.machine)
    assert served.host_gateway_ip == hostgateway.GVPROXY_HOST == "192.168.127.254"
    assert hostgateway.for_machine(Settings(host_gateway_ip="10.0.0.9"), "dev").host_gateway_ip == "10.0.0.9"
    assert hostgateway.for_machine(Settings(), "").host_gateway_ip == ""

    bad = {**env, "CONTAINER_HOST": f"unix://{tmp_path}/none.sock"}
    with pytest.raises(discovery.NoPodmanSocket) as exc:
        asyncio.run(asyncio.wait_for(discovery.discover("", 0.0, bad, no_machine), DEADLINE))
    assert f"  {tmp_path}/none.sock (CONTAINER_HOST): does not exist" in str(exc.value)
    why = autostart.why_not_start(Settings(), "/usr/bin/podman", bad)
    assert why == "podmand starts Podman's API only when no socket is named, and one is (CONTAINER_HOST)"
    monkeypatch.setenv("CONTAINER_CONNECTION", "dev")
    assert "(CONTAINER_CONNECTION)" in autostart.why_not_start(Settings(), "/usr/bin/podman")


def test_every_candidate_and_skipped_file_is_listed_alike_by_serve_and_doctor(tmp_path: Path) -> None:
    from podmand.cli.doctor.servicechecks import check_socket

    conf = tmp_path / "containers.conf"
    conf.write_text('[engine]\nactive_service = "x"\n')
    conf.chmod(0o666)
    env = {**setup(tmp_path, {"gone": {"URI": f"unix://{tmp_path}/gone.sock"}}, "gone"), "CONTAINERS_CONF": str(conf)}
    plan = discovery.plan("", env, no_machine)
    tried = asyncio.run(asyncio.wait_for(discovery.attempts(plan), DEADLINE))[:2]  # not the well-known ones
    assert tried[0].line() == (f"{conf} (Podman's configuration): not read: writable by group or others "
                               "(mode 0666)")
    assert tried[1].line() == f"{tmp_path}/gone.sock (default connection 'gone'): does not exist"
    served = str(discovery.NoPodmanSocket(tried))
    doctor = check_socket(tried)
    assert doctor.status == "FAIL"
    for attempt in tried:
        assert f"  {attempt.line()}\n" in served + "\n" and attempt.line() in doctor.finding


# ---------------------------------------------------------------- where a found path leads

UID = 4242  # not this process's uid: every ownership decision is visible


def st(kind: int, mode: int, uid: int = UID) -> os.stat_result:
    return os.stat_result((kind | mode, 0, 0, 1, uid, uid, 0, 0, 0, 0))


DIR, SOCK, LINK = stat.S_IFDIR, stat.S_IFSOCK, stat.S_IFLNK


def test_the_decisions_on_each_directory_and_on_the_socket() -> None:
    assert discovery.directory_problem(st(DIR, 0o700), UID) == ""
    assert discovery.directory_problem(st(DIR, 0o755, 0), UID) == ""
    assert discovery.directory_problem(st(DIR, 0o1777, 0), UID) == ""  # /tmp: others add, never move ours
    assert discovery.directory_problem(st(DIR, 0o700, 7), UID) == "is owned by uid 7, not this user (uid 4242) or root"
    assert discovery.directory_problem(st(DIR, 0o1777, 7), UID).startswith("is owned by uid 7")
    assert discovery.directory_problem(st(DIR, 0o775), UID) == "is writable by group or others (mode 0775)"
    assert discovery.directory_problem(st(DIR, 0o757, 0), UID) == "is writable by group or others (mode 0757)"
    assert discovery.socket_problem(st(SOCK, 0o600), {UID, 0}, UID) == ""
    assert discovery.socket_problem(st(LINK, 0o777), {UID, 0}, UID).startswith("not used: it is a symlink; ")
    assert discovery.socket_problem(st(stat.S_IFREG, 0o600), {UID, 0}, UID) == "exists but is not a socket"
    assert discovery.socket_problem(st(SOCK, 0o600, 7), {UID, 0}, UID) == (
        "not used: the socket is owned by uid 7, not this user (uid 4242) or root (another user could "
        "impersonate Podman)")
    assert "not root (" in discovery.socket_problem(st(SOCK, 0o600), {0}, UID)


def fake_fs(entries: dict[str, os.stat_result], links: dict[str, str]) -> tuple[object, object]:
    def lstat(path: str) -> os.stat_result:
        if path not in entries:
            raise FileNotFoundError(path)
        return entries[path]

    return lstat, links.__getitem__


def walk(path: str, entries: dict[str, os.stat_result], links: dict[str, str] | None = None,
         owners: set[int] | None = None) -> str:
    lstat, readlink = fake_fs(entries, links or {})
    return discovery.path_problem(path, owners or {UID, 0}, UID, lstat, readlink)  # type: ignore[arg-type]


HOST = {"/": st(DIR, 0o755, 0), "/run": st(DIR, 0o755, 0), "/run/user": st(DIR, 0o755, 0),
        "/run/user/4242": st(DIR, 0o700), "/run/user/4242/podman": st(DIR, 0o755),
        "/run/user/4242/podman/podman.sock": st(SOCK, 0o600),
        "/tmp": st(DIR, 0o1777, 0), "/tmp/podman-run-4242": st(DIR, 0o700),
        "/tmp/podman-run-4242/podman": st(DIR, 0o700), "/tmp/podman-run-4242/podman/podman.sock": st(SOCK, 0o600)}


def test_every_component_of_a_found_path_is_looked_at_without_following_the_last() -> None:
    sock = "/run/user/4242/podman/podman.sock"
    assert walk(sock, HOST) == ""
    assert walk("/tmp/podman-run-4242/podman/podman.sock", HOST) == ""  # under the sticky /tmp
    assert walk(sock, {**HOST, "/run/user/4242": st(DIR, 0o700, 7)}) == (
        "not used: /run/user/4242 on its path is owned by uid 7, not this user (uid 4242) or root (another "
        "user could plant or swap the socket)")
    assert walk(sock, {**HOST, "/run/user/4242/podman": st(DIR, 0o777)}).startswith(
        "not used: /run/user/4242/podman on its path is writable by group or others (mode 0777)")
    assert walk(sock, {**HOST, "/": st(DIR, 0o777, 0)}) == "not used: / is writable by group or others (mode 0777)"
    assert walk(sock, {**HOST, "/run": st(stat.S_IFREG, 0o644, 0)}) == "does not exist (/run is not a directory)"
    assert walk("/run/user/4242/gone/podman.sock", HOST) == "does not exist"
    # The socket itself: a symlink to ours, in a directory of ours, is still not followed.
    linked = {**HOST, "/run/user/4242/podman/podman.sock": st(LINK, 0o777)}
    assert walk(sock, linked, {sock: "/tmp/podman-run-4242/podman/podman.sock"}).startswith(
        "not used: it is a symlink; podmand follows one only to a socket it is given (--podman-socket")
    assert walk(sock, {**HOST, sock: st(SOCK, 0o600, 7)}).startswith("not used: the socket is owned by uid 7")
    assert walk(sock, HOST, owners={0}).startswith("not used: the socket is owned by uid 4242, not root")


def test_a_symlink_on_the_way_is_followed_only_when_no_one_else_can_change_it() -> None:
    sock = "/var/run/user/4242/podman/podman.sock"
    var = {**HOST, "/var": st(DIR, 0o755, 0), "/var/run": st(LINK, 0o777, 0)}
    assert walk(sock, var, {"/var/run": "../run"}) == ""  # as /var/run -> ../run on most hosts
    assert walk(sock, var, {"/var/run": "/run"}) == ""
    assert walk(sock, {**var, "/var/run": st(LINK, 0o777, 7)}, {"/var/run": "/run"}) == (
        "not used: the symlink /var/run on its path is owned by uid 7 (another user could redirect it)")
    # The link's target is walked as any path: a foreign directory there is refused.
    assert walk(sock, {**var, "/run/user": st(DIR, 0o777, 0)}, {"/var/run": "/run"}).startswith(
        "not used: /run/user on its path is writable")
    loop = {**HOST, "/a": st(LINK, 0o777, 0), "/b": st(LINK, 0o777, 0)}
    assert walk("/a/podman.sock", loop, {"/a": "/b", "/b": "/a"}).endswith("is one symlink too many (another "
                                                                          "user could redirect it)")


def test_nothing_under_a_runtime_directory_rundir_passes_over(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    env = {"XDG_RUNTIME_DIR": str(xdg)}
    foreign = discovery.runtime_dir_problem(str(xdg / "podman" / "podman.sock"), env, UID)
    assert foreign == (f"not used: its runtime directory XDG_RUNTIME_DIR={xdg} is owned by uid {os.geteuid()}, not "
                       f"{UID} (another user could have planted it)")
    assert discovery.runtime_dir_problem(str(tmp_path / "elsewhere.sock"), env, UID) == ""
    assert discovery.runtime_dir_problem(str(xdg / "podman" / "podman.sock"), env, os.geteuid()) == ""
    assert discovery.runtime_dir_problem(f"/run/user/{UID}/podman/podman.sock", {}, UID) == "does not exist"
    os.chmod(xdg, 0o644)
    assert discovery.runtime_dir_problem(str(xdg / "podman.sock"), env, os.geteuid()) == ""  # path_problem's to say
    xdg.rmdir()
    xdg.write_text("")
    assert discovery.runtime_dir_problem(str(xdg / "podman.sock"), env, os.geteuid()).endswith(
        f"XDG_RUNTIME_DIR={xdg} is not a directory (another user could have planted it)")


def test_a_link_in_a_foreign_runtime_directory_is_never_contacted(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30's try: another user's XDG_RUNTIME_DIR holds ``podman/podman.sock``, a symlink to
    a socket this user could use. Nothing there is contacted, nor is a link in a directory of
    this user's; the operator who names the link gets it."""
    foreign, own = tmp_path / "foreign", tmp_path / "own"
    (foreign / "podman").mkdir(parents=True)
    own.mkdir(mode=0o700)
    sock, link = own / "api.sock", foreign / "podman" / "podman.sock"
    monkeypatch.setattr(os, "geteuid", lambda: UID)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(foreign))
    fake = FakeLibpod().start_in_thread(str(sock))
    try:
        link.symlink_to(sock)
        for path in (foreign, foreign / "podman", link):
            os.chown(path, 4243, 4243, follow_symlinks=False)
        os.chown(own, UID, UID)
        os.chown(sock, UID, UID)
        first = discovery.plan("", os.environ, no_machine).candidates[0]
        assert first == Candidate(str(link))
        [line] = asyncio.run(asyncio.wait_for(tried(discovery.Plan([first])), DEADLINE))
        assert line == (f"{link}: not used: its runtime directory XDG_RUNTIME_DIR={foreign} is owned by uid 4243, "
                        f"not {UID} (another user could have planted it)")
        for path in (foreign, foreign / "podman", link):
            os.chown(path, UID, UID, follow_symlinks=False)  # a runtime directory of ours: still a link
        [line] = asyncio.run(asyncio.wait_for(tried(discovery.Plan([first])), DEADLINE))
        assert line.startswith(f"{link}: not used: it is a symlink; ")
        assert fake.requests == []
        named = discovery.Plan([Candidate(str(link), named=True)])
        assert asyncio.run(asyncio.wait_for(tried(named), DEADLINE)) == [f"{link}: "]
        assert fake.requests
    finally:
        fake.stop_thread()
