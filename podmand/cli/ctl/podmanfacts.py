"""What ``podmand ctl`` asks Podman directly: facts the driver API does not carry
(image, command, age, container state), a container's logs and its event log.

The socket is found as ``serve`` finds it (``--podman-socket``, then
``OPENSHELL_PODMAN_SOCKET``, then discovery). Everything here is read-only.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import BinaryIO

from ... import names
from ...host.discovery import discover
from ...libpod import PodmanClient, Timeouts
from ...libpod.times import parse_time


@dataclass
class Facts:
    """One sandbox as Podman records it (never its secrets or environment)."""

    sandbox_id: str
    image: str = ""
    command: list[str] = field(default_factory=list)
    created: datetime | None = None
    instance: str = ""
    container_id: str = ""
    container_name: str = ""
    state: str = ""
    exit_code: int | None = None


@dataclass
class PastEvent:
    when: datetime
    action: str
    exit_code: str = ""


def socket_path(explicit: str | None) -> str:
    """The Podman API socket that answers (raises discovery.NoPodmanSocket)."""
    return asyncio.run(discover(explicit or os.environ.get("OPENSHELL_PODMAN_SOCKET", ""), 1.0)).path


def _intent(labels: dict[str, str]) -> tuple[str, list[str]]:
    """(image, command) of the recorded create request ('' image: the driver's default)."""
    from ...sandbox.spec import decode_intent

    try:
        box = decode_intent(labels.get(names.INTENT, ""))
    except Exception:  # an unreadable record only hides two columns
        return "", []
    return box.spec.template.image, list(box.spec.command)


async def _facts(path: str, default_image: str, client: PodmanClient | None = None) -> dict[str, Facts]:
    client = client or PodmanClient(path, timeouts=Timeouts(request=10.0))
    try:
        vols = await client.list_volumes([f"{names.OWNER}={names.OWNER_VALUE}"])
        ctrs = await client.list_containers(names.MANAGED_FILTER)
    finally:
        await client.close()
    out: dict[str, Facts] = {}
    for vol in vols:
        labels = vol.labels or {}
        sandbox_id = labels.get(names.SANDBOX_ID, "")
        if sandbox_id and names.INTENT in labels:  # the record, not the pair's channel volume
            image, command = _intent(labels)
            out[sandbox_id] = Facts(sandbox_id, image or default_image, command, parse_time(vol.created_at),
                                    labels.get(names.INSTANCE, ""))
    for ctr in ctrs:
        labels = ctr.labels or {}
        sandbox_id = names.sandbox_of((ctr.names or [""])[0], labels)  # labels alone prove nothing
        if not sandbox_id:
            continue
        fact = out.setdefault(sandbox_id, Facts(sandbox_id, default_image, created=parse_time(ctr.created)))
        fact.container_id, fact.container_name, fact.state = ctr.id, (ctr.names or [""])[0], ctr.state
        fact.instance = fact.instance or labels.get(names.INSTANCE, "")
        fact.exit_code = ctr.exit_code if ctr.state in ("exited", "stopped") else None
    return out


def facts(path: str, default_image: str) -> dict[str, Facts]:
    """Podman-side facts of every podmand-owned sandbox, by sandbox id."""
    return asyncio.run(_facts(path, default_image))


def past_events(path: str, container_id: str, since: datetime | None) -> list[PastEvent]:
    """The container's events in Podman's log (oldest first) since ``since``."""

    async def go() -> list[PastEvent]:
        client = PodmanClient(path)
        try:
            start = int(since.timestamp()) - 1 if since else 0
            events = await client.past_events(container_id, start)
        finally:
            await client.close()
        out = []
        for ev in events:
            when = datetime.fromtimestamp(ev.timeNano / 1e9, UTC)
            code = (ev.Actor.attributes or {}).get("containerExitCode", "") if ev.Action in ("died", "exited") else ""
            out.append(PastEvent(when, ev.Action, code))
        return out

    return asyncio.run(go())


class Demux:
    """Splits libpod's multiplexed log stream (8-byte headers) into stdout and
    stderr writes; a stream without headers (a TTY container) passes as stdout."""

    def __init__(self, write: Callable[[int, bytes], None]) -> None:
        self.write = write
        self.buf = b""
        self.framed: bool | None = None

    def feed(self, data: bytes) -> None:
        self.buf += data
        if self.framed is None and len(self.buf) >= 8:
            self.framed = self.buf[0] in (0, 1, 2) and self.buf[1:4] == b"\0\0\0"
        if self.framed is False:
            self.write(1, self.buf)
            self.buf = b""
            return
        while len(self.buf) >= 8:
            size = int.from_bytes(self.buf[4:8], "big")
            if len(self.buf) < 8 + size:
                return
            stream, payload, self.buf = self.buf[0], self.buf[8 : 8 + size], self.buf[8 + size :]
            self.write(2 if stream == 2 else 1, payload)

    def close(self) -> None:
        if self.buf:
            self.write(1, self.buf)
            self.buf = b""


def _writer(out: BinaryIO, err: BinaryIO) -> Callable[[int, bytes], None]:
    def write(stream: int, payload: bytes) -> None:
        target = err if stream == 2 else out
        target.write(payload)
        target.flush()

    return write


def logs(path: str, container: str, *, follow: bool, tail: int | None,
         out: BinaryIO | None = None, err: BinaryIO | None = None) -> None:
    """Copy the container's logs to stdout/stderr as Podman recorded them (``follow``:
    until the container stops or the user interrupts)."""
    demux = Demux(_writer(out or sys.stdout.buffer, err or sys.stderr.buffer))

    async def go() -> None:
        client = PodmanClient(path)
        try:
            async with client.container_logs(container, follow=follow, tail=tail) as chunks:
                await _pump(chunks, demux)
        finally:
            await client.close()

    asyncio.run(go())


async def _pump(chunks: AsyncIterator[bytes], demux: Demux) -> None:
    async for chunk in chunks:
        demux.feed(chunk)
    demux.close()
