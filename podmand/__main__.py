"""Command line: ``podmand [serve] | ctl | doctor | health``.

With no subcommand podmand serves, so it starts the way upstream's launcher
starts the standalone driver: configured by its environment, no arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import logging
import os
import sys
from typing import Any

from . import config, logs
from .cli import versions
from .errors import StartupError

# Subcommands living in their own modules of podmand.cli: each has add_parser(subparsers) and run(args) -> int.
TOOLS = ("ctl", "doctor", "health", "completion")
COMMANDS = ("serve", *TOOLS)
_TOP_LEVEL = ("-h", "--help", "--version")


def with_default_command(argv: list[str]) -> list[str]:
    """``podmand [serve flags]`` is ``podmand serve [serve flags]``."""
    if argv and (argv[0] in COMMANDS or argv[0] in _TOP_LEVEL):
        return argv
    return ["serve", *argv]


class Parser(argparse.ArgumentParser):
    """Each (sub)command refuses arguments it does not know with its own usage line
    (``podmand serve --bogus`` shows serve's); argparse would hand them up to the
    top level, whose usage says nothing about them. Subcommands inherit the class."""

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        namespace, extra = super().parse_known_args(*args, **kwargs)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return namespace, extra


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="podmand",
        description="OpenShell compute driver for rootless Podman. "
        "Without a subcommand (flags of serve allowed), podmand serves.",
    )
    p.add_argument("--version", action=versions.VersionAction, help="versions of podmand, Python, libraries, Podman")
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="serve the ComputeDriver gRPC API",
        description="Serve openshell.compute.v1.ComputeDriver on a Unix socket.",
        usage="%(prog)s [--config FILE] [--SETTING VALUE ...]",
    )
    config.add_arguments(serve)
    for name in TOOLS:
        importlib.import_module(f"podmand.cli.{name}").add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    # tests/run.sh measures coverage in every process; the pex's venv skips coverage's .pth hook.
    if "COVERAGE_PROCESS_CONFIG" in os.environ and importlib.util.find_spec("coverage"):
        import coverage

        if coverage.Coverage.current() is None:
            coverage.process_startup()
    args = parser().parse_args(with_default_command(sys.argv[1:] if argv is None else argv))
    command = args.__dict__.pop("command")
    if command in TOOLS:
        result: int = importlib.import_module(f"podmand.cli.{command}").run(args)
        return result
    try:
        return serve_main(config.load(args))
    except StartupError as exc:
        print(f"podmand: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, config.ConfigError) else 1
    except Exception as exc:  # a bug: keep its traceback (through the redacting log handler)
        logging.getLogger("podmand").critical("unexpected error", exc_info=exc)
        print(f"podmand: unexpected error: {type(exc).__name__}: {logs.redact(str(exc))}", file=sys.stderr)
        return 1


def serve_main(settings: config.Settings) -> int:
    """Run the server (imported here: the tools need none of it). Every expected start-up
    failure is a StartupError (errors.py says which layer raises what): one
    ``podmand: <message>`` line, exit 1 (a setting: 2), never a traceback."""
    from .server import serve

    return asyncio.run(serve(settings))


if __name__ == "__main__":
    sys.exit(main())
