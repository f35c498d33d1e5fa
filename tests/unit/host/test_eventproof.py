"""podmand.host.eventproof: the event podmand causes to prove Podman's event stream live, and
the attempts; against the fake libpod's in-memory door."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from podmand import names
from podmand.host import eventproof
from podmand.host.eventproof import Proof
from podmand.libpod import PodmanError
from podmand.sandbox import imagefiles
from tests.fakes.harness import HeldCreate, libpod
from tests.fakes.libpod import Reply, Request

DEADLINE = 10.0


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, DEADLINE))


def test_the_proof_is_a_never_started_container_rooted_in_an_empty_directory_that_goes_again(
        tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def create(req: Request) -> Reply:
        spec = req.json()
        root = Path(spec["rootfs"])
        seen.append({**spec, "root existed empty": root.is_dir() and not os.listdir(root),
                     "active": spec["name"] in imagefiles.ACTIVE})
        return 201, {}, {"Id": "proof", "Warnings": []}

    async def main() -> list[str]:
        async with libpod() as (fake, client):
            fake.route("POST", "/containers/create", create)
            await eventproof.cause(client, tmp_path)
            return fake.calls()

    calls = run(main())
    (spec,) = seen
    assert spec["name"].startswith("podmand-read-events-")  # an image reader's name: GC removes a leftover
    assert spec["labels"] == names.own_labels(str(tmp_path))  # the hub acts on no event of it
    assert "image" not in spec and spec["netns"] == {"nsmode": "none"} and spec["entrypoint"] == ["/nonexistent"]
    assert spec["root existed empty"] and spec["active"]
    assert calls == ["POST /containers/create", f"DELETE /containers/{spec['name']}"]
    assert list(tmp_path.iterdir()) == [] and not imagefiles.ACTIVE


def test_a_refused_proof_is_raised_and_leaves_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with libpod() as (fake, client):
            fake.route("POST", "/containers/create", (500, {}, {"message": "no space left on device"}))
            with pytest.raises(PodmanError, match="no space left"):
                await eventproof.cause(client, tmp_path)

    run(main())
    assert list(tmp_path.iterdir()) == [] and not imagefiles.ACTIVE



def test_a_proof_given_up_while_podman_makes_its_container_removes_it_once_made(tmp_path: Path) -> None:
    """Its container is a reader's (imagefiles.dispose): given up on while Podman makes it, the
    create is let finish, and only then is it removed (a removal sent first finds nothing)."""
    seen: list[str] = []

    async def main() -> None:
        async with libpod() as (fake, client):
            held = HeldCreate(fake, "proof")
            caused = asyncio.ensure_future(eventproof.cause(client, tmp_path))
            await held.arrived.wait()
            caused.cancel()
            held.release.set()
            with pytest.raises(asyncio.CancelledError):
                await caused
            seen.extend(held.seen)

    run(main())
    [made, removed] = seen
    assert made.startswith("made podmand-read-events-") and removed == made.replace("made", "removed")
    assert list(tmp_path.iterdir()) == [] and not imagefiles.ACTIVE

def test_a_proof_ends_as_soon_as_an_event_arrives() -> None:
    async def main() -> tuple[bool, int]:
        proof = Proof()
        caused = 0

        async def cause() -> None:
            nonlocal caused
            caused += 1
            if caused == 2:  # the first event was made before Podman read its log: lost
                proof.heard()

        return await proof.run(cause, attempt=0.01), caused

    assert run(main()) == (True, 2)


def test_a_proof_gives_up_at_its_deadline_saying_why_no_event_could_be_caused() -> None:
    async def main() -> tuple[bool, str]:
        proof = Proof()

        async def cause() -> None:
            raise PodmanError(500, "creating container storage: no space left on device")

        return await proof.run(cause, deadline=0.05), proof.error

    arrived, error = run(main())
    assert not arrived and "no space left on device" in error
    words = eventproof.silent("journald", error)
    assert "could not be made (" in words and "no space left on device" in words


def test_the_words_name_the_logger_the_cause_and_both_fixes() -> None:
    words = eventproof.silent("journald", "")
    assert "(Podman's event logger: journald)" in words and "issues/26910" in words
    fix = eventproof.fix("alice")
    assert '[engine] table of containers.conf' in fix and 'events_logger = "file"' in fix
    assert "usermod -aG systemd-journal alice" in fix


def test_a_stopped_proof_makes_no_more_attempts_and_proves_nothing() -> None:
    """The subscription ended: stop() ends the run even when a cancellation would be swallowed."""
    async def main() -> tuple[bool, int]:
        proof = Proof()
        caused = 0

        async def cause() -> None:
            nonlocal caused
            caused += 1
            proof.stop()

        return await proof.run(cause, deadline=3600), caused

    assert run(main()) == (False, 1)
