"""podmand.cli.doctor.eventchecks: the ``events`` and ``health timers`` checks of ``podmand doctor``,
decided from injected facts, and the facts gathered from the fake libpod and real processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from podmand.cli.doctor import eventchecks
from podmand.cli.doctor.eventchecks import EventFacts, TimerFacts, check_events, check_health_timers
from podmand.config import Settings
from podmand.libpod import Info
from tests.fakes.harness import libpod
from tests.wait import wait_until

USER_DROP_IN = (
    "mkdir -p ~/.config/systemd/user/podman.service.d && printf '[Service]\\nEnvironment=DISABLE_HC_SYSTEMD=true\\n' "
    "> ~/.config/systemd/user/podman.service.d/podmand.conf && systemctl --user daemon-reload && "
    "systemctl --user restart podman.service"
)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


# ---------------------------------------------------------------- events: decisions


def test_an_event_that_arrived_is_ok_and_podman_5_2_is_named() -> None:
    c = check_events(EventFacts("file", "4.3.1", answered=True, arrived=True), 5, "alice")
    assert (c.status, c.finding) == ("OK", "event logger file; an event podmand caused arrived on its subscription")
    c = check_events(EventFacts("journald", "5.2.2", answered=True, arrived=True), 5, "alice")
    assert c.status == "OK" and "answers a subscription only with its first event" in c.finding


def test_a_silent_stream_warns_naming_the_logger_the_fallback_and_both_fixes() -> None:
    c = check_events(EventFacts("journald", "4.9.3", answered=True, arrived=False), 5, "alice")
    assert c.status == "WARN"
    assert c.finding.startswith("event logger journald; Podman's event stream is silent")
    assert "conmon's exit files and a resync every 5 s" in c.finding
    assert 'events_logger = "file"' in c.fix and "usermod -aG systemd-journal alice" in c.fix
    never = check_events(EventFacts("journald", "5.2.2", answered=False, arrived=False), 5, "alice")
    assert "it never answered" in never.finding


def test_a_refused_subscription_fails_and_an_uncaused_event_points_at_the_state_dir() -> None:
    refused = check_events(EventFacts("journald", "4.3.1", True, False, refused="failed to get journal cursor"),
                           5, "alice")
    assert refused.status == "FAIL" and "failed to get journal cursor" in refused.finding
    uncaused = check_events(EventFacts("file", "4.3.1", True, False, error="no such file or directory"), 5, "a")
    assert uncaused.status == "WARN" and "no such file or directory" in uncaused.finding
    assert "'state dir' check" in uncaused.fix


# ---------------------------------------------------------------- events: facts from the fake


def event_facts(tmp_path: Path, **switches: bool) -> EventFacts:
    async def main() -> EventFacts:
        async with libpod() as (fake, client):
            for switch, value in switches.items():
                setattr(fake, switch, value)
            info = Info()
            return await eventchecks.event_facts(client, info, tmp_path, deadline=0.3)

    facts: EventFacts = run(main())
    assert list(tmp_path.iterdir()) == []  # the proof's directory is gone again
    return facts


def test_event_facts_from_podman_as_it_behaves(tmp_path: Path) -> None:
    assert event_facts(tmp_path) == EventFacts("", "", answered=True, arrived=True)
    assert event_facts(tmp_path, late_event_head=True) == EventFacts("", "", answered=True, arrived=True)
    assert event_facts(tmp_path, silent_events=True) == EventFacts("", "", answered=True, arrived=False)
    silent_5_2 = event_facts(tmp_path, silent_events=True, late_event_head=True)
    assert silent_5_2 == EventFacts("", "", answered=False, arrived=False)


REFUSED = {"cause": "x", "message": 'cannot read events with the "none" backend', "response": 500}


@pytest.mark.parametrize("reply", [
    (500, {}, REFUSED),  # Podman 5.1 and later: the answer itself
    (200, {"Transfer-Encoding": "chunked"}, json.dumps(REFUSED) + "\n"),  # before 5.1: in the stream it answered
], ids=["500", "in-band"])
def test_event_facts_name_a_refused_subscription(tmp_path: Path, reply: Any) -> None:
    async def main() -> EventFacts:
        async with libpod() as (fake, client):
            fake.route("GET", "/events", reply)
            return await eventchecks.event_facts(client, Info(), tmp_path, deadline=5)

    facts = run(main())
    assert not facts.arrived and 'cannot read events with the "none" backend' in facts.refused


# ---------------------------------------------------------------- health timers: decisions


def timers(**kw: Any) -> TimerFacts:
    base: dict[str, Any] = {"probes": True, "systemd": True, "in_container": False,
                            "service": "podman.service (pid 7, socket-activated)", "disabled": False, "rootless": True}
    return TimerFacts(**{**base, **kw})


def test_health_timers_ok_when_nothing_probes_twice() -> None:
    assert check_health_timers(timers(probes=False)).status == "OK"
    on = check_health_timers(timers(disabled=True))
    assert on.status == "OK" and "runs with DISABLE_HC_SYSTEMD=true" in on.finding
    assert check_health_timers(timers(systemd=False, disabled=None, service="")).status == "OK"


def test_health_timers_warn_with_the_drop_in_for_a_socket_activated_service() -> None:
    c = check_health_timers(timers())
    assert c.status == "WARN"
    assert c.finding.startswith("podman.service (pid 7, socket-activated) runs without DISABLE_HC_SYSTEMD=true")
    assert "each check runs twice" in c.finding and "#25473" in c.finding
    assert USER_DROP_IN in c.fix
    rootful = check_health_timers(timers(rootless=False)).fix
    assert "/etc/systemd/system/podman.service.d/podmand.conf && systemctl daemon-reload && " \
           "systemctl restart podman.service" in rootful
    unknown = check_health_timers(timers(in_container=True, systemd=False, disabled=None, service=""))
    assert unknown.status == "WARN" and "the Podman service may run without" in unknown.finding


# ---------------------------------------------------------------- health timers: facts from processes


def test_the_service_behind_a_socket_is_read_from_its_process(tmp_path: Path) -> None:
    """The socket's peer is the process that listens; its environment says whether timers are off."""
    sock = tmp_path / "p.sock"
    # bound under another name and renamed once listening: the socket's path appears only then
    listener = ("import os, socket, sys, time\n"
                "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1] + '.tmp'); s.listen()\n"
                "os.rename(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(600)\n")
    env = {"PATH": os.defpath, "DISABLE_HC_SYSTEMD": "true"}
    with subprocess.Popen([sys.executable, "-c", listener, str(sock)], env=env) as proc:
        try:
            wait_until(sock.exists, 10, "the listener's socket")
            facts = eventchecks.timer_facts(Settings(health_check_interval=30), str(sock), True, False)
        finally:
            proc.kill()
    assert facts.service == f"Podman's service (pid {proc.pid})"
    assert facts.disabled is True and facts.probes
    no_one = eventchecks.timer_facts(Settings(), str(tmp_path / "none.sock"), True, False)
    assert (no_one.service, no_one.disabled, no_one.probes) == ("", None, False)


def test_without_podmans_api_neither_is_checked() -> None:
    checks = run(eventchecks.checks(None, None, "", Settings(), "/s", "no Podman API socket answers", False))
    assert [(c.name, c.status) for c in checks] == [("events", "WARN"), ("health timers", "WARN")]
    assert all(c.finding == "not checked: no Podman API socket answers" for c in checks)
