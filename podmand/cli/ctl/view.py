"""How ``podmand ctl`` shows things: pure functions from messages to text.

Human output may shorten a message to fit a column; ``-o wide`` and JSON never do.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TextIO

from ... import names
from ...sandbox import pullprogress

if TYPE_CHECKING:  # protobuf loads when a command needs it, not at start-up
    from google.protobuf.message import Message
    from google.protobuf.timestamp_pb2 import Timestamp

    from ..._proto import compute_driver_pb2 as pb
    from .podmanfacts import Facts, PastEvent

MESSAGE_WIDTH = 60
BAR_WIDTH = 24


def to_dict(message: Message) -> dict[str, object]:
    from google.protobuf import json_format

    result: dict[str, object] = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return result


def emit_json(value: object, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(value, sort_keys=False) + "\n")
    out.flush()


def scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def flatten(value: object, prefix: str = "") -> Iterator[tuple[str, str]]:
    """``key: value`` pairs of a JSON-like value, nested keys dotted."""
    if isinstance(value, dict):
        if not value and prefix:
            yield prefix, ""
        for key, item in value.items():
            yield from flatten(item, f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, list):
        if all(not isinstance(v, dict | list) for v in value):
            yield prefix, ", ".join(scalar(v) for v in value)
        else:
            for i, item in enumerate(value):
                yield from flatten(item, f"{prefix}[{i}]")
    else:
        yield prefix, scalar(value)


def pairs_text(pairs: Iterable[tuple[str, str]]) -> str:
    return "".join(f"{key}: {value}".rstrip() + "\n" for key, value in pairs)


def table_text(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n" for row in rows
    )


def short(text: str, width: int | None = MESSAGE_WIDTH) -> str:
    """One line; cut to ``width`` with an ellipsis unless ``width`` is None (wide)."""
    text = " ".join(text.split())
    if width is None or len(text) <= width:
        return text
    return text[: width - 1] + "…"


def ready_of(sandbox: pb.DriverSandbox) -> pb.DriverCondition | None:
    for cond in sandbox.status.conditions:
        if cond.type == names.READY:
            return cond
    return None


def ready_text(sandbox: pb.DriverSandbox) -> str:
    cond = ready_of(sandbox)
    return f"{cond.status}/{cond.reason}" if cond is not None else "-"


def timestamp(ts: Timestamp) -> str:
    if not ts.seconds and not ts.nanos:
        return "-"
    return str(ts.ToDatetime(tzinfo=UTC).isoformat(timespec="seconds"))


def age(seconds: float) -> str:
    """kubectl's compact age: 45s, 3m12s, 2h5m, 3d4h, 40d."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60}m" if s < 36000 else f"{s // 3600}h"
    return f"{s // 86400}d{(s % 86400) // 3600}h" if s < 864000 else f"{s // 86400}d"


def age_since(created: datetime | None, now: datetime | None = None) -> str:
    if created is None:
        return "-"
    return age(((now or datetime.now(UTC)) - created).total_seconds())


def list_rows(
    boxes: Sequence[pb.DriverSandbox], facts: Mapping[str, Facts], *, wide: bool, now: datetime | None = None
) -> list[list[str]]:
    """``list``'s table; ``facts`` maps a sandbox id to its Podman-side facts (image, created)."""
    head = ["ID", "NAME", "WORKSPACE", "READY", "IMAGE", "AGE"]
    rows = [head + (["INSTANCE", "MESSAGE"] if wide else ["MESSAGE"])]
    for b in boxes:
        fact = facts.get(b.id)
        cond = ready_of(b)
        message = short(cond.message, None if wide else MESSAGE_WIDTH) if cond is not None else ""
        row = [b.id, b.name, b.workspace, ready_text(b)]
        row += [fact.image if fact and fact.image else "-", age_since(fact.created if fact else None, now)]
        row += [b.status.instance_id or "-", message] if wide else [message]
        rows.append(row)
    return rows


def sandbox_pairs(sandbox: pb.DriverSandbox) -> list[tuple[str, str]]:
    """``get``'s key: value lines (messages whole)."""
    s = sandbox.status
    pairs = [
        ("id", sandbox.id),
        ("name", sandbox.name),
        ("workspace", sandbox.workspace),
        ("container", s.name),
        ("instance", s.instance_id or "-"),
        ("deleting", scalar(s.deleting)),
    ]
    if s.HasField("resolved_identity"):
        pairs.append(("identity", identity_text(s.resolved_identity)))
    if s.HasField("fence_evidence"):
        pairs.append(("fence", f"generation={s.fence_evidence.generation} digest={s.fence_evidence.evidence_digest}"))
    for cond in s.conditions:
        pairs.append((f"condition {cond.type}", f"{cond.status} {cond.reason} since {timestamp(cond.transition_time)}"))
        if cond.message:
            pairs.append((f"  {cond.type} message", cond.message))
    return pairs


def identity_text(ident: pb.ResolvedWorkloadIdentity) -> str:
    groups = ",".join(str(g) for g in ident.supplementary_gids)
    return f"uid={ident.uid} gid={ident.gid} groups={groups or '-'} source={ident.source}"


def _clock() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def event_line(event: pb.WatchSandboxesEvent, *, wide: bool = False) -> str:
    """One human line per watch event."""
    width = None if wide else MESSAGE_WIDTH
    now = _clock()
    kind = event.WhichOneof("payload")
    if kind == "sandbox":
        box = event.sandbox.sandbox
        cond = ready_of(box)
        detail = f"{cond.status}/{cond.reason} {short(cond.message, width)}" if cond is not None else "-"
        return f"{now} snapshot {box.id} {detail}".rstrip()
    if kind == "platform_event":
        ev = event.platform_event.event
        sandbox_id = event.platform_event.sandbox_id
        return f"{now} event    {sandbox_id} {ev.type} {ev.reason} {short(ev.message, width)}".rstrip()
    if kind == "deleted":
        return f"{now} deleted  {event.deleted.sandbox_id} deleted"
    return f"{now} {kind or 'empty'}"


# ---- create --wait: one line per step, a progress bar for pulls on a TTY


def step_line(event: pb.WatchSandboxesEvent) -> str | None:
    """The stderr line of a step of one sandbox (a platform event or a Ready change)."""
    kind = event.WhichOneof("payload")
    if kind == "platform_event":
        ev = event.platform_event.event
        text = ev.message or ev.metadata.get(names.PROGRESS_COMPLETE_LABEL, "")
        return f"{_clock()[11:19]}  {ev.reason:<12} {text}".rstrip()
    if kind == "sandbox":
        cond = ready_of(event.sandbox.sandbox)
        if cond is None:
            return None
        return f"{_clock()[11:19]}  {'Ready=' + cond.status:<12} {cond.reason}: {cond.message}".rstrip()
    return None


def is_pull_progress(event: pb.WatchSandboxesEvent) -> bool:
    return bool(
        event.WhichOneof("payload") == "platform_event" and event.platform_event.event.reason == pullprogress.REASON
    )


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{n}B"


def progress_bar(metadata: Mapping[str, str], width: int = BAR_WIDTH) -> str:
    """``[#####-----] 3/5 layers 12s image`` from a Pulling event's metadata; bytes
    drive the bar when Podman reported them, else layers done of layers seen."""
    meta = dict(metadata)
    done, seen = int(meta.get(pullprogress.KEY_BLOBS_DONE, 0)), int(meta.get(pullprogress.KEY_BLOBS_SEEN, 0))
    nbytes, total = meta.get(pullprogress.KEY_BYTES_DONE), meta.get(pullprogress.KEY_BYTES_TOTAL)
    if nbytes is not None and total is not None and int(total) > 0:
        fraction = int(nbytes) / int(total)
        counts = f"{_human_bytes(int(nbytes))}/{_human_bytes(int(total))}"
    else:
        fraction = done / seen if seen else 0.0
        counts = f"{done}/{seen} layers"
    filled = min(width, round(fraction * width))
    elapsed = meta.get(pullprogress.KEY_ELAPSED, "")
    image = meta.get(pullprogress.KEY_IMAGE, "")
    bar = "#" * filled + "-" * (width - filled)
    return f"Pulling [{bar}] {counts} {elapsed + 's' if elapsed else ''} {image}".rstrip()


Described = tuple[list[tuple[str, str]], list[tuple[str, list[str]]]]


def describe_text(described: Described) -> str:
    """kubectl-describe layout: ``Key:  value`` aligned, then titled tables indented."""
    pairs, tables = described
    width = max((len(k) for k, _ in pairs), default=0) + 2
    out = [f"{(key + ':').ljust(width)}{value}".rstrip() for key, value in pairs]
    for title, lines in tables:
        out.append(f"{title}:")
        out += [f"  {line}" for line in lines]
    return "\n".join(out) + "\n"


def event_dict(
    event: pb.WatchSandboxesEvent, redact: Callable[[pb.DriverSandbox], pb.DriverSandbox]
) -> dict[str, object]:
    """A watch event as JSON, a snapshot's secrets blanked by ``redact``."""
    if event.WhichOneof("payload") == "sandbox":
        copy = type(event)()
        copy.CopyFrom(event)
        copy.sandbox.sandbox.CopyFrom(redact(event.sandbox.sandbox))
        event = copy
    return to_dict(event)


def _runtime_identity(sandbox: pb.DriverSandbox, fact: Facts | None) -> str:
    if fact is None or not fact.instance:
        return "-"
    generation = sandbox.status.fence_evidence.generation if sandbox.status.HasField("fence_evidence") else ""
    return names.runtime_identity(fact.instance, generation or "0")


def _state(fact: Facts | None) -> str:
    if fact is None or not fact.container_id:
        return "no container yet"
    return f"{fact.state} (exit code {fact.exit_code})" if fact.exit_code is not None else fact.state


def describe_sections(
    sandbox: pb.DriverSandbox,
    fact: Facts | None,
    events: Sequence[PastEvent],
    problem: str,
    now: datetime | None = None,
) -> Described:
    """``describe``: the sandbox, its container, its conditions and Podman's events, nothing cut."""
    s = sandbox.status
    created = fact.created if fact is not None else None
    main = [
        ("Name", sandbox.name),
        ("ID", sandbox.id),
        ("Workspace", sandbox.workspace),
        ("Image", fact.image if fact is not None and fact.image else "-"),
        ("Command", " ".join(fact.command) if fact is not None and fact.command else "(the image's)"),
        ("Created", f"{created.isoformat(timespec='seconds')} ({age_since(created, now)} ago)" if created else "-"),
        ("Container", s.name or (fact.container_name.lstrip("/") if fact is not None else "") or "-"),
        ("Container ID", (fact.container_id[:12] if fact is not None and fact.container_id else "") or "-"),
        ("State", _state(fact)),
        ("Runtime identity", _runtime_identity(sandbox, fact)),
        ("Resolved identity", identity_text(s.resolved_identity) if s.HasField("resolved_identity") else "-"),
        ("Deleting", scalar(s.deleting)),
    ]
    if problem:
        main.append(("Podman", f"unavailable: {problem}"))
    cond_rows = [["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"]] + [
        [c.type, c.status, c.reason, timestamp(c.transition_time), " ".join(c.message.split()) or "-"]
        for c in s.conditions
    ]
    conditions = table_text(cond_rows).splitlines() if s.conditions else ["<none>"]
    event_rows = [["TIME", "ACTION", "EXIT CODE"]] + [
        [e.when.isoformat(timespec="seconds"), e.action, e.exit_code or ""] for e in events
    ]
    recent = table_text(event_rows).splitlines() if events else ["<none>"]
    return main, [("Conditions", conditions), ("Events (Podman)", recent)]


def describe_dict(
    sandbox: pb.DriverSandbox, fact: Facts | None, events: Sequence[PastEvent], problem: str
) -> dict[str, object]:
    podman: dict[str, object] | None = None
    if fact is not None:
        podman = {
            "image": fact.image,
            "command": fact.command,
            "created": fact.created.isoformat() if fact.created else None,
            "container_id": fact.container_id,
            "container_name": fact.container_name.lstrip("/"),
            "state": fact.state,
            "exit_code": fact.exit_code,
            "runtime_identity": _runtime_identity(sandbox, fact),
        }
    return {
        "sandbox": to_dict(sandbox),
        "podman": podman,
        "podman_error": problem or None,
        "events": [{"time": e.when.isoformat(), "action": e.action, "exit_code": e.exit_code or None} for e in events],
    }
