"""Unit tests for podmand.host.notify: sd_notify datagrams to $NOTIFY_SOCKET."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from pathlib import Path

import pytest

from podmand.host.notify import Notifier


def receiver(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(5)
    return sock


def test_path_socket_gets_one_datagram(tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    with receiver(path) as sock:
        assert Notifier(path).send("READY=1", "STATUS=serving")
        assert sock.recv(4096) == b"READY=1\nSTATUS=serving"


def test_abstract_address() -> None:
    name = f"podmand-test-{uuid.uuid4().hex}"
    with receiver("\0" + name) as sock:
        assert Notifier("@" + name).send("STOPPING=1")
        assert sock.recv(4096) == b"STOPPING=1"


def test_unset_sends_nothing_and_the_variable_is_taken_from_the_environment() -> None:
    """Children (a Podman service podmand starts) must not inherit podmand's notify socket."""
    environ = {"NOTIFY_SOCKET": "/run/x/notify", "HOME": "/root"}
    notifier = Notifier.from_environ(environ)
    assert notifier.address == "/run/x/notify" and environ == {"HOME": "/root"}
    assert Notifier.from_environ({}).send("READY=1") is False


def test_a_dead_socket_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "podmand")
    path = str(tmp_path / "gone")
    assert not os.path.exists(path)
    assert Notifier(path).send("READY=1") is False
    assert "cannot notify systemd at NOTIFY_SOCKET=" in caplog.text
