"""Podman's API when none is running: whether podmand starts the user's own service, and how.

When discovery finds no answering socket, autostart is on, no socket was named
explicitly and ``podman`` is installed, podmand runs ``podman system service
--time=0`` in the user's runtime directory (rundir.py) as a supervised child
(podmanservice.py), stopped when podmand exits. This module owns that decision
and the service's command and environment: a new store gets overlay
(storageguard.py), and the service gets no systemd hand-over of podmand's.

With ``health_check_interval`` set podmand probes sandbox health itself
(driver/observer.py); with systemd present Podman would also run a transient
``podman healthcheck run`` timer per container with a healthcheck, so every check
ran twice (and 5.3.0-5.4.1 keep every result of an API-made container). Then the
service gets ``DISABLE_HC_SYSTEMD=true``, which Podman reads (libpod's
disableHealthCheckSystemd, since 1.2) before making one. Without it (the default)
an image's own HEALTHCHECK is Podman's alone to run, and its timers stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import AsyncIterator, Mapping

from ..config import Settings, rundir
from .discovery import Attempt, NoPodmanSocket, discover, named_by, podman_socket_in
from .podmanservice import AutostartError, PodmanService
from .storageguard import storage_facts, storage_flags

log = logging.getLogger("podmand")


# ---------------------------------------------------------------- the command (pure)


def why_not_start(settings: Settings, podman: str | None, environ: Mapping[str, str] | None = None) -> str:
    """'' when podmand should start Podman's API itself, else why it does not."""
    named = named_by(settings.podman_socket, environ)
    if named:
        return f"podmand starts Podman's API only when no socket is named, and one is ({named})"
    if not settings.podman_autostart:
        return (
            "podmand did not start Podman's API: podman_autostart is off "
            "(--podman-autostart / PODMAND_PODMAN_AUTOSTART)"
        )
    if podman is None:
        return "podman is not installed (no 'podman' on PATH): install it (Debian/Ubuntu: apt-get install podman)"
    return ""


def service_argv(podman: str, socket_path: str, flags: list[str]) -> list[str]:
    return [podman, *flags, "system", "service", "--time=0", f"unix://{socket_path}"]


NO_HEALTH_TIMERS = ("DISABLE_HC_SYSTEMD", "true")  # when podmand probes: Podman's own timers would too


def service_env(environ: Mapping[str, str], runtime: str, *, podmand_probes: bool) -> dict[str, str]:
    """podmand's environment minus its own settings and systemd's hand-over variables (the
    service must not speak for podmand's unit), with the runtime directory Podman must agree on
    and, when podmand probes sandbox health itself, no healthcheck timers of Podman's own."""
    env = {
        k: v
        for k, v in environ.items()
        if not k.startswith(("OPENSHELL_", "PODMAND_", "LISTEN_")) and k != "NOTIFY_SOCKET"
    }
    env["XDG_RUNTIME_DIR"] = runtime
    if podmand_probes:
        env[NO_HEALTH_TIMERS[0]] = NO_HEALTH_TIMERS[1]
    return env


# ---------------------------------------------------------------- the hook used by serve


def prepare(settings: Settings, environ: Mapping[str, str] | None = None) -> PodmanService:
    """The service podmand would start, or NoPodmanSocket's reason not to (as AutostartError)."""
    env = os.environ if environ is None else environ
    podman = shutil.which("podman", path=env.get("PATH") or os.defpath)
    why = why_not_start(settings, podman, env)
    if why:
        raise AutostartError(why)
    assert podman is not None
    resolved = rundir.resolve(env)
    try:
        runtime = rundir.ensure(resolved)
    except rundir.RuntimeDirError as exc:
        raise AutostartError(str(exc)) from None
    sock = podman_socket_in(resolved)
    flags = storage_flags(storage_facts(env)) if os.geteuid() != 0 else []
    probes = settings.health_check_interval > 0
    return PodmanService(service_argv(podman, sock, flags), service_env(env, runtime, podmand_probes=probes), resolved)


@contextlib.asynccontextmanager
async def podman_api(settings: Settings) -> AsyncIterator[Attempt]:
    """An answering Podman API's socket (and where it was found): discovered, or a service
    started here and stopped when the block ends."""
    try:
        found = await discover(settings.podman_socket, settings.podman_wait)
    except NoPodmanSocket as exc:
        try:
            service = prepare(settings)
        except AutostartError as why:
            raise NoPodmanSocket(exc.attempts, str(why)) from None
    else:
        yield found
        return
    try:
        await service.start()
    except BaseException as exc:  # a cancellation (Ctrl-C) during the wait for it to answer, too
        await asyncio.shield(service.stop())
        if isinstance(exc, OSError):
            raise AutostartError(f"cannot run {service.argv[0]}: {exc.strerror or exc}") from None
        raise
    assert service.proc is not None
    storage = " (new store: overlay)" if service.overlay else ""
    log.info("started Podman's API service (pid %d) at %s%s", service.proc.pid, service.socket_path, storage)
    service.supervise()
    try:
        yield Attempt(service.socket_path, "", "started by podmand")
    finally:
        await service.stop()
