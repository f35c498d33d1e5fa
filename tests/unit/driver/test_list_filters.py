"""Podman 6 changed what a list's filters mean (issue 32; tests/fakes/filters.py cites the
source): ``/volumes/json`` ANDs its filter keys where 5.8 ORs them, and ``label!`` with
several values drops what matches any of them where 5.8 dropped what matches all.

Every list podmand makes was read (podmand/libpod/client.py ``list_containers``,
``list_volumes``, ``list_networks``, ``image_names``; their callers in driver/, cli/ctl/):
its volume lists send one filter key (``label``), its container lists ``label`` (several
values: ANDed on every version) and at most ``name`` (keys ANDed on every version for
containers), and none sends ``label!``. So no list of podmand's reads differently on 6.x,
and nothing needed changing: the test below runs each of them on a fake libpod playing
each version's semantics and gets the same answer, and fails when a list of podmand's
starts to send what the versions read differently (a second key to ``/volumes/json``, or
``label!``), which would then have to be filtered podmand's own way."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from podmand import names
from podmand.driver import garbage, lookup
from tests.fakes import filters
from tests.fakes.harness import Rig, driver_on, name_for

OWNER = f"{names.OWNER}={names.OWNER_VALUE}"
VERSIONS = ["5.8", "6.0"]


def run(podman6: bool, body: Callable[[Rig], Awaitable[None]]) -> None:
    async def main() -> None:
        async with driver_on() as rig:
            rig.fake.podman6_filters = podman6
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), 30))


def world(rig: Rig) -> None:
    """Podmand's sandbox (a pair and its volume), its image reader, and what else a shared
    Podman holds: a reader of another state directory, foreign containers and volumes
    named like podmand's, one bearing some of podmand's labels."""
    state_dir = str(rig.driver.state_dir)
    rig.boxes.add_pair("sb-1")
    for name, labels in {
        "podmand-read-0001": {names.OWNER: names.OWNER_VALUE, names.STATE_DIR: state_dir},
        "podmand-read-0002": {names.OWNER: names.OWNER_VALUE, names.STATE_DIR: "/elsewhere"},
        "podmand-read-0003": {},  # a foreign container under a reader's name
        "half-labelled": {names.MANAGED: "true"},  # managed, not owned by podmand
    }.items():
        cid = rig.boxes.add(f"x-{name}")
        rig.boxes.boxes[cid].update(Name=name, Config={"Labels": labels}, Created="2020-01-01T00:00:00Z")
    rig.fake.volumes.update({
        "openshell-sb-1": {"Name": "openshell-sb-1", "Labels": {names.OWNER: names.OWNER_VALUE,
                                                                names.SANDBOX_ID: "sb-1"}},
        "openshell-sb-2": {"Name": "openshell-sb-2", "Labels": {names.SANDBOX_ID: "sb-2"}},  # not podmand's
        "data": {"Name": "data", "Labels": {}},
    })


async def podmands_lists(rig: Rig) -> dict[str, Any]:
    """What each list call of podmand's answers, by its caller."""
    podman = rig.driver.podman
    return {
        "ListSandboxes": [s.id for s in await rig.driver.list_sandboxes()],
        "one sandbox's containers": sorted((e.names or [""])[0] for e in await lookup.containers(podman, "sb-1")),
        "volumes (records, garbage, ctl)": sorted(v.name for v in await podman.list_volumes([OWNER])),
        "managed containers (ctl)": sorted((e.names or [""])[0] for e in await podman.list_containers(
            names.MANAGED_FILTER)),
        "stale readers removed": await garbage.remove_stale_readers(podman, rig.driver.state_dir),
        "garbage collected": await rig.driver.collect_garbage(),
    }


WORKLOAD = name_for("sb-1")
EXPECTED = {
    "ListSandboxes": ["sb-1"],
    "one sandbox's containers": [WORKLOAD],  # the workload (lookup folds the supervisor in)
    "volumes (records, garbage, ctl)": ["openshell-sb-1"],
    "managed containers (ctl)": sorted([WORKLOAD, "openshell-supervisor-sb-1"]),
    "stale readers removed": ["container:podmand-read-0001"],  # this state directory's, by name and label
    "garbage collected": ["container:podmand-read-0002"],  # another's, a minute old: orphaned
}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_list_of_podmands_means_the_same_on_every_version(version: str) -> None:
    async def body(rig: Rig) -> None:
        world(rig)
        start = len(rig.fake.requests)
        assert await podmands_lists(rig) == EXPECTED
        lists = [r for r in rig.fake.requests[start:] if r.partition("?")[0].endswith(("/containers/json",
                                                                                    "/volumes/json"))]
        assert len(lists) >= 6, lists
        for request in lists:
            wanted = filters.requested(dict(urllib.parse.parse_qsl(request.partition("?")[2])))
            assert "label!" not in wanted, request  # 5.8 and 6.0 read several values differently
            if request.partition("?")[0].endswith("/volumes/json"):
                assert len(wanted) <= 1, request  # 5.8 ORs a volume list's keys, 6.0 ANDs them

    run(version == "6.0", body)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_fake_reads_filters_as_each_version_does(version: str) -> None:
    """The switch is real: the lists podmand does not make answer differently per version."""
    podman6 = version == "6.0"

    async def body(rig: Rig) -> None:
        world(rig)
        podman = rig.driver.podman
        both = await podman.call("GET", "/volumes/json", query={"filters": {"label": [OWNER], "name": ["^data$"]}})
        assert sorted(v["Name"] for v in json.loads(both.body)) == ([] if podman6 else ["data", "openshell-sb-1"])
        negated = {"label!": [f"{names.MANAGED}=true", f"{names.ISOLATION_ROLE}={names.ROLE_SUPERVISOR}"]}
        listed = await podman.call("GET", "/containers/json", query={"all": True, "filters": negated})
        kept = {c["Names"][0] for c in json.loads(listed.body)}
        # The supervisor matches both values: either version drops it. The workload and the
        # half-labelled container match one: 6.0 drops them, 5.8 keeps them.
        assert "openshell-supervisor-sb-1" not in kept and "podmand-read-0003" in kept
        assert {WORKLOAD, "half-labelled"} & kept == (set() if podman6 else {WORKLOAD, "half-labelled"})

    run(podman6, body)
