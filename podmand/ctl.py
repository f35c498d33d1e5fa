"""``podmand ctl``: an operator's client for a running podmand, over its Unix socket.

It speaks the same ComputeDriver API as the gateway (so what it shows is what the
gateway sees) and never prints secrets: sandbox tokens are read from files, and
tokens and launch bundles are blanked from anything it echoes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TextIO

from . import __version__
from .health import driver_socket

IMPLEMENTATION_NAME = "podmand/ctl"
MESSAGE_WIDTH = 60


class Usage(Exception):
    """A command line that cannot be turned into a request (exit 2, like argparse)."""


def _common(p: argparse.ArgumentParser, *, top: bool) -> None:
    """Shared options, accepted before or after the command; a command's copy
    defaults to SUPPRESS so it never overwrites a value given before the command."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    p.add_argument(
        "--socket",
        default=default(None),
        help="driver socket (default: OPENSHELL_COMPUTE_DRIVER_SOCKET or the default path)",
    )
    p.add_argument("--json", action="store_true", default=default(False), help="machine-readable output")
    p.add_argument(
        "--timeout",
        type=float,
        default=default(60.0),
        help="seconds per call; for create --wait, for the whole wait (default: 60)",
    )


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "ctl",
        help="inspect and operate sandboxes of a running podmand",
        description="Talk to a running podmand over its Unix socket, as the gateway would.",
    )
    _common(p, top=True)
    cmds = p.add_subparsers(dest="ctl_command", required=True, metavar="<command>")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = cmds.add_parser(name, help=help, description=help)
        _common(c, top=False)
        return c

    command("caps", "GetCapabilities, negotiating as a contract gateway")
    command("list", "list sandboxes")
    for name, text in (
        ("get", "show one sandbox"),
        ("stop", "stop a sandbox (its container stays)"),
        ("start", "start a stopped sandbox; prints the new runtime identity"),
        ("delete", "delete a sandbox and its workspace volume"),
    ):
        command(name, text).add_argument("id", help="sandbox id")
    command("watch", "stream sandbox events until interrupted")

    c = command("create", "create a sandbox; prints its id and runtime identity")
    c.add_argument("--spec", metavar="FILE", help="a DriverSandbox as JSON ('-': stdin); excludes the spec flags")
    c.add_argument("--id", help="sandbox id (default: a new UUID)")
    c.add_argument("--name", help="sandbox name (required without --spec)")
    c.add_argument("--workspace", help="workspace (default: default)")
    c.add_argument("--image", help="sandbox image (default: the driver's)")
    c.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="user environment (repeatable)")
    c.add_argument("--cpu", help="CPU limit, e.g. 500m or 2")
    c.add_argument("--memory", help="memory limit, e.g. 512Mi")
    c.add_argument("--token-file", metavar="PATH", help="file holding the sandbox token (never pass it as an argument)")
    c.add_argument("--wait", action="store_true", help="wait until Ready=True (exit 0) or a terminal failure (exit 1)")
    c.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the workload command")


# ---- building requests


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def build_sandbox(args: argparse.Namespace) -> Any:
    """The DriverSandbox a ``create`` command line describes."""
    from google.protobuf import json_format

    from ._proto import compute_driver_pb2 as pb

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    flags = [f"--{n}" for n in ("id", "name", "workspace", "image", "cpu", "memory") if getattr(args, n) is not None]
    flags += ["--env"] if args.env else []
    if args.spec is not None:
        if flags or cmd:
            raise Usage(f"--spec excludes {', '.join(flags) or 'a command'}")
        if args.spec == "-" and args.token_file == "-":
            raise Usage("--spec and --token-file cannot both read stdin")
        box = pb.DriverSandbox()
        try:
            json_format.Parse(_read_text(args.spec), box)
        except json_format.ParseError as exc:
            raise Usage(f"--spec: {exc}") from None
        if not box.id:
            box.id = str(uuid.uuid4())
    else:
        if not args.name:
            raise Usage("create needs --name (or --spec)")
        box = pb.DriverSandbox(id=args.id or str(uuid.uuid4()), name=args.name, workspace=args.workspace or "default")
        for item in args.env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise Usage(f"--env {item!r}: expected KEY=VALUE")
            box.spec.environment[key] = value
        if args.image:
            box.spec.template.image = args.image
        if args.cpu:
            box.spec.template.resources.cpu_limit = args.cpu
        if args.memory:
            box.spec.template.resources.memory_limit = args.memory
        box.spec.command.extend(cmd)
    if args.token_file:
        token = _read_text(args.token_file).strip()
        if not token:
            raise Usage(f"--token-file {args.token_file}: empty")
        box.spec.sandbox_token = token
    return box


def gateway_metadata() -> Any:
    """ctl asks as a gateway would: the same protocol and capabilities."""
    from ._proto import extension_pb2 as ext
    from .negotiation import CONTRACT, LAUNCH_AUTHENTICATION, PROTOCOL_MAJOR, PROTOCOL_MINOR

    return ext.PeerMetadata(
        protocol_version=ext.ProtocolVersion(major=PROTOCOL_MAJOR, minor=PROTOCOL_MINOR),
        implementation_name=IMPLEMENTATION_NAME,
        implementation_version=__version__,
        supported_capabilities=[CONTRACT, LAUNCH_AUTHENTICATION],
        required_capabilities=[CONTRACT],
    )


# ---- output


def redact(sandbox: Any) -> Any:
    """A copy safe to print: the token and launch bundle blanked (snapshots carry
    no spec today; this keeps it so if that ever changes)."""
    copy = type(sandbox)()
    copy.CopyFrom(sandbox)
    if copy.HasField("spec"):
        copy.spec.ClearField("sandbox_token")
        copy.spec.ClearField("launch_authentication")
    return copy


def to_dict(message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    result: dict[str, Any] = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return result


def emit_json(value: Any, out: TextIO = sys.stdout) -> None:
    out.write(json.dumps(value, sort_keys=False) + "\n")
    out.flush()


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """``key: value`` pairs of a JSON-like value, nested keys dotted."""
    if isinstance(value, dict):
        if not value and prefix:
            yield prefix, ""
        for key, item in value.items():
            yield from flatten(item, f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, list):
        if all(not isinstance(v, dict | list) for v in value):
            yield prefix, ", ".join(_scalar(v) for v in value)
        else:
            for i, item in enumerate(value):
                yield from flatten(item, f"{prefix}[{i}]")
    else:
        yield prefix, _scalar(value)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def print_pairs(pairs: Iterator[tuple[str, str]] | list[tuple[str, str]]) -> None:
    for key, value in pairs:
        print(f"{key}: {value}".rstrip())


def ready_of(sandbox: Any) -> Any | None:
    for cond in sandbox.status.conditions:
        if cond.type == "Ready":
            return cond
    return None


def _ready_text(sandbox: Any) -> str:
    cond = ready_of(sandbox)
    return f"{cond.status}/{cond.reason}" if cond is not None else "-"


def _short(text: str, width: int = MESSAGE_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _time(ts: Any) -> str:
    if not ts.seconds and not ts.nanos:
        return "-"
    return str(ts.ToDatetime(tzinfo=UTC).isoformat(timespec="seconds"))


def sandbox_lines(sandbox: Any) -> list[tuple[str, str]]:
    s = sandbox.status
    pairs = [
        ("id", sandbox.id),
        ("name", sandbox.name),
        ("workspace", sandbox.workspace),
        ("container", s.name),
        ("instance", s.instance_id or "-"),
        ("deleting", _scalar(s.deleting)),
    ]
    if s.HasField("resolved_identity"):
        ident = s.resolved_identity
        groups = ",".join(str(g) for g in ident.supplementary_gids)
        pairs.append(("identity", f"uid={ident.uid} gid={ident.gid} groups={groups or '-'} source={ident.source}"))
    if s.HasField("fence_evidence"):
        pairs.append(("fence", f"generation={s.fence_evidence.generation} digest={s.fence_evidence.evidence_digest}"))
    for cond in s.conditions:
        pairs.append((f"condition {cond.type}", f"{cond.status} {cond.reason} since {_time(cond.transition_time)}"))
        if cond.message:
            pairs.append((f"  {cond.type} message", cond.message))
    return pairs


def table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def event_line(event: Any) -> str:
    """One human line per watch event."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds")
    kind = event.WhichOneof("payload")
    if kind == "sandbox":
        box = event.sandbox.sandbox
        cond = ready_of(box)
        detail = f"{cond.status}/{cond.reason} {_short(cond.message)}" if cond is not None else "-"
        return f"{now} snapshot {box.id} {detail}".rstrip()
    if kind == "platform_event":
        ev = event.platform_event.event
        return f"{now} event    {event.platform_event.sandbox_id} {ev.type} {ev.reason} {_short(ev.message)}".rstrip()
    if kind == "deleted":
        return f"{now} deleted  {event.deleted.sandbox_id} deleted"
    return f"{now} {kind or 'empty'}"


def event_dict(event: Any) -> dict[str, Any]:
    if event.WhichOneof("payload") == "sandbox":
        copy = type(event)()
        copy.CopyFrom(event)
        copy.sandbox.sandbox.CopyFrom(redact(event.sandbox.sandbox))
        event = copy
    return to_dict(event)


# ---- commands


class Ctl:
    def __init__(self, args: argparse.Namespace, channel: Any) -> None:
        from ._proto import compute_driver_pb2 as pb
        from ._proto import compute_driver_pb2_grpc as pb_grpc

        self.args = args
        self.pb = pb
        self.stub = pb_grpc.ComputeDriverStub(channel)  # type: ignore[no-untyped-call]
        self.timeout: float = args.timeout

    def do_caps(self) -> int:
        answer = self.stub.GetCapabilities(
            self.pb.GetCapabilitiesRequest(gateway=gateway_metadata()), timeout=self.timeout
        )
        if self.args.json:
            emit_json(to_dict(answer))
        else:
            print_pairs(flatten(to_dict(answer)))
        return 0

    def do_list(self) -> int:
        answer = self.stub.ListSandboxes(self.pb.ListSandboxesRequest(), timeout=self.timeout)
        boxes = sorted(answer.sandboxes, key=lambda b: (b.workspace, b.name, b.id))
        if self.args.json:
            emit_json([to_dict(redact(b)) for b in boxes])
            return 0
        rows = [["ID", "NAME", "WORKSPACE", "READY", "INSTANCE", "MESSAGE"]]
        for b in boxes:
            cond = ready_of(b)
            rows.append(
                [
                    b.id,
                    b.name,
                    b.workspace,
                    _ready_text(b),
                    b.status.instance_id or "-",
                    _short(cond.message) if cond is not None else "",
                ]
            )
        table(rows)
        return 0

    def do_get(self) -> int:
        answer = self.stub.GetSandbox(self.pb.GetSandboxRequest(sandbox_id=self.args.id), timeout=self.timeout)
        box = redact(answer.sandbox)
        if self.args.json:
            emit_json(to_dict(box))
        else:
            print_pairs(sandbox_lines(box))
        return 0

    def do_stop(self) -> int:
        self.stub.StopSandbox(self.pb.StopSandboxRequest(sandbox_id=self.args.id), timeout=self.timeout)
        if self.args.json:
            emit_json({"id": self.args.id, "stopped": True})
        else:
            print(f"stopped: {self.args.id}")
        return 0

    def do_start(self) -> int:
        answer = self.stub.StartSandbox(self.pb.StartSandboxRequest(sandbox_id=self.args.id), timeout=self.timeout)
        if self.args.json:
            emit_json({"id": self.args.id, "runtime_identity": answer.runtime_identity})
        else:
            print(f"started: {self.args.id}\nruntime_identity: {answer.runtime_identity}")
        return 0

    def do_delete(self) -> int:
        answer = self.stub.DeleteSandbox(self.pb.DeleteSandboxRequest(sandbox_id=self.args.id), timeout=self.timeout)
        if self.args.json:
            emit_json({"id": self.args.id, "deleted": answer.deleted})
        else:
            print(f"deleted: {_scalar(answer.deleted)}")
        return 0

    def do_create(self) -> int:
        box = build_sandbox(self.args)
        # Opened first so the wait cannot miss an early terminal state (it starts with a snapshot anyway).
        stream = (
            self.stub.WatchSandboxes(self.pb.WatchSandboxesRequest(), timeout=self.timeout) if self.args.wait else None
        )
        try:
            answer = self.stub.CreateSandbox(self.pb.CreateSandboxRequest(sandbox=box), timeout=self.timeout)
            if self.args.json and not self.args.wait:
                emit_json({"id": box.id, "runtime_identity": answer.runtime_identity})
            elif not self.args.json:
                print(f"id: {box.id}\nruntime_identity: {answer.runtime_identity}", flush=True)
            if stream is None:
                return 0
            return self._wait(stream, box.id, answer.runtime_identity)
        finally:
            if stream is not None:
                stream.cancel()

    def _wait(self, stream: Any, sandbox_id: str, identity: str) -> int:
        """Follow the sandbox until Ready=True or a Ready=False that will not recover."""
        import grpc

        from .names import TRANSIENT_REASONS

        last: Any = None
        outcome = "timeout"
        try:
            for event in stream:
                kind = event.WhichOneof("payload")
                if kind == "deleted" and event.deleted.sandbox_id == sandbox_id:
                    outcome = "deleted"
                    break
                if kind != "sandbox" or event.sandbox.sandbox.id != sandbox_id:
                    continue
                last = ready_of(event.sandbox.sandbox)
                if last is None:
                    continue
                if last.status == "True":
                    outcome = "ready"
                    break
                if last.status == "False" and last.reason.lower() not in TRANSIENT_REASONS:
                    outcome = "failed"
                    break
            else:
                outcome = "ended"
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        reason = last.reason if last is not None else ""
        message = last.message if last is not None else ""
        if self.args.json:
            emit_json(
                {
                    "id": sandbox_id,
                    "runtime_identity": identity,
                    "outcome": outcome,
                    "ready": to_dict(last) if last is not None else None,
                }
            )
        else:
            print(f"ready: {last.status if last is not None else '-'}\nreason: {reason or '-'}")
            if message:
                print(f"message: {message}")
            if outcome == "timeout":
                print(f"podmand ctl: not ready within {self.timeout:g}s", file=sys.stderr)
            elif outcome in ("deleted", "ended"):
                print(f"podmand ctl: sandbox {outcome} while waiting", file=sys.stderr)
        return 0 if outcome == "ready" else 1

    def do_watch(self) -> int:
        stream = self.stub.WatchSandboxes(self.pb.WatchSandboxesRequest())
        # SIGTERM ends the stream like Ctrl-C; SIGINT is set too because a shell
        # starts background jobs ('ctl watch &') with it ignored.
        previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for event in stream:
                if self.args.json:
                    emit_json(event_dict(event))
                else:
                    print(event_line(event), flush=True)
        except KeyboardInterrupt:
            stream.cancel()
            return 130
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        print("podmand ctl: the watch stream ended", file=sys.stderr)
        return 0


def run(args: argparse.Namespace) -> int:
    import grpc

    path = driver_socket(args.socket)
    command: str = args.ctl_command
    try:
        with grpc.insecure_channel(f"unix://{path}") as channel:
            action: Callable[[], int] = getattr(Ctl(args, channel), f"do_{command}")
            return action()
    except Usage as exc:
        print(f"podmand ctl {command}: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        print(f"podmand ctl: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            sys.stdout.close()
        return 0
    except OSError as exc:
        print(f"podmand ctl {command}: {exc}", file=sys.stderr)
        return 1
