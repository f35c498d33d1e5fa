"""``podmand --version``: podmand's own version and what it runs on, for bug reports."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
from importlib import metadata
from typing import Any

from .. import __version__

PODMAN_BUDGET = 1.0  # seconds the whole Podman part may take


def _dist(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "?"


def _grpc() -> str:
    try:
        import grpc
    except ImportError:
        return "?"
    return str(getattr(grpc, "__version__", "?"))


async def _podman() -> str:
    import msgspec

    from ..host.discovery import NoPodmanSocket, discover
    from ..libpod import PodmanClient, Timeouts

    try:  # the socket serve would use, without waiting for one that does not answer yet
        path = (await discover(os.environ.get("OPENSHELL_PODMAN_SOCKET", ""), 0.0)).path
    except NoPodmanSocket:
        return "Podman: no API socket answered"
    client = PodmanClient(path, timeouts=Timeouts(request=PODMAN_BUDGET))
    try:
        data: Any = msgspec.json.decode((await client.call("GET", "/version")).body)
    finally:
        await client.close()
    engine: Any = next((c for c in data.get("Components") or [] if c.get("Name") == "Podman Engine"), {})
    api = (engine.get("Details") or {}).get("APIVersion", "?")
    docker = data.get("ApiVersion", "?")
    return f"Podman {data.get('Version', '?')} (libpod API {api}, Docker API {docker}) at {path}"


def podman_line(budget: float = PODMAN_BUDGET) -> str:
    try:
        return asyncio.run(asyncio.wait_for(_podman(), budget))
    except TimeoutError:
        return f"Podman: no answer within {budget:g}s"
    except Exception as exc:  # a version line never fails the command
        return f"Podman: {type(exc).__name__}"


def text() -> str:
    python = f"{platform.python_version()} ({platform.python_implementation()}, {sys.executable})"
    return (
        f"podmand {__version__}\n"
        f"Python {python}\n"
        f"grpcio {_grpc()}, protobuf {_dist('protobuf')}, msgspec {_dist('msgspec')}\n"
        f"{podman_line()}\n"
    )


class VersionAction(argparse.Action):
    """``--version``: print :func:`text` and exit 0 (computed only when asked)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        sys.stdout.write(text())
        parser.exit(0)
