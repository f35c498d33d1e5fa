"""``podmand --version``: podmand, Python, libraries, and Podman when it answers."""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from podmand import __version__
from podmand.cli import versions

VERSION = {"Version": "4.3.1", "ApiVersion": "1.41",
           "Components": [{"Name": "Podman Engine", "Details": {"APIVersion": "4.3.1"}}]}


class Libpod(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        while True:
            request = self.rfile.readline()
            if not request:
                return
            while self.rfile.readline() not in (b"\r\n", b""):
                pass
            body = b"OK" if b"/_ping" in request else json.dumps(VERSION).encode()
            self.wfile.write(b"HTTP/1.1 200 OK\r\nLibpod-Api-Version: 4.3.1\r\n"
                             + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


@pytest.fixture
def libpod(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "podman.sock")
    server = socketserver.ThreadingUnixStreamServer(path, Libpod)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield path
    server.shutdown()
    server.server_close()


def test_version_names_everything(libpod: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENSHELL_PODMAN_SOCKET", libpod)
    lines = versions.text().splitlines()
    assert lines[0] == f"podmand {__version__}"
    assert lines[1].startswith("Python 3.")
    assert lines[2].startswith("grpcio ") and "protobuf " in lines[2] and "msgspec " in lines[2] and "?" not in lines[2]
    assert lines[3] == f"Podman 4.3.1 (libpod API 4.3.1, Docker API 1.41) at {libpod}"


def test_version_without_podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENSHELL_PODMAN_SOCKET", str(tmp_path / "none.sock"))
    assert versions.text().splitlines()[3] == "Podman: no API socket answered"
