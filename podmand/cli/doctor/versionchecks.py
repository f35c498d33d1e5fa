"""The decisions of ``podmand doctor`` that depend on which Podman it is: the releases
known to misbehave for podmand, the event logger, the OCI runtime and what Podman 6 will
require (whether supervisors reach the gateway is host/gatewayreach.py's).

Pure, like hostchecks.py: each check takes facts from Podman's ``/info``, and the version
facts themselves are versions.py's, declared once with their sources. report.py calls
:func:`version_checks`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...libpod import Info, versions
from ...libpod.versions import Version, parse_version, shown, within
from .hostchecks import Check, ok, warn

RUNTIMES = ("crun", "runc")  # what podmand is tested with


@dataclass(frozen=True)
class PodmanFacts:
    version: str
    rootless: bool
    event_logger: str  # journald, file, none ("" when not reported)
    runtime: str  # crun, runc, ... ("" when not reported)
    runtime_version: str
    network_cmd: str  # pasta or slirp4netns for a rootless Podman's networks, "" rootful

    @property
    def parsed(self) -> Version | None:
        return parse_version(self.version)


def podman_facts(info: Info) -> PodmanFacts:
    runtime = info.host.ociRuntime
    return PodmanFacts(
        version=info.version.version,
        rootless=info.host.security.rootless,
        event_logger=info.host.eventLogger,
        runtime=runtime.name if runtime else "",
        runtime_version=runtime.version.splitlines()[0] if runtime and runtime.version else "",
        network_cmd=_network_cmd(info),
    )


def _network_cmd(info: Info) -> str:
    """The rootless network command: /info says since 5.1; before, pasta is 5.0's default
    and slirp4netns 4.x's (containers/common pkg/config/default.go, vendored at v4.9.3 and v5.0.0)."""
    host = info.host
    if not host.security.rootless:
        return ""
    if host.rootlessNetworkCmd:
        return host.rootlessNetworkCmd
    parsed = parse_version(info.version.version)
    return "pasta" if parsed is not None and parsed >= (5, 0, 0) else "slirp4netns"


# ---------------------------------------------------------------- releases


def check_releases(facts: PodmanFacts) -> list[Check]:
    """One WARN for each known Podman bug this Podman has that reaches podmand, with its fix;
    one OK naming what podmand works around itself when there is none."""
    name, v = "podman release", facts.parsed
    found: list[Check] = []
    if within(v, versions.EVENTS_HEAD_WITHHELD):
        found.append(warn(
            name,
            f"Podman {facts.version} sends a live event stream's response head only with its first event "
            "(5.1.0-5.2.x, containers/podman#23712): serve causes an event on each subscription to get it, "
            "and image lookups go uncached until an image event comes",
            f"upgrade Podman to {shown(versions.EVENTS_HEAD_WITHHELD[1])} or newer",
        ))
    if found:
        return found
    handled = ""
    if within(v, versions.HEALTH_LOG_UNBOUNDED):
        handled = (
            f"; Podman {facts.version} leaves a health log unbounded unless the create bounds it "
            "(5.3.0-5.4.1, containers/podman#25473): podmand bounds its sandboxes' itself "
            f"(other clients' containers need Podman {shown(versions.HEALTH_LOG_UNBOUNDED[1])})"
        )
    return [ok(name, f"no known Podman bug of {facts.version or 'this version'} reaches podmand{handled}")]


# ---------------------------------------------------------------- event logger and runtime


def check_event_logger(logger: str) -> Check:
    """podmand learns of exits and removals from Podman's event stream."""
    name = "event logger"
    if logger == "none":
        return warn(
            name,
            "Podman's events_logger is 'none': it keeps no events and its event stream fails ('cannot read "
            "events with the \"none\" backend'), so podmand hears of exits and removals only at each "
            "resync_interval",
            'set events_logger = "file" (or "journald") under [engine] in containers.conf for the user Podman '
            "runs as and restart the Podman service; or run podmand with --exit-watch=wait",
        )
    if not logger:
        return ok(name, "Podman did not report its events_logger")
    return ok(name, f"Podman's events go to {logger}, and its event stream serves podmand")


def check_runtime(runtime: str, version: str) -> Check:
    """The OCI runtime Podman runs sandboxes with."""
    name = "runtime"
    detail = f" ({version})" if version else ""
    if not runtime:
        return ok(name, "Podman did not report its OCI runtime")
    if runtime in RUNTIMES:
        note = " (a session keyring per container: see the capacity check)" if runtime == "runc" else ""
        return ok(name, f"OCI runtime {runtime}{detail}{note}")
    return warn(
        name,
        f"OCI runtime {runtime}{detail}: podmand is tested with {' and '.join(RUNTIMES)} only",
        'set runtime = "crun" under [engine] in containers.conf for the user Podman runs as, and restart '
        "the Podman service",
    )


def version_checks(info: Info) -> list[Check]:
    """Every check of this module, in order, for the Podman whose ``/info`` this is."""
    facts = podman_facts(info)
    return [
        *check_releases(facts),
        check_event_logger(facts.event_logger),
        check_runtime(facts.runtime, facts.runtime_version),
        check_podman6(facts, info.host.cgroupVersion, info.host.networkBackend),
    ]


def check_podman6(facts: PodmanFacts, cgroup_version: str, network_backend: str) -> Check:
    """What Podman 6 requires of a host, said before an upgrade meets it: cgroup v2 (it refuses
    v1: "Cgroups v1 not supported"), netavark (CNI is gone) and, rootless, pasta (slirp4netns is
    gone). Not a fault of today's Podman, so never worse than OK; limits where cgroup v2 has no
    controller for them are the cgroups check's."""
    parsed = facts.parsed
    if parsed is not None and parsed >= (6, 0, 0):
        return ok("podman 6", f"Podman {facts.version}: cgroup v2, netavark{' and pasta' if facts.rootless else ''}")
    lacks = []
    if cgroup_version and cgroup_version != "v2":
        lacks.append(f"cgroup v2 (this host: {cgroup_version})")
    if network_backend and network_backend != "netavark":
        lacks.append(f"netavark (this Podman: {network_backend})")
    if facts.rootless and facts.network_cmd == "slirp4netns":
        lacks.append("pasta (this Podman: slirp4netns)")
    if not lacks:
        return ok("podman 6", "this host has what Podman 6 requires: cgroup v2, netavark, pasta")
    return ok("podman 6", f"before upgrading to Podman 6, which runs only with them: {', '.join(lacks)}")
