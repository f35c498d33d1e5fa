"""Pulling an image for a sandbox: policy, registry credentials, progress, stalls."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from ..config import Settings
from ..libpod import ImageInspect, PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable
from ..sandbox import registryauth
from ..sandbox.pullprogress import HEAD_HOLD, Inactivity, PullProgress, PullStalled
from ..sandbox.pullprogress import HEARTBEAT as PULL_HEARTBEAT
from ..sandbox.pullprogress import REASON as PULLING
from .events import EventSink, platform_event
from .pending import ProvisionFailed


def supervisor_pull_policy(image: str) -> str:
    """Mutable tags are refreshed ('newer'); pinned ones only pulled when missing."""
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "missing"
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "newer" if tag in ("", "latest", "dev") else "missing"


class Puller:
    head_hold = HEAD_HOLD  # the least silence allowed before a pull's first line (pullprogress)

    def __init__(self, podman: PodmanClient, settings: Settings, sink: EventSink) -> None:
        self.podman = podman
        self.settings = settings
        self.sink = sink

    async def pull(self, ref: str, policy: str, reason: str, sandbox_id: str = "") -> ImageInspect:
        """Pull per policy (with the operator's registry credentials, abandoned when
        Podman goes silent) and pin the image (its ID, user and environment)."""
        if policy != "never":
            auth_file = self.settings.registry_auth_file
            try:
                cred = registryauth.for_image(auth_file, ref)
            except registryauth.AuthFileError as exc:
                raise ProvisionFailed(reason, f"pulling image {ref!r}: {exc}") from None
            try:
                await self.pull_reporting(ref, policy, sandbox_id, cred.header() if cred else "")
            except PullStalled as exc:
                raise ProvisionFailed(reason, str(exc)) from None
            except PodmanError as exc:
                if registryauth.is_auth_failure(exc.message):
                    why = registryauth.failure_message(ref, cred, auth_file, exc.message)
                    raise ProvisionFailed(reason, why) from None
                raise ProvisionFailed(reason, f"pulling image {ref!r} failed: {exc.message}") from exc
        # Inspected after every pull, never cached by the ID the pull's last line names: the
        # image's tags can change while its ID does not, and imagechecks.rootfs_refusal reads them.
        try:
            info = await self.podman.inspect_image(ref)
        except PodmanError as exc:
            if exc.status == 404:
                raise ProvisionFailed(reason, f"image {ref!r} is not present (pull policy {policy!r})") from exc
            raise
        if not info.id:
            raise ProvisionFailed(reason, f"inspecting image {ref!r} returned no immutable image ID")
        return info

    async def pull_reporting(
        self, ref: str, policy: str, sandbox_id: str, auth: str = "", clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Consume the pull stream, publishing rate-limited ``Pulling`` events (and a
        heartbeat while Podman is silent) for ``sandbox_id``; see pullprogress. Raises
        PullStalled (the stream closed, which stops Podman's pull) after
        ``pull_inactivity_timeout`` seconds without a line (``head_hold`` at least before
        the first: Podman 6 holds it)."""
        progress = PullProgress(ref, clock())
        quiet = Inactivity(self.settings.pull_inactivity_timeout, clock(), first=self.head_hold)

        def report(meta: dict[str, str] | None) -> None:
            if meta is not None and sandbox_id:
                self.sink.publish(platform_event(sandbox_id, PULLING, progress.message(), metadata=meta))

        async with contextlib.aclosing(self.podman.pull_image(ref, policy, auth)) as lines:
            next_line: asyncio.Task[Any] | None = None
            try:
                while True:
                    next_line = next_line or asyncio.ensure_future(anext(lines))
                    left = quiet.remaining(clock())
                    wait = PULL_HEARTBEAT if left is None else max(0.0, min(PULL_HEARTBEAT, left))
                    done, _ = await asyncio.wait({next_line}, timeout=wait)
                    if not done:
                        if quiet.expired(clock()):
                            raise PullStalled(quiet.message(ref))
                        report(progress.heartbeat(clock()))
                        continue
                    try:
                        line = next_line.result()
                    except StopAsyncIteration:
                        next_line = None
                        return
                    next_line = None
                    quiet.touch(clock())
                    report(progress.feed(line.stream, clock()))
            finally:
                if next_line is not None:
                    next_line.cancel()
                    podman = (PodmanError, PodmanUnavailable, PodmanUnreadable)
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, *podman):
                        await next_line
