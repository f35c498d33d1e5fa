"""Unit tests for podmand.driver.networks on a fake libpod: EnsureWorkspace makes nothing,
and the workspace network an older podmand made is removed with its last sandbox or by
DeleteWorkspace, for the calls that costs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from podmand import names
from podmand.config import Settings
from podmand.driver.networks import Networks
from podmand.errors import FailedPrecondition, InvalidArgument
from podmand.libpod import PodmanClient
from podmand.locks import LockTable
from tests.fakes.harness import labels_for, name_for
from tests.fakes.libpod import FakeLibpod, Request

OURS = {names.OWNER: names.OWNER_VALUE, names.SANDBOX_WORKSPACE: "ws"}


class Podman:
    """A fake libpod holding networks (what an older podmand or someone else made)."""

    def __init__(self, fake: FakeLibpod) -> None:
        self.fake = fake
        self.networks: dict[str, dict[str, Any]] = {}
        fake.route("GET", "/networks/json", lambda _r: (200, {}, list(self.networks.values())))
        fake.route("GET", "/networks/(?P<n>[^/]+)/json", self._inspect)
        fake.route("DELETE", "/networks/(?P<n>[^/]+)", self._remove)

    def add(self, name: str, labels: dict[str, str]) -> None:
        self.networks[name] = {"name": name, "labels": labels, "subnets": [{"subnet": "10.128.0.0/24"}]}

    def _inspect(self, req: Request) -> tuple[int, dict[str, str], Any]:
        name = req.path.rsplit("/", 2)[-2]
        if name in self.networks:
            return 200, {}, self.networks[name]
        return 404, {}, {"message": "no such network"}

    def _remove(self, req: Request) -> tuple[int, dict[str, str], Any]:
        name = req.path.rsplit("/", 1)[-1]
        if self.networks.pop(name, None) is None:
            return 404, {}, {"message": "no such network"}
        return 200, {}, [{"Name": name}]


def run(
    body: Callable[[Networks, Podman], Awaitable[None]],
    *,
    members: Callable[[str], int | None] = lambda _n: None,
    **settings: Any,
) -> None:
    async def main() -> None:
        fake = FakeLibpod()
        podman = Podman(fake)
        client = PodmanClient(transport=fake.transport())
        try:
            s = Settings(**settings)
            await body(Networks(client, s, LockTable(), dict, members), podman)
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_ensure_workspace_makes_nothing_and_checks_the_name() -> None:
    """No container joins a workspace network now: EnsureWorkspace costs no Podman call."""
    async def body(nets: Networks, podman: Podman) -> None:
        await nets.ensure_workspace("ws")
        await nets.ensure_workspace("")
        assert not podman.networks and not podman.fake.requests
        with pytest.raises(InvalidArgument, match="workspace"):
            await nets.ensure_workspace("Not A Name!")

    run(body)


def test_delete_workspace_removes_an_older_podmands_network_and_leaves_anothers() -> None:
    async def body(nets: Networks, podman: Podman) -> None:
        podman.add("openshell-ws", OURS)
        podman.add("openshell-theirs", {"owner": "someone-else"})
        await nets.delete_workspace("ws")
        await nets.delete_workspace("theirs")
        await nets.delete_workspace("none-left")  # no network: nothing to do
        assert list(podman.networks) == ["openshell-theirs"]
        assert podman.fake.count("DELETE .*/networks/") == 1

    run(body)


def test_delete_lists_containers_only_when_the_index_knows_of_none() -> None:
    counts: dict[str, int | None] = {"openshell-ws": 2}

    async def body(nets: Networks, podman: Podman) -> None:
        podman.add("openshell-ws", OURS)
        assert not await nets.remove_unused("ws")  # the index knows two sandboxes: no list
        assert podman.fake.count("GET .*/containers/json") == 0 and "openshell-ws" in podman.networks
        counts["openshell-ws"] = 0  # the index says empty: confirmed by one list, then removed
        assert await nets.remove_unused("ws")
        assert podman.fake.count("GET .*/containers/json") == 1 and "openshell-ws" not in podman.networks

    run(body, members=counts.get)


def test_index_not_ready_lists_and_keeps_a_network_in_use() -> None:
    async def body(nets: Networks, podman: Podman) -> None:
        podman.add("openshell-ws", OURS)
        entry = {"Id": "c1", "Names": [name_for("sb-1")], "Labels": labels_for("sb-1")}
        podman.fake.route("GET", "/containers/json", (200, {}, [entry]))
        assert not await nets.remove_unused("ws")
        with pytest.raises(FailedPrecondition, match="still has 1 sandbox"):
            await nets.delete_workspace("ws")
        assert podman.fake.count("GET .*/containers/json") == 2 and "openshell-ws" in podman.networks

    run(body)
