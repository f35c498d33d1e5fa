"""Unit tests for podmand's command line: serving is the default command."""

from __future__ import annotations

import os

import pytest

from podmand.__main__ import main
from podmand.cli.parser import parser, with_default_command


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


@pytest.mark.parametrize("argv", [["serve", "--bogus"], ["--bogus"], ["serve", "--socket", "/x.sock", "--bogus"]])
def test_unknown_serve_flag_shows_serves_usage_and_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """argparse would print the top-level usage (``podmand [-h] {serve,ctl,...}``), which says
    nothing about serve's flags: the error comes from serve, with its own usage line."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: podmand serve "), err
    assert err.rstrip().endswith("podmand serve: error: unrecognized arguments: --bogus")


def test_unknown_flag_of_a_tool_shows_that_tools_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["health", "--bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: podmand health "), err
    assert "podmand health: error: unrecognized arguments: --bogus" in err


def test_bad_setting_value_exits_2_with_one_line(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith(("OPENSHELL_", "PODMAND_"))]:
        monkeypatch.delenv(name)
    assert main(["serve", "--stop-timeout=abc"]) == 2
    assert capsys.readouterr().err == (
        "podmand: invalid setting stop_timeout (--stop-timeout / OPENSHELL_STOP_TIMEOUT): "
        "expected a whole number of seconds, got 'abc'\n"
    )
