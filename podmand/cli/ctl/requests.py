"""What ``podmand ctl`` sends: the sandbox a ``create`` command line describes, the
metadata ctl negotiates with (the gateway's own), and copies safe to print.

Apart from the command line (client.py) and the commands (commands.py) because
both need it: the parser raises :class:`Usage`, the commands build and redact.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import TYPE_CHECKING

from ... import __version__

if TYPE_CHECKING:  # protobuf loads when a command needs it, not at start-up
    from ..._proto import compute_driver_pb2 as pb
    from ..._proto import extension_pb2 as ext

IMPLEMENTATION_NAME = "podmand/ctl"


class Usage(Exception):
    """A command line that cannot be turned into a request (exit 2, like argparse)."""


def _read_text(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError:
        raise Usage(f"{path}: not UTF-8 text") from None


def build_sandbox(args: argparse.Namespace) -> pb.DriverSandbox:
    """The DriverSandbox a ``create`` command line describes."""
    from google.protobuf import json_format

    from ..._proto import compute_driver_pb2 as pb

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    flags = [f"--{n}" for n in ("id", "name", "workspace", "image", "cpu", "memory") if getattr(args, n) is not None]
    flags += ["--env"] if args.env else []
    if args.spec is not None:
        if flags or cmd:
            raise Usage(f"--spec excludes {', '.join(flags) or 'a command'}")
        if args.spec == "-" and args.launch_file == "-":
            raise Usage("--spec and --launch-file cannot both read stdin")
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
    if args.launch_file:
        bundle = _read_text(args.launch_file).strip()
        if not bundle:
            raise Usage(f"--launch-file {args.launch_file}: empty")
        box.spec.launch_authentication = bundle.encode()
    return box


def gateway_metadata() -> ext.PeerMetadata:
    """ctl asks as a gateway would: the same protocol and capabilities."""
    from ..._proto import extension_pb2 as ext
    from ...negotiation import CONTRACT, LAUNCH_AUTHENTICATION, PROTOCOL_MAJOR, PROTOCOL_MINOR

    return ext.PeerMetadata(
        protocol_version=ext.ProtocolVersion(major=PROTOCOL_MAJOR, minor=PROTOCOL_MINOR),
        implementation_name=IMPLEMENTATION_NAME,
        implementation_version=__version__,
        supported_capabilities=[CONTRACT, LAUNCH_AUTHENTICATION],
        required_capabilities=[CONTRACT],
    )


def redact(sandbox: pb.DriverSandbox) -> pb.DriverSandbox:
    """A copy safe to print: the token and launch bundle blanked (snapshots carry
    no spec today; this keeps it so if that ever changes)."""
    copy = type(sandbox)()
    copy.CopyFrom(sandbox)
    if copy.HasField("spec"):
        copy.spec.ClearField("sandbox_token")
        copy.spec.ClearField("launch_authentication")
    return copy
