"""The command line's shape: ``podmand [serve] | ctl | doctor | health | completion``.

Its own module so that ``completion`` can walk the tree it builds and ``__main__``
can run what it parsed, neither importing the other. Each tool's module adds its
own subcommand (``add_parser``), so a new flag is written once, beside its command.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from .. import config
from . import versions

# Subcommands living in their own modules: each has add_parser(subparsers) and run(args) -> int.
TOOLS = {
    "ctl": "podmand.cli.ctl.client",
    "doctor": "podmand.cli.doctor.report",
    "health": "podmand.cli.health",
    "completion": "podmand.cli.completion",
}
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
    for module in TOOLS.values():
        importlib.import_module(module).add_parser(sub)
    return p
