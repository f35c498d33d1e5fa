"""Command line: ``podmand [serve] | ctl | doctor | health``.

With no subcommand podmand serves, so it starts the way upstream's launcher
starts the standalone driver: configured by its environment, no arguments.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import TYPE_CHECKING

from .cli.parser import TOOLS, parser, with_default_command
from .errors import ConfigError, StartupError

if TYPE_CHECKING:
    from . import config


def main(argv: list[str] | None = None) -> int:
    # tests/run.sh measures coverage in every process; the pex's venv skips coverage's .pth hook.
    if "COVERAGE_PROCESS_CONFIG" in os.environ and importlib.util.find_spec("coverage"):
        import coverage

        if coverage.Coverage.current() is None:
            coverage.process_startup()
    words = with_default_command(sys.argv[1:] if argv is None else argv)
    args = parser(words[0]).parse_args(words)
    command = args.__dict__.pop("command")
    if command in TOOLS:
        result: int = importlib.import_module(TOOLS[command]).run(args)
        return result
    try:
        # Serving only, imported here: the tools start without the settings' and features' modules.
        from . import config
        from .sandbox.settings import CHECKS

        return serve_main(config.load(args, checks=CHECKS))
    except StartupError as exc:
        print(f"podmand: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except Exception as exc:  # a bug: keep its traceback (through the redacting log handler)
        import logging

        from . import logs

        logging.getLogger("podmand").critical("unexpected error", exc_info=exc)
        print(f"podmand: unexpected error: {type(exc).__name__}: {logs.redact(str(exc))}", file=sys.stderr)
        return 1


def serve_main(settings: config.Settings) -> int:
    """Run the server (imported here: the tools need none of it). Every expected start-up
    failure is a StartupError (errors.py says which layer raises what): one
    ``podmand: <message>`` line, exit 1 (a setting: 2), never a traceback."""
    import asyncio

    from .server import serve

    return asyncio.run(serve(settings))


if __name__ == "__main__":
    sys.exit(main())
