"""Unit tests for podmand.cli.doctor.versionchecks: what doctor says of a Podman by its release,
event logger and runtime, from recorded /info shapes (tests/fakes/infos.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest

from podmand.cli.doctor import report, versionchecks
from podmand.cli.doctor.hostchecks import Check, check_cgroups
from podmand.cli.doctor.versionchecks import (
    check_event_logger,
    check_releases,
    check_runtime,
    podman_facts,
)
from podmand.config import Settings
from podmand.libpod import Info
from tests.fakes import infos
from tests.fakes.libpod import FakeLibpod


def facts(recorded: dict[str, Any]) -> versionchecks.PodmanFacts:
    return podman_facts(msgspec.convert(recorded, Info))


def releases(recorded: dict[str, Any]) -> list[Check]:
    return check_releases(facts(recorded))


@pytest.mark.parametrize(("recorded", "expected"), [
    (infos.ARCH_ROOTLESS_5_1, "pasta"), (infos.FEDORA40_ROOTLESS_DELEGATED, "pasta"),
    (infos.DEBIAN12_ROOTLESS_V1, "slirp4netns"), (infos.ROOTFUL_V1, ""),
])
def test_network_cmd_from_info_or_the_releases_default(recorded: dict[str, Any], expected: str) -> None:
    """/info says since 5.1; 5.0 defaults to pasta, 4.x to slirp4netns; rootful has none."""
    assert facts(recorded).network_cmd == expected


# ---------------------------------------------------------------- known-bad releases


def test_rootless_5_1_is_named_for_its_event_stream_only() -> None:
    """containers/podman#22881's host: the 5.1-5.2 event stream bug with its fix. Its other
    bug, no address for host-gateway, no longer reaches podmand: the supervisor's
    host-gateway names are written as a literal address (pair/specs.py)."""
    [events] = releases(infos.ARCH_ROOTLESS_5_1)
    assert events.status == "WARN"
    assert "response head only with its first event (5.1.0-5.2.x" in events.finding
    assert "serve causes an event on each subscription" in events.finding
    assert events.fix == "upgrade Podman to 5.3.0 or newer"


def test_rootful_5_2_keeps_only_the_event_stream_bug() -> None:
    [events] = releases(infos.info("5.2.2", rootless=False))
    assert "first event" in events.finding and events.status == "WARN"


@pytest.mark.parametrize("version", ["5.3.0", "5.4.1"])
def test_the_unbounded_health_log_is_named_and_handled(version: str) -> None:
    [c] = releases(infos.info(version))
    assert c.status == "OK"
    assert "containers/podman#25473" in c.finding and "podmand bounds its sandboxes' itself" in c.finding
    assert "Podman 5.4.2" in c.finding


@pytest.mark.parametrize("recorded", [infos.FEDORA40_ROOTLESS_DELEGATED, infos.DEBIAN12_ROOTLESS_V1,
                                      infos.info("5.4.2")])
def test_releases_without_a_known_bug(recorded: dict[str, Any]) -> None:
    [c] = releases(recorded)
    assert c.status == "OK" and c.finding.startswith("no known Podman bug of ")


# ---------------------------------------------------------------- event logger, runtime, cgroups


def test_event_logger() -> None:
    assert check_event_logger(facts(infos.DEBIAN12_ROOTLESS_V1).event_logger).finding == (
        "Podman's events go to file, and its event stream serves podmand")
    assert check_event_logger("journald").status == "OK"
    none = check_event_logger("none")
    assert none.status == "WARN" and "cannot read events" in none.finding
    assert 'events_logger = "file"' in none.fix and "--exit-watch=wait" in none.fix


def test_runtime() -> None:
    runc = facts(infos.DEBIAN12_ROOTLESS_V1)
    assert check_runtime(runc.runtime, runc.runtime_version).finding.startswith("OCI runtime runc")
    crun = facts(infos.info("5.4.2", ociRuntime={"name": "crun", "version": "crun version 1.19\ncommit: x"}))
    assert check_runtime(crun.runtime, crun.runtime_version).finding == "OCI runtime crun (crun version 1.19)"
    other = check_runtime("krun", "")
    assert other.status == "WARN" and 'runtime = "crun"' in other.fix


def test_cgroupfs_rootless_on_v2_enforces_nothing() -> None:
    """containers/podman#21575's host lists every controller, yet rootless cgroupfs gives the
    container no cgroup: doctor says so rather than calling the delegation fine."""
    recorded = msgspec.convert(infos.ROOTLESS_CGROUPFS, Info).host
    c = check_cgroups("v2", True, recorded.cgroupControllers, "Podman's /info", recorded.cgroupManager)
    assert c.status == "WARN" and "no cgroup" in c.finding and 'cgroup_manager = "systemd"' in c.fix


# ---------------------------------------------------------------- in doctor


def test_doctor_runs_the_version_checks_on_podmans_info(tmp: Path, fake: FakeLibpod) -> None:
    """diagnose() reads /info once and adds these checks after cgroups, from Podman's own
    controller list (the one GetCapabilities follows)."""
    fake.route("GET", "/info", (200, {}, infos.ARCH_ROOTLESS_5_1))
    settings = Settings(podman_socket=fake.path, state_dir=str(tmp / "state"), socket=str(tmp / "run" / "d.sock"))
    checks = asyncio.run(report.diagnose(settings))
    names = [c.name for c in checks]
    at = names.index("cgroups")
    assert names[at:at + 4] == ["cgroups", "podman release", "event logger", "runtime"]
    assert "gateway reach" in names[at + 4:]  # netchecks.py's, after the images
    cgroups = checks[at]
    assert cgroups.status == "OK" and "(Podman's /info)" in cgroups.finding


@pytest.mark.parametrize(("recorded", "cgroup", "backend", "said"), [
    (infos.info("6.1.1", rootless=True), "v2", "netavark", "Podman 6.1.1: cgroup v2, netavark and pasta"),
    (infos.info("4.3.1", rootless=True, rootlessNetworkCmd="slirp4netns"), "v1", "netavark",
     "before upgrading to Podman 6, which runs only with them: cgroup v2 (this host: v1), "
     "pasta (this Podman: slirp4netns)"),
    (infos.info("5.4.2", rootless=False), "v2", "cni", "netavark (this Podman: cni)"),
    (infos.info("5.8.6", rootless=True, rootlessNetworkCmd="pasta"), "v2", "netavark",
     "this host has what Podman 6 requires"),
])
def test_podman6_requirements_are_named_before_an_upgrade(recorded: dict[str, Any], cgroup: str, backend: str,
                                                          said: str) -> None:
    """issue 32: Podman 6 refuses cgroup v1 and has neither CNI nor slirp4netns; doctor says
    what a host lacks for it, never worse than OK (today's Podman runs as it is)."""
    check = versionchecks.check_podman6(facts(recorded), cgroup, backend)
    assert check.status == "OK" and said in check.finding, check.finding
