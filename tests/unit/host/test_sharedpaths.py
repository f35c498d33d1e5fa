"""sharedpaths.probe's image: a listing Podman fails because an image went meanwhile is asked
again, and one that keeps failing leaves the probe undone rather than failing start-up."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

from podmand.host import sharedpaths
from podmand.libpod import PodmanClient, PodmanError

GONE = PodmanError(500, 'retrieving label for image "c13931": image not known')


class Podman:
    """list_images answers each of ``answers`` in turn (an exception is raised)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.lists = 0

    async def list_images(self) -> list[str]:
        self.lists += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return cast(list[str], answer)


def test_a_listing_that_raced_a_removal_is_asked_again() -> None:
    podman = Podman(GONE, ["img1", "img2"])
    assert asyncio.run(sharedpaths.any_image(cast(PodmanClient, podman))) == "img1"
    assert podman.lists == 2


def test_a_listing_that_keeps_failing_leaves_the_probe_undone(tmp_path: Path) -> None:
    podman = Podman(*[GONE] * sharedpaths.LIST_ATTEMPTS)
    seen = asyncio.run(sharedpaths.probe(cast(PodmanClient, podman), tmp_path))
    assert seen == sharedpaths.Visibility(image="") and podman.lists == sharedpaths.LIST_ATTEMPTS
    assert list(tmp_path.iterdir()) == []  # no probe file made
    assert asyncio.run(sharedpaths.state_dir_problem(cast(PodmanClient, Podman(*[GONE] * 3)), tmp_path)) is None
