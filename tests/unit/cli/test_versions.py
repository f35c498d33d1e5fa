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
    """Podman without ``API-Version`` on its answers: --version falls back to ``/version``."""

    ping_headers = b"Libpod-Api-Version: 4.3.1\r\n"
    version_body = json.dumps(VERSION).encode()

    def handle(self) -> None:
        while True:
            request = self.rfile.readline()
            if not request:
                return
            while self.rfile.readline() not in (b"\r\n", b""):
                pass
            ping = b"/_ping" in request
            body = b"OK" if ping else self.version_body
            self.wfile.write(b"HTTP/1.1 200 OK\r\n" + (self.ping_headers if ping else b"")
                             + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


class PingingLibpod(Libpod):
    """Podman's API as it answers: ``/_ping``'s headers name both versions; a ``/version``
    that does not decode shows whether --version asked it."""

    ping_headers = b"Libpod-Api-Version: 5.4.2\r\nApi-Version: 1.41\r\nServer: Libpod/5.4.2 (linux)\r\n"
    version_body = b"not json"


def serve(path: str, handler: type[Libpod]) -> socketserver.ThreadingUnixStreamServer:
    server = socketserver.ThreadingUnixStreamServer(path, handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def libpod(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "podman.sock")
    server = serve(path, Libpod)
    yield path
    server.shutdown()
    server.server_close()


def test_version_reads_podman_from_the_ping_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "podman.sock")
    server = serve(path, PingingLibpod)
    try:
        monkeypatch.setenv("OPENSHELL_PODMAN_SOCKET", path)
        assert versions.text().splitlines()[3] == f"Podman 5.4.2 (libpod API 5.4.2, Docker API 1.41) at {path}"
    finally:
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
