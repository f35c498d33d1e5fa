"""Fixtures shared by the in-process and fault tests (a test file's own wins)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.libpod import FakeLibpod


@pytest.fixture
def tmp() -> Iterator[Path]:
    """A fresh directory with a short path: AF_UNIX paths are limited to 107 bytes."""
    d = tempfile.mkdtemp(prefix="pdt-", dir="/tmp")
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def fake(tmp: Path) -> Iterator[FakeLibpod]:
    """A fake libpod on its own thread, serving ``tmp/podman.sock``."""
    fake = FakeLibpod().start_in_thread(str(tmp / "podman.sock"))
    try:
        yield fake
    finally:
        fake.stop_thread()


@pytest.fixture
def receiver() -> Iterator[Any]:
    """A real OTLP/gRPC trace receiver on a loopback port (tests/otlp.py), stopped after."""
    from tests import otlp

    r = otlp.Receiver()
    try:
        yield r
    finally:
        r.close()
