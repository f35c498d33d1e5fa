"""Unit tests for podmand.negotiation: capabilities and gateway metadata checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from podmand import negotiation
from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import extension_pb2 as ext
from podmand.config import Settings
from podmand.errors import FailedPrecondition
from podmand.host import enforcement

CONTRACT = "openshell.compute.contract"
DEFAULT_POLICY = (
    'v1:{"allow_driver_config":false,"resource_admission":{"enabled":true,"required_labels":'
    '{"openshell.ai/sandbox-attachable":"true","openshell.ai/workspace":"${workspace}"}}}'
)


def gateway(**overrides: Any) -> ext.PeerMetadata:
    """The gateway metadata from the contract, with fields replaced as given."""
    fields: dict[str, Any] = {
        "protocol_version": ext.ProtocolVersion(major=1, minor=0),
        "implementation_name": "openshell/gateway",
        "implementation_version": "0.1.2",
        "supported_capabilities": [CONTRACT, "openshell.compute.launch-authentication"],
        "required_capabilities": [CONTRACT],
    }
    fields.update(overrides)
    return ext.PeerMetadata(**fields)


@pytest.fixture
def ours() -> ext.PeerMetadata:
    return negotiation.capabilities(Settings(), limits=enforcement.BOTH).extension


def test_capabilities_fields() -> None:
    """The driver advertises protocol 1.0, its name, and the contract as supported and required."""
    caps = negotiation.capabilities(Settings(), limits=enforcement.BOTH)
    meta = caps.extension
    assert (meta.protocol_version.major, meta.protocol_version.minor) == (1, 0)
    assert meta.implementation_name.strip()
    assert meta.implementation_version.strip()
    assert CONTRACT in meta.supported_capabilities
    assert CONTRACT in meta.required_capabilities
    assert caps.gateway_manages_lifecycle is True
    assert caps.default_image == Settings().sandbox_image
    assert caps.resource_capabilities.cpu.limit_supported is True
    assert caps.resource_capabilities.gpu.count_selection_supported is False
    assert caps.resource_capabilities.gpu.default_selection_supported is False


@pytest.mark.parametrize("selectable", [False, True])
def test_gpu_bits_are_what_the_inventory_can_serve(selectable: bool) -> None:
    """Both GPU bits say whether a plain gpu request (with or without a count) can be served
    from the CDI inventory; with_gpus changes only them, on a copy (the built response and
    its admission string stay as they are)."""
    built = negotiation.capabilities(Settings(), limits=enforcement.BOTH)
    assert built.resource_capabilities.gpu.count_selection_supported is False
    current = negotiation.with_gpus(built, selectable)
    gpu = current.resource_capabilities.gpu
    assert (gpu.count_selection_supported, gpu.default_selection_supported) == (selectable, selectable)
    assert negotiation.capabilities(Settings(), limits=enforcement.BOTH, gpus_selectable=selectable) == current
    assert built.resource_capabilities.gpu.count_selection_supported is False
    e2e = (Path(__file__).parents[1] / "e2e" / "test_resources.py").read_text()
    assert "def test_gpu_count_assigns_cdi_devices(" in e2e


def test_sandbox_authentication_bit_is_false_and_the_bundle_is_not_a_required_capability() -> None:
    """Not advertised: podmand mounts no credential of its own (the supervisor's env and mounts
    carry no token: tests/unit/pair/test_specs.py), so AuthenticateSandbox has nothing to vouch
    for. The launch bundle is required by refusing a create or start without it, not by
    requiring its capability (contract §1 item 1)."""
    caps = negotiation.capabilities(Settings(), limits=enforcement.BOTH)
    assert caps.supports_sandbox_authentication is False
    assert list(caps.extension.required_capabilities) == [negotiation.CONTRACT]
    assert negotiation.LAUNCH_AUTHENTICATION in caps.extension.supported_capabilities
    specs = (Path(__file__).parent / "pair" / "test_specs.py").read_text()
    assert '"OPENSHELL_SANDBOX_TOKEN_FILE", "OPENSHELL_K8S_SA_TOKEN_FILE"} & set(env)' in specs


def test_runtime_readiness_not_claimed() -> None:
    """podmand reports container state only, never the supervisor's own readiness."""
    caps = negotiation.capabilities(Settings(), limits=enforcement.BOTH)
    assert caps.driver_reports_runtime_readiness is False
    assert caps.gateway_manages_lifecycle is True


@pytest.mark.parametrize("limits", [enforcement.NONE, enforcement.Limits(cpu=False, memory=True),
                                    enforcement.Limits(cpu=True, memory=False)], ids=["none", "memory", "cpu"])
def test_each_limit_bit_is_its_own_controllers(limits: enforcement.Limits) -> None:
    """Each bit follows its controller: a user with memory delegated and not cpu gets a
    memory bit and no CPU bit."""
    caps = negotiation.capabilities(Settings(), limits=limits)
    assert caps.resource_capabilities.cpu.limit_supported is limits.cpu
    assert caps.resource_capabilities.memory.limit_supported is limits.memory


def test_default_admission_policy_exact() -> None:
    """The gateway compares the admission string byte for byte."""
    assert negotiation.capabilities(Settings(), limits=enforcement.BOTH).resource_admission_policy == DEFAULT_POLICY


def test_admission_policy_byte_stable() -> None:
    """Equal settings give identical responses, whatever order the labels were configured in."""
    a = Settings(allow_driver_config=True, admission_labels={"z.io/b": "2", "a.io/a": "1"})
    b = Settings(allow_driver_config=True, admission_labels={"a.io/a": "1", "z.io/b": "2"})
    ra = negotiation.capabilities(a, limits=enforcement.BOTH)
    rb = negotiation.capabilities(b, limits=enforcement.BOTH)
    assert ra.SerializeToString(deterministic=True) == rb.SerializeToString(deterministic=True)
    assert ra.resource_admission_policy == (
        'v1:{"allow_driver_config":true,"resource_admission":{"enabled":true,'
        '"required_labels":{"a.io/a":"1","z.io/b":"2"}}}'
    )


def test_gateway_from_contract_is_accepted(ours: ext.PeerMetadata) -> None:
    """The reference gateway metadata negotiates cleanly, including a newer minor version."""
    negotiation.check_gateway(pb.GetCapabilitiesRequest(gateway=gateway()), ours)
    negotiation.check_gateway(
        pb.GetCapabilitiesRequest(gateway=gateway(protocol_version=ext.ProtocolVersion(major=1, minor=7))), ours
    )


def test_missing_gateway_metadata(ours: ext.PeerMetadata) -> None:
    """An old gateway that sends no metadata is refused with an upgrade hint."""
    with pytest.raises(FailedPrecondition) as exc:
        negotiation.check_gateway(pb.GetCapabilitiesRequest(), ours)
    assert "upgrade" in exc.value.message


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"protocol_version": ext.ProtocolVersion(major=2, minor=0)}, "2.0"),
        ({"protocol_version": None}, "protocol_version"),
        ({"required_capabilities": [CONTRACT, "openshell.compute.unknown-thing"]}, "openshell.compute.unknown-thing"),
        ({"supported_capabilities": ["openshell.compute.launch-authentication"]}, CONTRACT),
        ({"supported_capabilities": [CONTRACT, CONTRACT]}, "duplicates"),
        ({"required_capabilities": [CONTRACT, CONTRACT]}, "duplicates"),
        ({"supported_capabilities": [CONTRACT, "OpenShell.Compute.Contract"]}, "OpenShell.Compute.Contract"),
        ({"supported_capabilities": [CONTRACT, "openshell.compute"]}, "openshell.compute"),
        ({"supported_capabilities": [CONTRACT, "openshell..x"]}, "openshell..x"),
        ({"implementation_name": ""}, "implementation_name"),
        ({"implementation_version": "0.1\n"}, "implementation_version"),
    ],
)
def test_gateway_rejections(ours: ext.PeerMetadata, overrides: dict[str, Any], needle: str) -> None:
    """Each unusable gateway is refused with FAILED_PRECONDITION saying why."""
    meta = gateway(**{k: v for k, v in overrides.items() if v is not None})
    if overrides.get("protocol_version", ...) is None:
        meta.ClearField("protocol_version")
    with pytest.raises(FailedPrecondition) as exc:
        negotiation.check_gateway(pb.GetCapabilitiesRequest(gateway=meta), ours)
    assert needle in exc.value.message
