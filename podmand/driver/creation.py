"""Two things of a sandbox's create beside its pair: whether podmand's own bind mounts carry
SELinux labels (decided once), and the wait for a create call Podman may still be
carrying out. Its own module because that call outlives whoever waits for it.

Podman carries out a create it was sent even when podmand stops waiting, so the call is
kept on the pending sandbox (``pairs.Pairs.create``), and a delete or a stop waits for it:
:func:`finished`.
"""

from __future__ import annotations

import asyncio
import logging

from ..libpod import PodmanClient
from ..sandbox import selinux
from .pending import Pending

log = logging.getLogger("podmand.driver")


class Relabel:
    """Whether podmand's own bind mounts get SELinux labels (selinux.py); with
    ``selinux = auto``, Podman is asked once."""

    def __init__(self, podman: PodmanClient, setting: str) -> None:
        self.podman = podman
        self.setting = setting
        self._decided: bool | None = None

    async def __call__(self) -> bool:
        if self._decided is None:
            enabled = False
            if self.setting == "auto":
                enabled, source = selinux.detect((await self.podman.served_info()).host.security.selinuxEnabled)
                log.info("SELinux is %s (from %s)", "enabled" if enabled else "not enabled", source)
            self._decided = selinux.relabel(self.setting, enabled)
            log.info("podmand's own bind mounts %s SELinux labels", "carry" if self._decided else "carry no")
        return self._decided


async def finished(pending: Pending) -> str:
    """Wait for the container create Podman was sent for ``pending``, if any (provisioning
    may have been cancelled while Podman carried it out); the ID it made, or ''."""
    call = pending.creating
    if call is None:
        return ""
    await asyncio.wait([call])
    if call.cancelled() or call.exception() is not None:  # retrieved: nobody else will
        return ""
    return call.result()[0]
