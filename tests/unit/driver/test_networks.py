"""Unit tests for podmand.driver.networks: picking a free subnet (pure), and on a
fake libpod, the calls a workspace network costs."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from podmand import names
from podmand.config import Settings
from podmand.driver.networks import Networks, pick_subnet
from podmand.errors import FailedPrecondition
from podmand.libpod import PodmanClient
from podmand.locks import LockTable
from tests.fakes.harness import labels_for, name_for
from tests.fakes.libpod import FakeLibpod, Request

POOL = ipaddress.IPv4Network("10.128.0.0/9")
net = ipaddress.ip_network


def test_pick_subnet_first_free_aligned_subnet() -> None:
    assert pick_subnet(POOL, 16, []) == net("10.128.0.0/16")
    assert pick_subnet(POOL, 16, [net("10.128.5.0/24")]) == net("10.129.0.0/16")
    assert pick_subnet(POOL, 24, [net("10.128.0.0/24"), net("10.128.1.0/24")]) == net("10.128.2.0/24")
    # A hole between used subnets is taken; used ones may come in any order and overlap.
    used = [net("10.128.2.0/24"), net("10.128.0.0/23"), net("10.128.0.0/24")]
    assert pick_subnet(POOL, 24, used) == net("10.128.3.0/24")
    assert pick_subnet(POOL, 23, [net("10.128.0.0/24"), net("10.128.4.0/24")]) == net("10.128.2.0/23")


def test_pick_subnet_ignores_what_lies_outside_the_pool_and_ipv6() -> None:
    used = [net("10.88.0.0/16"), net("10.89.0.0/24"), net("fd00::/64"), net("192.168.0.0/16")]
    assert pick_subnet(POOL, 16, used) == net("10.128.0.0/16")


def test_pick_subnet_none_when_the_pool_is_full() -> None:
    small = ipaddress.IPv4Network("10.128.0.0/23")
    assert pick_subnet(small, 24, [net("10.128.0.0/24")]) == net("10.128.1.0/24")
    assert pick_subnet(small, 24, [net("10.128.0.0/24"), net("10.128.1.0/24")]) is None
    assert pick_subnet(small, 24, [net("10.0.0.0/8")]) is None


# ---------------------------------------------------------------- on a fake libpod


class Podman:
    """A fake libpod holding networks: create answers like Podman 4.3.1."""

    def __init__(self, fake: FakeLibpod, taken_on_host: tuple[str, ...]) -> None:
        self.fake = fake
        self.networks: dict[str, dict[str, Any]] = {}
        self.taken_on_host = taken_on_host
        fake.route("GET", "/networks/json", lambda _r: (200, {}, list(self.networks.values())))
        fake.route("POST", "/networks/create", self._create)
        fake.route("GET", "/networks/(?P<n>[^/]+)/json", self._inspect)
        fake.route("DELETE", "/networks/(?P<n>[^/]+)", self._remove)

    def _create(self, req: Request) -> tuple[int, dict[str, str], Any]:
        body = req.json()
        if body["name"] in self.networks:
            return 409, {}, {"message": f"network name {body['name']} already used: network already exists"}
        subnet = body["subnets"][0]["subnet"]
        inside = [s["subnet"] for n in self.networks.values() for s in n["subnets"]] + list(self.taken_on_host)
        if any(net(subnet).overlaps(net(s)) for s in inside):
            return 500, {}, {"message": f"subnet {subnet} is already used on the host or by another config"}
        self.networks[body["name"]] = {"name": body["name"], "labels": body["labels"], "subnets": body["subnets"]}
        return 200, {}, self.networks[body["name"]]

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

    def subnet(self, name: str) -> str:
        return str(self.networks[name]["subnets"][0]["subnet"])


def run(
    body: Callable[[Networks, Podman], Awaitable[None]],
    *,
    members: Callable[[str], int | None] = lambda _n: None,
    taken_on_host: tuple[str, ...] = (),
    **settings: Any,
) -> None:
    async def main() -> None:
        fake = FakeLibpod()
        podman = Podman(fake, taken_on_host)
        client = PodmanClient(transport=fake.transport())
        try:
            s = Settings(network_prefix=24, **settings)
            await body(Networks(client, s, LockTable(), dict, members), podman)
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_known_network_is_not_inspected_again_until_forgotten_or_removed() -> None:
    async def body(nets: Networks, podman: Podman) -> None:
        fake = podman.fake
        assert await nets.ensure("ws") == "openshell-ws"
        assert fake.count(r"GET .*/networks/openshell-ws/json") == 1 and fake.count("POST .*/networks/create") == 1
        for _ in range(3):
            await nets.ensure("ws")
        assert fake.count(r"GET .*/networks/openshell-ws/json") == 1  # known: no inspect per create
        nets.forget("ws")
        await nets.ensure("ws")  # looks again: exists, nothing made
        assert fake.count(r"GET .*/networks/openshell-ws/json") == 2 and fake.count("POST .*/networks/create") == 1
        assert await nets.remove_unused("ws")
        await nets.ensure("ws")  # removed by podmand: made again
        assert fake.count("POST .*/networks/create") == 2 and "openshell-ws" in podman.networks

    run(body)


def test_new_networks_get_free_subnets_from_the_pool_with_podmands_labels() -> None:
    async def body(nets: Networks, podman: Podman) -> None:
        podman.networks["other"] = {"name": "other", "labels": {}, "subnets": [{"subnet": "10.128.0.0/24"}]}
        await nets.ensure("a")
        await nets.ensure("b")
        assert podman.subnet("openshell-a") == "10.128.1.0/24"
        assert podman.subnet("openshell-b") == "10.128.2.0/24"
        assert podman.networks["openshell-a"]["labels"] == {names.OWNER: names.OWNER_VALUE,
                                                            names.SANDBOX_WORKSPACE: "a"}
        assert podman.fake.count("GET .*/networks/json") == 2  # one list per network made

    run(body)


def test_a_subnet_podman_refuses_is_skipped() -> None:
    async def body(nets: Networks, podman: Podman) -> None:
        await nets.ensure("ws")
        assert podman.subnet("openshell-ws") == "10.128.2.0/24"
        assert podman.fake.count("POST .*/networks/create") == 3

    run(body, taken_on_host=("10.128.0.0/24", "10.128.1.0/24"))


def test_a_full_pool_names_the_settings_to_change() -> None:
    async def body(nets: Networks, podman: Podman) -> None:
        await nets.ensure("a")
        with pytest.raises(FailedPrecondition, match=r"no free /24 left in network_pool 10.128.0.0/24 .*PODMAND_"):
            await nets.ensure("b")
        assert "openshell-b" not in podman.networks

    run(body, network_pool="10.128.0.0/24")


def test_a_network_made_meanwhile_by_another_podmand_counts_as_made() -> None:
    async def body(nets: Networks, podman: Podman) -> None:
        async def racing_inspect(_req: Request) -> tuple[int, dict[str, str], Any]:
            podman.networks["openshell-ws"] = {"name": "openshell-ws", "labels": {}, "subnets": []}
            return 404, {}, {"message": "no such network"}

        podman.fake.route("GET", "/networks/openshell-ws/json", racing_inspect)
        assert await nets.ensure("ws") == "openshell-ws"  # the 409 is not an error
        assert podman.networks["openshell-ws"]["subnets"] == []

    run(body)


def test_delete_lists_containers_only_when_the_index_knows_of_none() -> None:
    counts: dict[str, int | None] = {"openshell-ws": 2}

    async def body(nets: Networks, podman: Podman) -> None:
        await nets.ensure("ws")
        assert not await nets.remove_unused("ws")  # the index knows two sandboxes: no list
        assert podman.fake.count("GET .*/containers/json") == 0 and "openshell-ws" in podman.networks
        counts["openshell-ws"] = 0  # the index says empty: confirmed by one list, then removed
        assert await nets.remove_unused("ws")
        assert podman.fake.count("GET .*/containers/json") == 1 and "openshell-ws" not in podman.networks

    run(body, members=counts.get)


def test_index_not_ready_lists_and_keeps_a_network_in_use() -> None:
    async def body(nets: Networks, podman: Podman) -> None:
        await nets.ensure("ws")
        entry = {"Id": "c1", "Names": [name_for("sb-1")], "Labels": labels_for("sb-1")}
        podman.fake.route("GET", "/containers/json", (200, {}, [entry]))
        assert not await nets.remove_unused("ws")
        with pytest.raises(FailedPrecondition, match="still has 1 sandbox"):
            await nets.delete_workspace("ws")
        assert podman.fake.count("GET .*/containers/json") == 2 and "openshell-ws" in podman.networks

    run(body)
