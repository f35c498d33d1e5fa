"""``podmand --version``: podmand's own version and what it runs on, for bug reports.

Quick, as a first command should be: the library versions are read without importing
grpc or ``importlib.metadata``, and Podman's from the headers of its ``/_ping``, which
answers at once where ``/version`` may take over half a second (Podman 4.3.1);
``/version`` only when a header is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

from .. import __version__

PODMAN_BUDGET = 1.0  # seconds the whole Podman part may take


def _grpc() -> str:
    """grpcio's version from the one-line module it ships it in (grpc/_grpcio_metadata.py),
    without importing grpc: that import alone would cost more than the rest of --version."""
    try:
        spec = importlib.util.find_spec("grpc")
        if spec is None or spec.origin is None:
            return "?"
        text = (Path(spec.origin).parent / "_grpcio_metadata.py").read_text()
        found = re.search(r"__version__\s*=\s*['\"]+([^'\"]+)", text)
    except (ImportError, OSError):
        return "?"
    return found.group(1) if found else "?"


def _protobuf() -> str:
    try:
        import google.protobuf  # its package module only: the version string
    except ImportError:
        return "?"
    return str(getattr(google.protobuf, "__version__", "?"))


def _msgspec() -> str:
    import msgspec  # the libpod client loads it anyway

    return str(getattr(msgspec, "__version__", "?"))


def from_ping(headers: dict[str, str]) -> tuple[str, str] | None:
    """(libpod API version, Docker API version) from ``/_ping``'s headers (Podman sets
    ``Libpod-API-Version``, its own version, and ``API-Version`` on every answer of its
    API: pkg/api/server/handler_api.go); None when either is missing."""
    libpod, docker = headers.get("libpod-api-version", ""), headers.get("api-version", "")
    return (libpod, docker) if libpod and docker else None


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
        pinged = from_ping((await client.ping()).headers)
        if pinged is not None:
            return f"Podman {pinged[0]} (libpod API {pinged[0]}, Docker API {pinged[1]}) at {path}"
        data: Any = msgspec.json.decode((await client.call("GET", "/version")).body)
    finally:
        await client.close()
    engine: Any = next((c for c in data.get("Components") or [] if c.get("Name") == "Podman Engine"), {})
    api = (engine.get("Details") or {}).get("APIVersion", "?")
    docker = data.get("ApiVersion", "?")
    return f"Podman {data.get('Version', '?')} (libpod API {api}, Docker API {docker}) at {path}"


def podman_line(budget: float = PODMAN_BUDGET) -> str:
    import asyncio  # here: every command's parser carries this module, only --version runs Podman's part

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
        f"grpcio {_grpc()}, protobuf {_protobuf()}, msgspec {_msgspec()}\n"
        f"{podman_line()}\n"
    )


class VersionAction(argparse.Action):
    """``--version``: print :func:`text` and exit 0 (computed only when asked)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        sys.stdout.write(text())
        parser.exit(0)
