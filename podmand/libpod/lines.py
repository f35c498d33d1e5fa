"""Newline-delimited JSON bodies (events, pulls, waits), split as chunks arrive.

Memory stays bounded: a line over the limit is dropped as it streams in and
reported by its head and size, so one huge event cannot end a subscription.
Podman before 5.1 answers an event subscription 200 at once and, when its event
logger cannot be read (``none``), writes its error body after it as a line: that
is its refusal (:class:`PodmanError`), not an event.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import msgspec

from .errors import PodmanError, PodmanUnavailable
from .models import BadEvent, Event

MAX_LINE_BYTES = 4 * 1024 * 1024
HEAD_BYTES = 64 * 1024  # kept of an over-long line: enough to name its container
_ACTOR_ID = re.compile(rb'"(?:ID|id)"\s*:\s*"([0-9a-f]{12,64})"')


@dataclass
class Oversized:
    """A line longer than the limit: its head, and how long it was."""

    head: bytes
    size: int


async def split_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes | Oversized]:
    """Non-empty lines; one longer than the limit comes as :class:`Oversized`,
    its body dropped as it arrives."""
    buf = b""
    skipping: Oversized | None = None
    async for chunk in chunks:
        if skipping is not None:
            end = chunk.find(b"\n")
            if end < 0:
                skipping.size += len(chunk)
                continue
            skipping.size += end
            yield skipping
            skipping, chunk = None, chunk[end + 1 :]
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if len(line) > MAX_LINE_BYTES:
                yield Oversized(line[:HEAD_BYTES], len(line))
            elif line.strip():
                yield line
        if len(buf) > MAX_LINE_BYTES:
            skipping, buf = Oversized(buf[:HEAD_BYTES], len(buf)), b""
    if skipping is not None:
        yield skipping
    elif buf.strip():
        yield buf


async def strict_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Lines of a pull or wait answer, where an over-long one means a broken Podman."""
    async for line in split_lines(chunks):
        if isinstance(line, Oversized):
            raise PodmanUnavailable("Podman sent an over-long line")
        yield line


def _actor_id(data: bytes) -> str:
    match = _ACTOR_ID.search(data[:HEAD_BYTES])
    return match.group(1).decode() if match else ""


class _ErrorBody(msgspec.Struct):
    """Podman's error answer (utils.InternalServerError): what it writes into a stream it
    already answered 200 when reading its event log fails."""

    cause: str = ""
    message: str = ""
    response: int = 0


def in_band_error(line: bytes) -> PodmanError | None:
    """The error a line of an event stream carries instead of an event, if it is one."""
    try:
        body = msgspec.json.decode(line, type=_ErrorBody)
    except msgspec.DecodeError:
        return None
    if body.response < 400 or not (body.message or body.cause):
        return None
    return PodmanError(body.response, body.message or body.cause)


async def decode_events(lines: AsyncIterator[bytes | Oversized]) -> AsyncIterator[Event | BadEvent]:
    """Events, with every line that cannot be one as a :class:`BadEvent` naming its container;
    Podman's error written into the stream is raised (:class:`PodmanError`)."""
    async for line in lines:
        if isinstance(line, Oversized):
            yield BadEvent(_actor_id(line.head), f"event of {line.size} bytes is over the {MAX_LINE_BYTES}-byte limit")
            continue
        try:
            event = msgspec.json.decode(line, type=Event)
        except msgspec.DecodeError as exc:  # ValidationError included
            yield BadEvent(_actor_id(line), f"undecodable event: {exc}")
            continue
        if not event.Type and (error := in_band_error(line)) is not None:
            raise error
        yield event
