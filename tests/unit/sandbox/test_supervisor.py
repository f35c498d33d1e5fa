"""podmand.sandbox.supervisor: the binary every sandbox runs as root is used only while it is the one
extracted (mode, owner, digest), and a sandbox's own copy is made from the checked shared one. Podman
is never asked here (the podman given is no client: a call would fail the test); the extraction
itself runs against real Podman in tests/e2e/test_supervisor_binary.py."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from podmand.errors import FailedPrecondition
from podmand.sandbox import supervisor
from podmand.sandbox.files import StateDirUnwritable
from podmand.sandbox.supervisor import BINARY, DIGEST, SupervisorCache

IMAGE = "sha256:" + "ab" * 32
DATA = b"\x7fELF the supervisor"


def cache(tmp_path: Path) -> tuple[SupervisorCache, Path]:
    """A cache whose shared binary of IMAGE was extracted already."""
    sup = SupervisorCache(podman=object(), state_dir=tmp_path / "state")  # type: ignore[arg-type]
    shared = sup.path_for(IMAGE)
    sup._write(shared, IMAGE, DATA, hashlib.sha256(DATA).hexdigest())
    return sup, shared


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_shared_binary_is_0555_with_its_digest_beside_it(tmp_path: Path) -> None:
    sup, shared = cache(tmp_path)
    assert (os.stat(shared).st_mode & 0o7777) == 0o555
    assert (shared.parent / DIGEST).read_text() == f"{IMAGE} {hashlib.sha256(DATA).hexdigest()}\n"
    assert run(sup.binary(IMAGE)) == shared  # intact: no extraction (no Podman call)


@pytest.mark.parametrize("change", ["chmod", "content", "link"])
def test_a_changed_binary_is_not_intact(tmp_path: Path, change: str) -> None:
    sup, shared = cache(tmp_path)
    if change == "chmod":
        os.chmod(shared, 0o755)
    elif change == "content":  # same mode and size, another inode: what a rename over it leaves
        other = shared.with_name("other")
        other.write_bytes(DATA[::-1])
        os.chmod(other, 0o555)
        other.replace(shared)
    else:
        os.link(shared, tmp_path / "hardlink")
    assert sup.intact(shared, IMAGE) is None


def test_a_sandboxs_own_copy_is_made_and_remade_from_the_shared_one(tmp_path: Path) -> None:
    sup, shared = cache(tmp_path)
    own_dir = tmp_path / "state" / "sandboxes" / "sb1"
    own = run(sup.binary(IMAGE, own_dir))
    assert own == own_dir / BINARY and own.read_bytes() == DATA and (os.stat(own).st_mode & 0o7777) == 0o555
    os.chmod(own, 0)  # what its root may do from inside
    run(sup.check(str(own)))
    assert (os.stat(own).st_mode & 0o7777) == 0o555 and own.read_bytes() == DATA
    assert (os.stat(shared).st_mode & 0o7777) == 0o555


def test_a_binary_podmand_cannot_place_is_refused(tmp_path: Path) -> None:
    sup, _ = cache(tmp_path)
    stray = tmp_path / "elsewhere" / BINARY
    stray.parent.mkdir()
    stray.write_bytes(b"#!/bin/sh\n")
    with pytest.raises(FailedPrecondition, match="changed since podmand extracted it, and podmand cannot tell"):
        run(sup.check(str(stray)))


def test_an_unwritable_state_directory_is_one_clear_error(tmp_path: Path) -> None:
    """A copy that cannot be written (here: a directory where its digest record goes) is the
    state directory's one-line error, not an OSError."""
    sup, _ = cache(tmp_path)
    own_dir = tmp_path / "state" / "sandboxes" / "sb1"
    (own_dir / DIGEST).mkdir(parents=True)
    with pytest.raises(StateDirUnwritable, match=r"state directory .* is not writable"):
        run(sup.binary(IMAGE, own_dir))


def test_the_fingerprints_kept_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One fingerprint per sandbox copy: past the bound the oldest go, and a path forgotten
    is hashed again at its next check (and found intact)."""
    monkeypatch.setattr(supervisor, "CHECKED", 3)
    sup, _ = cache(tmp_path)
    copies = [run(sup.binary(IMAGE, tmp_path / "state" / "sandboxes" / f"sb{i}")) for i in range(5)]
    assert len(sup._checked) == 3 and copies[0] not in sup._checked and copies[-1] in sup._checked
    assert sup.intact(copies[0], IMAGE) == hashlib.sha256(DATA).hexdigest()
    assert copies[0] in sup._checked and len(sup._checked) == 3
