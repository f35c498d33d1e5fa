"""``podmand ctl``: an operator's client for a running podmand, over its Unix socket.

It speaks the same ComputeDriver API as the gateway (so what it shows is what the
gateway sees) and never prints secrets: sandbox tokens are read from files, and
tokens and launch bundles are blanked from anything it echoes. What the API does
not carry (image, command, age, logs, Podman's own events) it reads from Podman.
This module is the command line; requests.py builds the requests, commands.py
runs the commands, view.py renders.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ...config import driver_socket
from .requests import Usage

if TYPE_CHECKING:  # protobuf loads when a command needs it, not at start-up
    pass



class _CommandParser(argparse.ArgumentParser):
    """A ctl command's parser: an unknown flag is reported with this command's usage
    (argparse would leave it to the top-level parser and print podmand's)."""

    def parse_known_args(  # type: ignore[override]  # typeshed overloads it; argparse calls it one way
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace or argparse.Namespace())
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def _common(p: argparse.ArgumentParser, *, top: bool) -> None:
    """Shared options, accepted before or after the command; a command's copy
    defaults to SUPPRESS so it never overwrites a value given before the command."""

    def default(value: object) -> object:
        return value if top else argparse.SUPPRESS

    p.add_argument(
        "--socket",
        default=default(None),
        help="driver socket (default: OPENSHELL_COMPUTE_DRIVER_SOCKET or the default path)",
    )
    p.add_argument(
        "--podman-socket",
        default=default(None),
        help="Podman API socket for logs, describe and list's IMAGE/AGE (default: found as serve finds it)",
    )
    p.add_argument("-o", "--output", choices=("wide", "json"), default=default(None), help="wide: nothing shortened")
    p.add_argument("--json", action="store_true", default=default(False), help="the same as -o json")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=default(60.0),
        help="seconds per call; for create --wait, seconds without a new event of the sandbox (default: 60)",
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "ctl",
        help="inspect and operate sandboxes of a running podmand",
        description="Talk to a running podmand over its Unix socket, as the gateway would.",
    )
    _common(p, top=True)
    cmds = p.add_subparsers(dest="ctl_command", required=True, metavar="<command>", parser_class=_CommandParser)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = cmds.add_parser(name, help=help, description=help)
        _common(c, top=False)
        return c

    command("caps", "GetCapabilities, negotiating as a contract gateway")
    c = command("list", "list sandboxes: ID NAME WORKSPACE READY IMAGE AGE MESSAGE")
    c.add_argument("-q", "--quiet", action="store_true", help="only the ids")
    for name, text in (
        ("get", "show one sandbox as the driver API reports it"),
        ("describe", "show one sandbox: spec summary, container, conditions, recent Podman events"),
        ("stop", "stop a sandbox (its container stays)"),
        ("start", "start a stopped sandbox; prints the new runtime identity"),
        ("delete", "delete a sandbox and its workspace volume"),
    ):
        command(name, text).add_argument("id", help="sandbox id")
    c = command("logs", "print the sandbox's output (its workload's log: the runtime's lines and the main process's)")
    c.add_argument("-f", "--follow", action="store_true", help="keep printing until the container stops")
    c.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    c.add_argument("id", help="sandbox id")
    c = command("watch", "stream sandbox events until interrupted")
    c.add_argument("--retry", action="store_true", help="reconnect with backoff when podmand goes away")

    c = command("create", "create a sandbox; prints its id and runtime identity")
    c.add_argument("--spec", metavar="FILE", help="a DriverSandbox as JSON ('-': stdin); excludes the spec flags")
    c.add_argument("--id", help="sandbox id (default: a new UUID)")
    c.add_argument("--name", help="sandbox name (required without --spec)")
    c.add_argument("--workspace", help="workspace (default: default)")
    c.add_argument("--image", help="sandbox image (default: the driver's)")
    c.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="user environment (repeatable)")
    c.add_argument("--cpu", help="CPU limit, e.g. 500m or 2")
    c.add_argument("--memory", help="memory limit, e.g. 512Mi")
    c.add_argument("--launch-file", metavar="PATH",
                   help="file holding the gateway's launch bundle (launch_authentication JSON) to send in place of "
                        "one ctl mints ('-': stdin; never pass it as an argument)")
    c.add_argument(
        "--wait",
        action="store_true",
        help="show each step on stderr until Ready=True (exit 0) or a terminal failure (exit 1)",
    )
    c.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the workload command")


def seconds(text: str) -> float:
    """A --timeout: finite and above zero (0, a negative or inf would fail every call at once)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    import grpc

    from ...host.discovery import NoPodmanSocket
    from ...libpod import PodmanError, PodmanUnavailable, PodmanUnreadable
    from ..unreachable import message
    from .commands import Ctl

    path = driver_socket(args.socket)
    command: str = args.ctl_command
    try:
        ctl = Ctl(args, path)
        try:
            action: Callable[[], int] = getattr(ctl, f"do_{command.replace('-', '_')}")
            return action()
        finally:
            ctl.close()
    except Usage as exc:
        print(f"podmand ctl {command}: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        print(f"podmand ctl: {message(path, exc.code().name, exc.details() or '')}", file=sys.stderr)
        return 1
    except NoPodmanSocket as exc:
        print(f"podmand ctl {command}: this needs Podman's API ({exc}); or pass --podman-socket", file=sys.stderr)
        return 1
    except (PodmanError, PodmanUnavailable, PodmanUnreadable) as exc:
        print(f"podmand ctl {command}: {exc}", file=sys.stderr)
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
