"""``podmand doctor`` on what Podman's service does that podmand's watching relies on:
whether its event stream delivers, and whether it runs healthcheck timers of its own.

Events: the event logger Podman's ``/info`` reports, and whether an event podmand
causes arrives on a subscription like serve's (the same proof: eventproof.py). A
silent stream leaves exits to conmon's exit files and the shorter resync.
Health timers: podmand probes each sandbox's healthcheck itself; a Podman service on
systemd without ``DISABLE_HC_SYSTEMD=true`` also runs a ``podman healthcheck run``
timer per container, so each check runs twice. The service podmand starts has it
(autostart.py); for another one doctor reads the service process's environment (the
socket's peer, or systemd's podman.service when the socket is socket-activated).

Facts are gathered first, apart from the decisions (pure ``check_*``), as in doctor.py
and doctorchecks.py; :func:`checks` is the one entry doctor.py calls.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ... import names
from ...config import Settings
from ...host import autostart, enforcement, eventproof
from ...host.eventproof import Proof
from ...libpod import Info, PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable
from ...libpod.versions import EVENTS_HEAD_WITHHELD, parse_version, within
from .hostchecks import Check, fail, not_checked, ok, warn

SYSTEMD_MARKER = "/run/systemd/system"  # what Podman checks (sd_booted) before making timers
UNIT = "podman.service"
HC_VARIABLE, HC_VALUE = autostart.NO_HEALTH_TIMERS


# ---------------------------------------------------------------- facts


@dataclass(frozen=True)
class EventFacts:
    logger: str  # Podman's events_logger ("" when /info does not say)
    version: str
    answered: bool  # Podman answered the subscription (its head arrived)
    arrived: bool  # an event arrived on it within the deadline
    refused: str = ""  # why the subscription failed, when it did
    error: str = ""  # why the event podmand causes could not be made


async def event_facts(client: PodmanClient, info: Info, state_dir: Path,
                      deadline: float = eventproof.DEADLINE) -> EventFacts:
    """Subscribe as serve does and cause events until one arrives or ``deadline`` passes."""
    answered = asyncio.Event()
    proof = Proof()

    async def listen() -> None:
        async with client.events([f"{names.OWNER}={names.OWNER_VALUE}"]) as events:
            answered.set()
            async for _event in events:
                proof.heard()

    listener = asyncio.create_task(listen())
    proving = asyncio.create_task(proof.run(lambda: eventproof.cause(client, state_dir), deadline))
    refused = ""
    try:
        await asyncio.wait({listener, proving}, return_when=asyncio.FIRST_COMPLETED)
        if listener.done() and not proof.arrived.is_set():
            try:
                listener.result()
                refused = "Podman ended the event stream at once"
            except (PodmanError, PodmanUnavailable, PodmanUnreadable) as exc:
                refused = str(exc)
        else:
            await proving
    finally:
        proof.stop()
        for task in (listener, proving):
            task.cancel()
        await asyncio.gather(listener, proving, return_exceptions=True)
    return EventFacts(info.host.eventLogger, info.version.version, answered.is_set(), proof.arrived.is_set(),
                      refused, proof.error)


@dataclass(frozen=True)
class TimerFacts:
    probes: bool  # podmand sets a healthcheck (health_check_interval > 0)
    systemd: bool  # this host runs systemd (Podman's own check), so Podman can make timers
    in_container: bool  # podmand runs in a container: the host's systemd is not seen from here
    service: str  # which Podman service process was read ("" when none could be)
    disabled: bool | None  # DISABLE_HC_SYSTEMD=true in its environment; None: not known
    rootless: bool


def peer_pid(path: str) -> int | None:
    """The pid of the process that made the listening socket at ``path`` (None: unknown)."""
    found = enforcement.socket_listener(path)
    return (found[0] or None) if found else None


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def process_env(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {key: value for key, _, value in pairs}


def unit_main_pid(rootless: bool) -> int | None:
    """podman.service's running process, asked of systemd (the user's manager when rootless)."""
    argv = ["systemctl", *(["--user"] if rootless else []), "show", UNIT, "--property=MainPID", "--value"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip()
    return int(text) if out.returncode == 0 and text.isdigit() and int(text) > 0 else None


def service_env(socket_path: str, rootless: bool) -> tuple[str, dict[str, str] | None]:
    """Which process serves ``socket_path`` and its environment: the socket's own process, or,
    when systemd holds the socket (socket activation), podman.service's."""
    pid = peer_pid(socket_path)
    if pid is None:
        return "", None
    if process_name(pid) == "systemd":
        main = unit_main_pid(rootless)
        if main is None:
            return f"{UNIT} (socket-activated)", None
        pid, how = main, f"{UNIT} (pid {main}, socket-activated)"
    else:
        how = f"Podman's service (pid {pid})"
    return how, process_env(pid)


def timer_facts(settings: Settings, socket_path: str, rootless: bool, in_container: bool) -> TimerFacts:
    how, env = service_env(socket_path, rootless)
    disabled = None if env is None else env.get(HC_VARIABLE) == HC_VALUE
    return TimerFacts(bool(settings.health_check_interval), os.path.isdir(SYSTEMD_MARKER), in_container,
                      how, disabled, rootless)


# ---------------------------------------------------------------- decisions (pure)


def late_head(version: str) -> bool:
    return within(parse_version(version), EVENTS_HEAD_WITHHELD)


def check_events(f: EventFacts, resync_silent: float, user: str) -> Check:
    """OK when an event podmand caused arrived; FAIL when Podman refuses the subscription (serve
    could not watch at all); WARN when nothing arrives (serve warns too, and resyncs every
    ``resync_silent`` seconds)."""
    name = "events"
    logger = f"event logger {f.logger}" if f.logger else "event logger not reported"
    if f.arrived:
        note = (f"; Podman {f.version} answers a subscription only with its first event "
                "(containers/podman#23712): serve causes one") if late_head(f.version) else ""
        return ok(name, f"{logger}; an event podmand caused arrived on its subscription{note}")
    if f.refused:
        return fail(name, f"{logger}; Podman refused podmand's event subscription: {f.refused}",
                    eventproof.fix(user))
    served = (" (it never answered: serve goes on without its answer)" if not f.answered else "")
    lean = (f"serve warns at start and takes exits from conmon's exit files and a resync every {resync_silent:g} s"
            if resync_silent else "serve warns at start and takes exits from conmon's exit files and its resyncs")
    if f.error:
        return warn(name, f"{logger}; {eventproof.silent(f.logger, f.error)}{served}",
                    "podmand creates that container rooted in a directory of its state directory: see the "
                    "'state dir' check, and what Podman said")
    return warn(name, f"{logger}; {eventproof.silent(f.logger, '')}{served}: {lean}", eventproof.fix(user))


def drop_in(rootless: bool) -> str:
    """The systemd drop-in that gives podman.service DISABLE_HC_SYSTEMD=true, as commands."""
    line = f"[Service]\\nEnvironment={HC_VARIABLE}={HC_VALUE}\\n"
    if rootless:
        where, ctl = "~/.config/systemd/user/podman.service.d", "systemctl --user"
    else:
        where, ctl = "/etc/systemd/system/podman.service.d", "systemctl"
    return (f"mkdir -p {where} && printf '{line}' > {where}/podmand.conf && {ctl} daemon-reload && "
            f"{ctl} restart {UNIT}")


def check_health_timers(f: TimerFacts) -> Check:
    """OK when nothing probes twice: no healthchecks, no systemd, or Podman's timers turned off."""
    name = "health timers"
    if not f.probes:
        return ok(name, "health_check_interval is 0: sandboxes get no healthcheck, nothing is probed twice")
    if f.disabled:
        return ok(name, f"{f.service} runs with {HC_VARIABLE}={HC_VALUE}: only podmand probes sandbox health")
    if not f.systemd and not f.in_container:
        return ok(name, f"no systemd on this host ({SYSTEMD_MARKER}): Podman makes no healthcheck timers, "
                        "podmand probes")
    who = f.service or "the Podman service"
    how = "runs without" if f.disabled is False else "may run without (its environment cannot be read from here)"
    return warn(
        name,
        f"{who} {how} {HC_VARIABLE}={HC_VALUE}: on systemd Podman runs its own 'podman healthcheck run' timer "
        "for every sandbox besides podmand's probes, so each check runs twice (and Podman 5.3.0 to 5.4.1 keep "
        "every result in the container's health log, containers/podman#25473)",
        f"on Podman's host, as the Podman user: {drop_in(f.rootless)} (sandboxes started before keep their "
        f"timers until they stop); a service started by hand: start it with {HC_VARIABLE}={HC_VALUE} in its "
        "environment",
    )


# ---------------------------------------------------------------- the entry doctor.py calls


async def checks(client: PodmanClient | None, info: Info | None, socket_path: str, settings: Settings,
                 state_dir: str, why: str, in_container: bool) -> list[Check]:
    """The ``events`` and ``health timers`` checks (both "not checked" without Podman's API)."""
    if client is None or info is None:
        return [not_checked("events", why), not_checked("health timers", why)]
    rootless = info.host.security.rootless
    events = await event_facts(client, info, Path(state_dir))
    timers = await asyncio.to_thread(timer_facts, settings, socket_path, rootless, in_container)
    every = eventproof.silent_interval(settings.resync_interval, settings.resync_interval_silent)
    return [check_events(events, every, eventproof.this_user()), check_health_timers(timers)]
