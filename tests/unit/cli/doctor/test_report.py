"""Unit tests for podmand.cli.doctor.report: the decisions, from injected facts, and the output."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path
from typing import Any

import msgspec
import pytest

from podmand.cli.doctor import report
from podmand.cli.doctor.capacitychecks import CapacityFacts, check_capacity
from podmand.cli.doctor.hostchecks import (
    Check,
    DriverSocketFact,
    ImageFact,
    StateDirFact,
    check_cgroups,
    check_driver_socket,
    check_images,
    check_state_dir,
    check_subids,
    check_tun,
)
from podmand.cli.doctor.servicechecks import (
    check_new_store,
    check_quadlet,
    check_runtime_dir,
    check_socket,
    check_storage,
    check_version,
)
from podmand.config.rundir import RuntimeDir
from podmand.host.capacity import KeyQuota
from podmand.host.discovery import Attempt
from podmand.host.storageguard import StorageFacts
from podmand.libpod import Info, PodmanClient, Timeouts
from tests.fakes.libpod import FakeLibpod, Hang


def test_no_subuid_range_fails_naming_usermod_and_migrate() -> None:
    c = check_subids("alice", True, 0, 0, "auto")
    assert c.status == "FAIL"
    assert "userns=auto needs them" in c.finding
    assert "usermod --add-subuids 100000-165535 --add-subgids 100000-165535 alice" in c.fix
    assert "podman system migrate" in c.fix


def test_missing_subgids_alone_fails() -> None:
    assert check_subids("alice", True, 65536, 0, "auto").status == "FAIL"


def test_262144_subuids_fit_256_default_sandboxes() -> None:
    c = check_subids("podmand", True, 262144, 262144, "auto")
    assert c.status == "OK"
    assert "room for 256 userns=auto sandboxes" in c.finding


def test_userns_size_setting_is_honoured() -> None:
    c = check_subids("podmand", True, 262144, 262144, "auto:size=2048,uidmapping=0:1:1")
    assert "room for 128 userns=auto sandboxes (2048 IDs each" in c.finding


def test_fewer_ids_than_one_sandbox_fails() -> None:
    c = check_subids("bob", True, 500, 500, "auto")
    assert c.status == "FAIL"
    assert "fewer than the 1024" in c.finding


def test_podman_view_wins_over_this_machines_files() -> None:
    """In a sidecar /etc/subuid is the container's; Podman's /info mapping is the host's truth."""
    c = check_subids("podmand", True, 0, 0, "auto", podman_mapped=65536)
    assert c.status == "OK"
    assert "room for 64" in c.finding
    assert "not the host's" in c.finding


def test_rootful_auto_needs_the_containers_range() -> None:
    assert check_subids("containers", False, 0, 0, "auto").status == "FAIL"
    assert "containers:2147483647:2147483648" in check_subids("containers", False, 0, 0, "auto").fix
    assert check_subids("containers", False, 0, 0, "host").status == "OK"
    big = check_subids("containers", False, 2147483648, 2147483648, "auto")
    assert big.status == "OK" and "room for 2097152" in big.finding


def test_mapped_subids_from_info() -> None:
    body = {
        "host": {
            "security": {"rootless": True},
            "idMappings": {
                "uidmap": [
                    {"container_id": 0, "host_id": 1001, "size": 1},
                    {"container_id": 1, "host_id": 1, "size": 9},
                ],
                "gidmap": [
                    {"container_id": 0, "host_id": 1001, "size": 1},
                    {"container_id": 1, "host_id": 1, "size": 7},
                ],
            },
        }
    }
    info = msgspec.json.decode(msgspec.json.encode(body), type=Info)
    assert report.mapped_subids(info) == 7
    rootful = msgspec.json.decode(b'{"host": {"idMappings": {"uidmap": null, "gidmap": null}}}', type=Info)
    assert report.mapped_subids(rootful) is None


def test_tun_not_writable_fails_naming_chmod() -> None:
    c = check_tun(True, False, rootless=True)
    assert c.status == "FAIL"
    assert "chmod 0666 /dev/net/tun" in c.fix
    missing = check_tun(False, False, rootless=True)
    assert missing.status == "FAIL" and "modprobe tun" in missing.fix
    assert check_tun(True, True, rootless=True).status == "OK"
    assert check_tun(False, False, rootless=False).status == "OK"


def test_vfs_warns_naming_storage_conf() -> None:
    c = check_storage("vfs", "/home/u/.local/share/containers/storage")
    assert c.status == "WARN"
    assert "~/.config/containers/storage.conf" in c.fix
    assert 'driver = "overlay"' in c.fix
    assert "podman system reset" in c.fix
    assert check_storage("overlay").status == "OK"


def test_cgroup_v1_rootless_warns_with_switch() -> None:
    c = check_cgroups("v1", True, None, "")
    assert c.status == "WARN"
    assert "not enforced" in c.finding
    assert "systemd.unified_cgroup_hierarchy=1" in c.fix
    assert check_cgroups("v1", False, None, "").status == "OK"


def test_cgroup_v2_delegation() -> None:
    missing = check_cgroups("v2", True, ["cpuset", "io", "memory"], "/sys/x/cgroup.controllers")
    assert missing.status == "WARN"
    assert "cpu, pids not delegated" in missing.finding
    assert "Delegate=cpu cpuset io memory pids" in missing.fix
    assert check_cgroups("v2", True, ["cpuset", "cpu", "io", "memory", "pids"], "x").status == "OK"
    assert check_cgroups("v2", True, None, "").status == "WARN"


def test_version_thresholds() -> None:
    assert check_version("4.2.0", True).status == "WARN"
    old = check_version("3.4.4", False)
    assert old.status == "WARN" and "rootful" in old.finding
    v431 = check_version("4.3.1", True)
    assert v431.status == "OK" and "rootless" in v431.finding and "4.3 quirks handled" in v431.finding
    assert check_version("5.2.0-dev", True).status == "OK"
    assert check_version("garbage", True).status == "WARN"


def test_missing_socket_fails_listing_every_path() -> None:
    attempts = [
        Attempt("/run/user/1000/podman/podman.sock", "does not exist"),
        Attempt("/run/podman/podman.sock", "permission denied (connect)"),
    ]
    c = check_socket(attempts)
    assert c.status == "FAIL"
    assert "/run/user/1000/podman/podman.sock: does not exist" in c.finding
    assert "/run/podman/podman.sock: permission denied (connect)" in c.finding
    assert "podman system service" in c.fix and "OPENSHELL_PODMAN_SOCKET" in c.fix


def test_socket_ok_names_only_paths_tried_before_it() -> None:
    c = check_socket([Attempt("/a", "does not exist"), Attempt("/b", ""), Attempt("/c", "does not exist")])
    assert c.status == "OK"
    assert c.finding == "/b answers (tried first: /a: does not exist)"


def test_images_missing_warn_with_pull_hint() -> None:
    c = check_images([ImageFact("supervisor", "ghcr.io/x/sup:1", False), ImageFact("sandbox", "localhost/sb:1", True)])
    assert c.status == "WARN"
    assert "podman pull ghcr.io/x/sup:1" in c.fix
    assert "localhost/sb:1" not in c.fix
    local = check_images([ImageFact("sandbox", "localhost/sb:1", False)])
    assert "cannot be pulled" in local.fix
    assert check_images([ImageFact("sandbox", "a:1", True)]).status == "OK"


def test_state_dir_invisible_to_podman_fails_with_same_path_fix() -> None:
    err = "statfs /srv/state/.visible-abc: no such file or directory"
    c = check_state_dir(StateDirFact("/srv/state", image="img", create_error=err, hidden=True))
    assert c.status == "FAIL"
    assert "mount the host directory at the identical path" in c.fix and "PODMAND_STATE_DIR=/srv/state" in c.fix
    other = check_state_dir(StateDirFact("/srv/state", image="img", create_error="image not known"))
    assert other.status == "WARN"


def test_state_dir_outcomes() -> None:
    assert check_state_dir(StateDirFact("/s", problem="not writable by this user: x")).status == "FAIL"
    assert check_state_dir(StateDirFact("/s", image="")).status == "WARN"
    assert check_state_dir(StateDirFact("/s", podman=False)).status == "WARN"
    good = check_state_dir(StateDirFact("/s", created=True, image="img"))
    assert good.status == "OK" and "(created)" in good.finding


def test_driver_socket_decisions() -> None:
    long_path = "/tmp/" + "x" * 110 + "/d.sock"
    assert check_driver_socket(DriverSocketFact(long_path)).status == "FAIL"
    assert check_driver_socket(DriverSocketFact("/r/d.sock", parent_problem="owned by uid 0")).status == "FAIL"
    assert check_driver_socket(DriverSocketFact("/r/d.sock", occupant="not a socket")).status == "FAIL"
    assert check_driver_socket(DriverSocketFact("/r/d.sock", occupant="listening")).status == "WARN"
    assert check_driver_socket(DriverSocketFact("/r/d.sock", occupant="stale")).status == "OK"
    assert check_driver_socket(DriverSocketFact("/r/d.sock")).status == "OK"


def test_driver_socket_facts_sees_a_listener_and_a_stale_socket(tmp_path: Path) -> None:
    path = tmp_path / "d.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    try:
        assert report.driver_socket_facts(str(path)).occupant == "listening"
    finally:
        server.close()
    assert report.driver_socket_facts(str(path)).occupant == "stale"
    assert report.driver_socket_facts(str(path.parent / "new" / "d.sock")).parent_problem == ""


CHECKS = [
    Check("podman socket", "OK", "/s answers"),
    Check("tun", "FAIL", "/dev/net/tun is not readable and writable", "chmod 0666 /dev/net/tun"),
    Check("storage", "WARN", "storage driver vfs", "write ~/.config/containers/storage.conf"),
]


def test_human_output_lists_each_check_and_every_fix() -> None:
    out = report.render(CHECKS)
    assert out.splitlines() == [
        "OK    podman socket: /s answers",
        "FAIL  tun: /dev/net/tun is not readable and writable",
        "      fix: chmod 0666 /dev/net/tun",
        "WARN  storage: storage driver vfs",
        "      fix: write ~/.config/containers/storage.conf",
    ]


def test_json_output_has_every_field_and_fix() -> None:
    data = json.loads(report.render_json(CHECKS))
    assert data == [
        {"name": "podman socket", "status": "OK", "finding": "/s answers", "fix": ""},
        {
            "name": "tun",
            "status": "FAIL",
            "finding": "/dev/net/tun is not readable and writable",
            "fix": "chmod 0666 /dev/net/tun",
        },
        {
            "name": "storage",
            "status": "WARN",
            "finding": "storage driver vfs",
            "fix": "write ~/.config/containers/storage.conf",
        },
    ]


def test_exit_code_is_1_only_on_fail() -> None:
    assert report.exit_code(CHECKS) == 1
    assert report.exit_code([c for c in CHECKS if c.status != "FAIL"]) == 0


def test_no_socket_warns_when_serve_would_start_podman_itself() -> None:
    attempts = [Attempt("/run/user/7/podman/podman.sock", "does not exist")]
    c = check_socket(attempts, will_start="/tmp/podman-run-7/podman/podman.sock")
    assert c.status == "WARN"
    assert "serve will start Podman's API itself at /tmp/podman-run-7/podman/podman.sock" in c.finding
    assert "/run/user/7/podman/podman.sock: does not exist" in c.finding
    off = check_socket(attempts, why_not="podmand did not start Podman's API: podman_autostart is off")
    assert off.status == "FAIL"
    assert off.finding.endswith("podman_autostart is off")
    assert "docs/podman-api.md in podmand's repository" in off.fix


def test_runtime_dir_from_a_session_is_ok_and_root_uses_run() -> None:
    assert check_runtime_dir(RuntimeDir("/run", "root"), "", "root").status == "OK"
    c = check_runtime_dir(RuntimeDir("/run/user/1001", "XDG_RUNTIME_DIR"), "", "podmand")
    assert (c.status, c.finding) == ("OK", "/run/user/1001 (from XDG_RUNTIME_DIR)")


def test_an_unusable_xdg_runtime_dir_warns() -> None:
    runtime = RuntimeDir("/run/user/1001", "/run/user", "XDG_RUNTIME_DIR=/run/user/0 is owned by uid 0, not 1001")
    c = check_runtime_dir(runtime, "", "podmand")
    assert c.status == "WARN"
    assert c.finding.startswith("XDG_RUNTIME_DIR=/run/user/0 is owned by uid 0, not 1001: podmand uses /run/user/1001")
    assert c.fix == "unset XDG_RUNTIME_DIR, or set it to /run/user/1001"


def test_runtime_dir_fallback_under_tmp_warns_with_linger() -> None:
    uid = os.geteuid()
    fallback = RuntimeDir(f"/tmp/podman-run-{uid}", "fallback", f"/run/user/{uid} does not exist")
    c = check_runtime_dir(fallback, "", "alice")
    assert c.status == "WARN"
    assert f"Podman and podmand use /tmp/podman-run-{uid}" in c.finding
    assert f"/run/user/{uid} does not exist" in c.finding
    assert "loginctl enable-linger alice" in c.fix
    assert "without systemd" in c.fix
    xdg_tmp = check_runtime_dir(RuntimeDir("/tmp/xdg", "XDG_RUNTIME_DIR"), "", "alice")
    assert xdg_tmp.status == "WARN" and "is under /tmp" in xdg_tmp.finding


def test_unsafe_runtime_dir_fallback_fails() -> None:
    fallback = RuntimeDir("/tmp/podman-run-7", "fallback")
    c = check_runtime_dir(fallback, "is a symlink", "alice")
    assert c.status == "FAIL"
    assert "/tmp/podman-run-7, which is a symlink: podmand refuses it" in c.finding
    assert c.fix.startswith("remove /tmp/podman-run-7, or as root: loginctl enable-linger alice")


def test_quadlet_needs_podman_4_4() -> None:
    old = check_quadlet("4.3.1")
    assert old.status == "WARN"
    assert "no Quadlet (it came in 4.4)" in old.finding and "podmand.container" in old.finding
    assert "podmand.service" in old.fix
    assert check_quadlet("4.4.0").status == "OK"
    assert check_quadlet("5.2.1").status == "OK"


def test_tun_is_skipped_in_a_sidecar() -> None:
    c = check_tun(False, False, rootless=True, sidecar=True)
    assert c.status == "OK"
    assert "skipped: podmand runs in a container without Podman" in c.finding
    assert "matters on the host" in c.finding


def test_a_sidecar_is_a_container_without_podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "CONTAINER_MARKERS", (str(tmp_path / ".containerenv"),))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert not report.in_sidecar()
    (tmp_path / ".containerenv").write_text("")
    assert report.in_sidecar()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "podman").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "podman").chmod(0o755)
    assert not report.in_sidecar()  # Podman runs here: its /dev/net/tun matters


def test_a_missing_store_without_a_driver_warns_about_vfs() -> None:
    c = check_new_store(StorageFacts("/home/a/.local/share/containers/storage", False, ""), "no socket")
    assert c.status == "WARN"
    assert "would create a slow vfs store" in c.finding
    assert "podmand's autostart creates it with overlay" in c.finding
    assert 'driver = "overlay"' in c.fix
    configured = check_new_store(StorageFacts("/s", False, "/etc/containers/storage.conf"), "no socket")
    assert configured.status == "OK" and "/etc/containers/storage.conf names its driver" in configured.finding
    existing = check_new_store(StorageFacts("/s", True, ""), "no Podman API socket answers")
    assert existing.status == "WARN" and existing.finding.startswith("not checked: no Podman API socket answers")


def test_image_facts_tell_present_missing_and_unchecked_apart() -> None:
    """Through FakeLibpod's in-memory door: 204 present, 404 missing, another status or
    no answer: not checked, with why."""
    fake = FakeLibpod()
    fake.route("GET", "/images/(sup|box)/exists", lambda req: (204 if "sup" in req.path else 404, {}, b""))
    fake.route("GET", "/images/broken/exists", (500, {}, {"message": "storage is corrupt"}))
    fake.route("GET", "/images/slow/exists", lambda _req: Hang())
    roles = [("supervisor", "sup"), ("sandbox", "box"), ("other", "broken"), ("slow", "slow")]

    async def main() -> list[ImageFact]:
        client = PodmanClient(transport=fake.transport(), timeouts=Timeouts(request=0.05))
        return await asyncio.wait_for(report.image_facts(client, roles), 10)

    facts = asyncio.run(main())
    assert facts[:3] == [
        ImageFact("supervisor", "sup", True),
        ImageFact("sandbox", "box", False),
        ImageFact("other", "broken", False, "HTTP 500: storage is corrupt"),
    ]
    assert not facts[3].present and "did not answer" in facts[3].error
    assert check_images(facts).status == "WARN"


# ---------------------------------------------------------------- capacity


def capacity_facts(**kw: Any) -> CapacityFacts:
    base: dict[str, Any] = dict(
        userns="auto", subids=262144, keys=KeyQuota(200, 20000), keys_of="non-root users",
        nofile=(1024, 524288, 524288), exit_watch="events",
    )
    return CapacityFacts(**{**base, **kw})


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_capacity_one_line_per_figure_and_the_smallest_overall() -> None:
    checks = check_capacity(capacity_facts())
    assert [c.name for c in checks] == [
        "capacity: subordinate ids", "capacity: kernel keys", "capacity: descriptors", "capacity"
    ]
    got = by_name(checks)
    assert got["capacity: subordinate ids"].finding.startswith("256 sandboxes: 262144 subordinate ids, 1024 per")
    assert got["capacity: kernel keys"].finding.startswith("no bound: each userns=auto sandbox's root")
    assert got["capacity: descriptors"].finding.startswith("no bound: soft 1024, hard 524288; serve raises")
    assert got["capacity"].finding == "256 sandboxes at once (bounded by subordinate ids)"
    assert all(c.status == "OK" for c in checks)


def test_capacity_shared_key_quota_bounds_keep_id_and_warns() -> None:
    got = by_name(check_capacity(capacity_facts(userns="keep-id")))
    assert got["capacity: subordinate ids"].finding.startswith("no bound: userns=keep-id")
    keys = got["capacity: kernel keys"]
    assert keys.status == "WARN" and keys.finding.startswith("200 sandboxes: non-root users: maxkeys 200")
    assert "kernel.keys.maxkeys" in keys.fix
    assert got["capacity"].finding.startswith("200 sandboxes at once (bounded by kernel keys)")


def test_capacity_descriptors_bound_a_wait_per_sandbox() -> None:
    got = by_name(check_capacity(capacity_facts(userns="host", keys=None, nofile=(1024, 1024, 1024),
                                                exit_watch="wait")))
    assert got["capacity: descriptors"].status == "WARN"
    assert got["capacity: descriptors"].finding.startswith("768 sandboxes: soft 1024, hard 1024")
    assert got["capacity: kernel keys"].finding.startswith("no bound: unknown:")
    assert got["capacity"].finding.startswith("768 sandboxes at once (bounded by descriptors)")


def test_capacity_without_subordinate_ids_warns() -> None:
    got = by_name(check_capacity(capacity_facts(subids=0)))
    assert got["capacity"].status == "WARN" and got["capacity"].finding.startswith("0 sandboxes")


def test_cgroup_v2_rootful_without_controllers_warns() -> None:
    """Podman 6.1.1 rootful in a tree whose cgroup v2 root has only hugetlb (issue 32)."""
    bare = check_cgroups("v2", False, ["hugetlb"], "Podman's /info")
    assert bare.status == "WARN" and "cpu, memory, pids not available to Podman" in bare.finding
    assert "asks for no such limit" in bare.finding
    assert check_cgroups("v2", False, ["cpu", "memory", "pids"], "x").status == "OK"
    assert check_cgroups("v2", False, None, "").status == "OK"  # an older Podman: its list unknown
