"""Unit tests for podmand.names: resource names shared with upstream."""

from __future__ import annotations

import pytest

from podmand import names


@pytest.mark.parametrize(
    ("prefix", "workspace", "expected"),
    [
        ("openshell", "default", "openshell"),
        ("openshell", "", "openshell"),
        ("e2e-podman-1-2", "default", "e2e-podman-1-2"),
        ("openshell", "ws", "openshell-ws"),
        ("openshell", "team-a", "openshell-team-a"),
        ("custom", "Default", "custom-Default"),
    ],
)
def test_network_name(prefix: str, workspace: str, expected: str) -> None:
    """The default workspace uses OPENSHELL_NETWORK_NAME literally (upstream's fixtures create and
    join it); any other workspace gets its own isolated <prefix>-<workspace>."""
    assert names.network_name(prefix, workspace) == expected


VICTIM = {
    names.MANAGED: "true",
    names.OWNER: names.OWNER_VALUE,
    names.SANDBOX_ID: "victim",
    names.SANDBOX_NAME: "box",
    names.SANDBOX_WORKSPACE: "ws",
}


def test_a_container_is_a_sandboxs_only_under_the_name_its_labels_give() -> None:
    """An image's labels are copied onto every container made from it: a container
    claiming the victim's id is the victim's only under the name podmand gave it."""
    assert names.sandbox_of("openshell-ws--box-victim", VICTIM) == "victim"
    assert names.sandbox_of("/openshell-ws--box-victim", VICTIM) == "victim"  # inspect's Docker spelling
    assert names.sandbox_of("podmand-read-1-abc", VICTIM) == ""  # an image reader made from a hostile image
    assert names.sandbox_of("openshell-ws--box-attacker", VICTIM) == ""  # the attacker's own sandbox
    assert names.sandbox_of("openshell-ws--box-victim", {**VICTIM, names.OWNER: "someone"}) == ""
    assert names.sandbox_of("openshell-ws--box-victim", {**VICTIM, names.MANAGED: "false"}) == ""
    assert names.sandbox_of("openshell---box-", {**VICTIM, names.SANDBOX_ID: "", names.SANDBOX_WORKSPACE: ""}) == ""


def test_podmands_own_containers_set_every_label_it_reads() -> None:
    labels = names.own_labels("/state")
    assert set(labels) == set(names.READ_LABELS)
    assert labels[names.OWNER] == names.OWNER_VALUE and labels[names.STATE_DIR] == "/state"
    assert {k: v for k, v in labels.items() if k not in (names.OWNER, names.STATE_DIR)} == dict.fromkeys(
        set(names.READ_LABELS) - {names.OWNER, names.STATE_DIR}, ""
    )
    # what podmand reads of a container all lies under the reserved prefixes
    assert all(key.startswith(names.RESERVED_LABEL_PREFIXES) for key in names.READ_LABELS)


@pytest.mark.parametrize(
    ("labels", "found"),
    [
        (None, None),
        ({"org.opencontainers.image.title": "x", "maintainer": "me"}, None),
        ({"openshell.ai/sandbox-id": "victim", "a": "b"}, "openshell.ai/sandbox-id"),
        ({"io.podmand.instance": "x"}, "io.podmand.instance"),
        ({"openshell.managed": "true"}, "openshell.managed"),
        ({"openshellx": "1", "io.podmandx": "1"}, None),
    ],
)
def test_image_labels_under_reserved_prefixes_are_found(labels: dict[str, str] | None, found: str | None) -> None:
    assert names.reserved_label(labels) == found
