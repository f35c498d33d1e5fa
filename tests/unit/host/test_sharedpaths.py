"""The state-directory visibility probe's image choice (podmand/host/sharedpaths.py) on the
fake libpod: Podman 4.3.1 fails a whole image list with 500 "image not known" when an image
is removed while it lists (seen here when a test removed images beside a podmand's start-up,
which then exited); the probe asks again, a bounded few times, and any other error stands."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from podmand.host import sharedpaths
from podmand.libpod import PodmanError
from tests.fakes.harness import libpod
from tests.fakes.libpod import Reply, Request

VANISHED: Reply = (500, {}, {"cause": "image not known", "message": 'retrieving label for image "9c96": '
                             'locating image with ID "9c96": image not known', "response": 500})


def answers(*replies: Reply) -> tuple[list[str], object]:
    seen: list[str] = []

    def handler(request: Request) -> Reply:
        seen.append(request.path)
        return replies[min(len(seen), len(replies)) - 1]

    return seen, handler


def test_an_image_removed_while_listing_is_listed_again(tmp_path: Path) -> None:
    seen, handler = answers(VANISHED, VANISHED, (200, {}, [{"Id": "sha256:aa"}]))

    async def main() -> str:
        async with libpod() as (fake, client):
            fake.route("GET", "/images/json", handler)  # type: ignore[arg-type]
            return (await sharedpaths.probe(client, tmp_path)).image

    assert asyncio.run(main()) == "sha256:aa"
    assert len(seen) == 3


@pytest.mark.parametrize(("replies", "lists"), [
    ((VANISHED,) * 4, sharedpaths.LIST_ATTEMPTS),  # bounded: the last answer stands
    (((500, {}, {"message": "database is locked", "response": 500}),), 1),  # not the race: at once
])
def test_other_failures_are_not_asked_again(tmp_path: Path, replies: tuple[Reply, ...], lists: int) -> None:
    seen, handler = answers(*replies)

    async def main() -> None:
        async with libpod() as (fake, client):
            fake.route("GET", "/images/json", handler)  # type: ignore[arg-type]
            await sharedpaths.probe(client, tmp_path)

    with pytest.raises(PodmanError):
        asyncio.run(main())
    assert len(seen) == lists
