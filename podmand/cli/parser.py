"""The command line's shape: ``podmand [serve] | ctl | doctor | health | completion``.

Its own module so that ``completion`` can walk the tree it builds and ``__main__``
can run what it parsed, neither importing the other. Each tool's module adds its
own subcommand (``add_parser``), so a new flag is written once, beside its command.
A command line naming its command builds that subcommand alone, importing only its
module (``ctl`` loads no doctor, ``--version`` no tool and no config); help, completion
and a mistyped command get the whole tree.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

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


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``command`` (the first word of a command line
    :func:`with_default_command` made) limits it to that subcommand, ``--version`` to none;
    any other word, or None, builds them all."""
    p = Parser(
        prog="podmand",
        description="OpenShell compute driver for rootless Podman. "
        "Without a subcommand (flags of serve allowed), podmand serves.",
    )
    p.add_argument("--version", action=versions.VersionAction, help="versions of podmand, Python, libraries, Podman")
    sub = p.add_subparsers(dest="command", required=True)
    chosen = {command} if command in COMMANDS else set() if command == "--version" else set(COMMANDS)
    if "serve" in chosen:
        from .. import config  # the settings' parser: serve's (and doctor's) alone

        serve = sub.add_parser(
            "serve",
            help="serve the ComputeDriver gRPC API",
            description="Serve openshell.compute.v1.ComputeDriver on a Unix socket.",
            usage="%(prog)s [--config FILE] [--SETTING VALUE ...]",
        )
        config.add_arguments(serve)
    for name, module in TOOLS.items():
        if name in chosen:  # imported only when chosen: what a tool imports is its own start-up cost
            importlib.import_module(module).add_parser(sub)
    return p
