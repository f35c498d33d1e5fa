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

SETTING = "host_gateway_ip (--host-gateway-ip / OPENSHELL_PODMAN_HOST_GATEWAY_IP)"
DEFAULT_ENDPOINT = Settings().endpoint  # http://host.containers.internal:17670


def facts(recorded: dict[str, Any], machine: str = "") -> versionchecks.PodmanFacts:
    return podman_facts(msgspec.convert(recorded, Info), machine)


def releases(recorded: dict[str, Any], *, machine: str = "", host_gateway_ip: str = "",
             endpoint: str = DEFAULT_ENDPOINT) -> list[Check]:
    return check_releases(facts(recorded, machine), host_gateway_ip, endpoint)


@pytest.mark.parametrize(("recorded", "expected"), [
    (infos.ARCH_ROOTLESS_5_1, "pasta"), (infos.FEDORA40_ROOTLESS_DELEGATED, "pasta"),
    (infos.DEBIAN12_ROOTLESS_V1, "slirp4netns"), (infos.ROOTFUL_V1, ""),
])
def test_network_cmd_from_info_or_the_releases_default(recorded: dict[str, Any], expected: str) -> None:
    """/info says since 5.1; 5.0 defaults to pasta, 4.x to slirp4netns; rootful has none."""
    assert facts(recorded).network_cmd == expected


# ---------------------------------------------------------------- known-bad releases


def test_rootless_5_1_is_named_for_its_event_stream_and_its_host_gateway() -> None:
    """containers/podman#22881's host: both 5.1-5.2 bugs, each with its fix."""
    events, gateway = releases(infos.ARCH_ROOTLESS_5_1)
    assert (events.status, gateway.status) == ("WARN", "WARN")
    assert "response head only with its first event (5.1.0-5.2.x" in events.finding
    assert "serve causes an event on each subscription" in events.finding
    assert events.fix == "upgrade Podman to 5.3.0 or newer"
    assert "containers/podman#22881" in gateway.finding and "HostGatewayUnresolved" in gateway.finding
    assert gateway.fix.startswith(f"on such a host set {SETTING} to an IP address of this host")
    assert gateway.fix.endswith("or upgrade Podman to 5.3.0 or newer")


def test_with_host_gateway_ip_set_podman_is_not_asked_for_host_gateway() -> None:
    [events] = releases(infos.ARCH_ROOTLESS_5_1, host_gateway_ip="192.168.1.20")
    assert "first event" in events.finding


def test_rootful_5_2_keeps_only_the_event_stream_bug() -> None:
    [events] = releases(infos.info("5.2.2", rootless=False))
    assert "first event" in events.finding and events.status == "WARN"


@pytest.mark.parametrize(("machine", "version", "warned"), [
    ("applehv", "5.4.2", True), ("macOS", "5.5.2", True), ("wsl", "5.4.2", False), ("applehv", "5.6.0", False),
])
def test_podman_machine_before_5_6_has_no_host_gateway(machine: str, version: str, warned: bool) -> None:
    """gvproxy-based machines (not WSL) before 5.6.0: containers/podman#21681."""
    found = releases(infos.info(version), machine=machine)
    gateway = [c for c in found if "#21681" in c.finding]
    assert bool(gateway) is warned
    if warned:
        assert "getent hosts host.containers.internal" in gateway[0].fix
        assert gateway[0].fix.endswith("or upgrade Podman to 5.6.0 or newer")


def test_before_4_7_host_openshell_internal_gets_no_address() -> None:
    """Podman 4.3.1 (this host) writes host-gateway into /etc/hosts as it is: an endpoint on
    host.openshell.internal cannot resolve; the default one (host.containers.internal) can."""
    [warned] = releases(infos.DEBIAN12_ROOTLESS_V1, endpoint="http://host.openshell.internal:17670")
    assert warned.status == "WARN" and "came in 4.7.0" in warned.finding
    [fine] = releases(infos.DEBIAN12_ROOTLESS_V1)
    assert fine.status == "OK"
    assert releases(infos.DEBIAN12_ROOTLESS_V1, endpoint="http://host.openshell.internal:1",
                    host_gateway_ip="10.0.0.2")[0].status == "OK"


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


def test_doctor_runs_the_version_checks_on_podmans_info(tmp: Path, fake: FakeLibpod,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """diagnose() reads /info once and adds these checks after cgroups, from Podman's own
    controller list (the one GetCapabilities follows)."""
    monkeypatch.setattr(report, "machine_facts", lambda: "")
    fake.route("GET", "/info", (200, {}, infos.ARCH_ROOTLESS_5_1))
    settings = Settings(podman_socket=fake.path, state_dir=str(tmp / "state"), socket=str(tmp / "run" / "d.sock"))
    checks = asyncio.run(report.diagnose(settings))
    names = [c.name for c in checks]
    at = names.index("cgroups")
    assert names[at:at + 5] == ["cgroups", "podman release", "podman release", "event logger", "runtime"]
    assert "gateway reach" in names[at + 5:]  # netchecks.py's, after the images
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
