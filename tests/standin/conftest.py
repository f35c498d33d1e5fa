"""Fixtures of the split-topology stand-in tests (tests/standin/split.py)."""

from tests.standin.split import pair, rootfs

__all__ = ["pair", "rootfs"]
