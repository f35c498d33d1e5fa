"""Placeholder: being written."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    sub.add_parser("ctl", help="(not yet)")


def run(args: argparse.Namespace) -> int:
    return 2
