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
