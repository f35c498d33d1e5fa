"""podmand.driver.index: what the hub keeps of sandbox containers between lists."""

from __future__ import annotations

from podmand.driver.index import Index, Known, listed_run
from podmand.libpod import ContainerListEntry
from tests.fakes.harness import labels_for, name_for


def entry(cid: str, sandbox_id: str, state: str = "running", *, workspace: str = "ws", exited_at: int = 0,
          exit_code: int = 0) -> ContainerListEntry:
    return ContainerListEntry(id=cid, names=[name_for(sandbox_id, workspace)], state=state,
                              labels=labels_for(sandbox_id, workspace), exited_at=exited_at, exit_code=exit_code,
                              started_at=100)


def test_a_list_teaches_unknown_containers_and_changes_no_observed_run() -> None:
    index = Index()
    observed = entry("c1", "sb-1", "running")
    index.put(Known("c1", "sb-1", "ws", listed_run(observed)))
    index.learn([entry("c1", "sb-1", "exited", exited_at=200), entry("c2", "sb-2"), entry("c3", "")])
    assert index.containers("sb-1") == ["c1"] and index.containers("sb-2") == ["c2"]
    assert index.containers("") is None and index.containers("sb-none") is None  # unlabelled: not indexed
    assert index.changed(entry("c1", "sb-1", "exited", exited_at=200))  # the list shows what was missed
    assert not index.changed(observed)
    assert index.changed(entry("c2", "sb-2"))  # only listed: never observed
    assert index.changed(entry("c9", "sb-9"))  # unknown


def test_a_new_run_with_the_same_end_state_is_a_change() -> None:
    index = Index()
    first = entry("c1", "sb-1", "exited", exited_at=200, exit_code=3)
    index.put(Known("c1", "sb-1", "ws", listed_run(first)))
    assert index.changed(entry("c1", "sb-1", "exited", exited_at=260, exit_code=4))


def test_members_are_counted_only_once_complete_and_dropped_containers_leave() -> None:
    index = Index()
    index.learn([entry("c1", "sb-1"), entry("c2", "sb-1"), entry("c3", "sb-2", workspace="other")])
    network_of = {"ws": "net-ws", "other": "net-other"}.__getitem__
    assert index.members(network_of, "net-ws") is None  # not every container listed yet
    index.loaded()
    assert index.members(network_of, "net-ws") == 1  # one sandbox, two containers
    index.drop("c1")
    index.drop("c2")
    assert index.members(network_of, "net-ws") == 0 and index.containers("sb-1") is None
    index.unload()
    assert index.members(network_of, "net-other") is None
    assert len(index) == 1


def test_a_container_relabelled_to_another_sandbox_moves() -> None:
    index = Index()
    index.learn([entry("c1", "sb-1")])
    index.put(Known("c1", "sb-2", "ws", None))
    assert index.containers("sb-1") is None and index.containers("sb-2") == ["c1"]


def test_a_look_that_inspected_a_container_before_its_removal_does_not_put_it_back() -> None:
    """A delete drops the container while a hub look, answered just before the removal,
    is still on its way: the index must not count it again (a network would be kept)."""
    index = Index()
    index.learn([entry("c1", "sb-1")])
    index.loaded()
    index.drop("c1")
    index.put(Known("c1", "sb-1", "ws", None))
    index.learn([entry("c1", "sb-1")])
    assert index.containers("sb-1") is None
    assert index.members({"ws": "net"}.__getitem__, "net") == 0
