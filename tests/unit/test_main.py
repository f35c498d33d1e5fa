"""Unit tests for podmand's command line: serving is the default command."""

from __future__ import annotations

import pytest

from podmand.__main__ import parser, with_default_command


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], ["serve"]),
        (["--bind-socket", "/x.sock"], ["serve", "--bind-socket", "/x.sock"]),
        (["--enable-bind-mounts"], ["serve", "--enable-bind-mounts"]),
        (["serve", "--socket", "/x.sock"], ["serve", "--socket", "/x.sock"]),
        (["ctl", "list"], ["ctl", "list"]),
        (["doctor"], ["doctor"]),
        (["health"], ["health"]),
        (["--version"], ["--version"]),
        (["-h"], ["-h"]),
    ],
)
def test_with_default_command(argv: list[str], expected: list[str]) -> None:
    """No subcommand (or only serve's flags) means serve; subcommands and top-level flags are kept."""
    assert with_default_command(argv) == expected


def test_bare_invocation_parses_as_serve() -> None:
    """Upstream's launcher starts the driver with no arguments at all."""
    args = parser().parse_args(with_default_command([]))
    assert args.command == "serve"
    args = parser().parse_args(with_default_command(["--bind-socket", "/x.sock", "--bind-address", "127.0.0.1:1"]))
    assert (args.command, args.socket, args.listen_tcp) == ("serve", "/x.sock", "127.0.0.1:1")


def test_subcommands_still_parse() -> None:
    assert parser().parse_args(with_default_command(["health"])).command == "health"
    assert parser().parse_args(with_default_command(["doctor"])).command == "doctor"
