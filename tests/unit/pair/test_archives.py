"""The pair's tar uploads (podmand/pair/archives.py, contract §2.4), read back with tarfile."""

from __future__ import annotations

import io
import tarfile

import pytest

from podmand.pair import archives, documents
from tests.unit.pair import launches


@pytest.fixture(scope="module")
def launch() -> documents.Launch:
    return launches.launch()


@pytest.fixture(scope="module")
def docs(launch: documents.Launch) -> documents.Documents:
    return documents.documents(launch)


def members(data: bytes) -> list[tuple[str, str, int, int, int, bytes | None]]:
    """(name, type, mode, uid, gid, content) of each member, after checking the header
    format (GNU), mtime 0 and that no owner names travel."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for info in tar.getmembers():
            assert info.mtime == 0 and info.uname == info.gname == ""
            kind = "dir" if info.isdir() else "file" if info.isfile() else "other"
            content = tar.extractfile(info).read() if info.isfile() else None  # type: ignore[union-attr]
            out.append((info.name, kind, info.mode, info.uid, info.gid, content))
    assert data[257:265] == b"ustar  \0"  # the GNU magic, in the first header
    return out


def test_channel_archive(launch: documents.Launch, docs: documents.Documents) -> None:
    assert members(archives.channel(docs, launch.identity)) == [
        (".", "dir", 0o755, 0, 0, None),
        ("sandbox", "dir", 0o711, 1000, 1001, None),
        ("sandbox/bootstrap.json", "file", 0o600, 1000, 1001, docs.bootstrap),
        ("sandbox/server.crt", "file", 0o600, 1000, 1001, docs.server_certificate),
        ("sandbox/server.key", "file", 0o600, 1000, 1001, docs.server_key),
    ]


def test_workspace_archive(launch: documents.Launch) -> None:
    assert members(archives.workspace(launch.identity)) == [(".", "dir", 0o700, 1000, 1001, None)]


def test_supervisor_archive(launch: documents.Launch, docs: documents.Documents) -> None:
    assert members(archives.supervisor(docs, launch.identity)) == [
        (".openshell", "dir", 0o755, 0, 0, None),
        (".openshell/supervisor", "dir", 0o700, 1000, 1001, None),
        (".openshell/supervisor/runtime-descriptor.json", "file", 0o600, 1000, 1001, docs.runtime_descriptor),
        (".openshell/supervisor/auth.json", "file", 0o600, 1000, 1001, docs.auth),
        (".openshell/supervisor/restart-metadata.json", "file", 0o600, 1000, 1001, docs.restart_metadata),
    ]


def test_the_tokens_travel_in_the_supervisor_archive_only(launch: documents.Launch, docs: documents.Documents) -> None:
    """No 12-byte piece of either bearer token in the channel or workspace archive (the
    workload's); both whole in the supervisor's, inside auth.json."""
    assert launches.leaks(archives.channel(docs, launch.identity), launch) == []
    assert launches.leaks(archives.workspace(launch.identity), launch) == []
    sup = launch.bundle.supervisor
    whole = archives.supervisor(docs, launch.identity)
    assert sup.gateway_token.encode() in whole and sup.sandbox_token.encode() in whole


def test_the_same_launch_gives_the_same_bytes(launch: documents.Launch, docs: documents.Documents) -> None:
    assert archives.channel(docs, launch.identity) == archives.channel(docs, launch.identity)
    other = launches.identity(uid=4242, gid=4243)
    assert members(archives.workspace(other)) == [(".", "dir", 0o700, 4242, 4243, None)]


def test_names_are_relative_to_where_each_is_unpacked(launch: documents.Launch, docs: documents.Documents) -> None:
    for data in (archives.channel(docs, launch.identity), archives.supervisor(docs, launch.identity),
                 archives.workspace(launch.identity)):
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            assert not [n for n in tar.getnames() if n.startswith("/") or ".." in n.split("/")]
