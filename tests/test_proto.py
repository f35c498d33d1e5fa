# SPDX-License-Identifier: Apache-2.0
"""Tests for the generated protobuf layer in ``podmand._proto``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor

from podmand._proto import (
    compute_driver_pb2,
    compute_driver_pb2_grpc,
    extension_pb2,
    options_pb2,
    sandbox_pb2,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_OUT_DIR = REPO_ROOT / "podmand" / "_proto"

EXPECTED_GENERATED_FILES = {
    "__init__.py",
    "compute_driver_pb2.py",
    "compute_driver_pb2.pyi",
    "compute_driver_pb2_grpc.py",
    "extension_pb2.py",
    "extension_pb2.pyi",
    "options_pb2.py",
    "options_pb2.pyi",
    "sandbox_pb2.py",
    "sandbox_pb2.pyi",
}

EXPECTED_RPCS = [
    "GetCapabilities",
    "AuthenticateSandbox",
    "ValidateSandboxCreate",
    "GetSandbox",
    "ListSandboxes",
    "CreateSandbox",
    "StopSandbox",
    "StartSandbox",
    "DeleteSandbox",
    "WatchSandboxes",
    "EnsureWorkspace",
    "DeleteWorkspace",
]


def _load_generator() -> ModuleType:
    path = REPO_ROOT / "proto" / "generate.py"
    spec = importlib.util.spec_from_file_location("podmand_proto_generate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _py_files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.suffix in {".py", ".pyi"}}


def _is_secret(field: Any) -> bool:
    secret: Any = options_pb2.secret
    return bool(field.GetOptions().Extensions[secret])


# --- freshness -------------------------------------------------------------


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    generator = _load_generator()
    generator.generate(tmp_path)

    fresh = _py_files(tmp_path)
    assert fresh == EXPECTED_GENERATED_FILES
    assert _py_files(PROTO_OUT_DIR) == fresh, "run: python proto/generate.py"
    stale = [
        name
        for name in sorted(fresh)
        if (tmp_path / name).read_bytes() != (PROTO_OUT_DIR / name).read_bytes()
    ]
    assert not stale, f"stale generated files {stale}; run: python proto/generate.py"


def test_generated_imports_are_package_relative() -> None:
    for name in sorted(_py_files(PROTO_OUT_DIR)):
        text = (PROTO_OUT_DIR / name).read_text(encoding="utf-8")
        for module in (
            "extension_pb2",
            "options_pb2",
            "sandbox_pb2",
            "compute_driver_pb2",
        ):
            assert f"\nimport {module} " not in text, (
                f"{name} imports {module} top-level"
            )


# --- wire facts --------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (compute_driver_pb2.DriverSandboxSpec, "sandbox_token"),
        (compute_driver_pb2.DriverSandboxSpec, "launch_authentication"),
        (compute_driver_pb2.StartSandboxRequest, "launch_authentication"),
        (compute_driver_pb2.AuthenticateSandboxRequest, "credential"),
    ],
)
def test_secret_option_is_set(message: Any, field: str) -> None:
    assert _is_secret(message.DESCRIPTOR.fields_by_name[field])


def test_secret_option_is_not_set_on_ordinary_fields() -> None:
    spec = compute_driver_pb2.DriverSandboxSpec.DESCRIPTOR
    assert not _is_secret(spec.fields_by_name["log_level"])
    assert not _is_secret(spec.fields_by_name["command"])


def test_option_extension_numbers() -> None:
    secret = options_pb2.secret
    assert secret.number == 50001
    assert secret.type == FieldDescriptor.TYPE_BOOL
    assert secret.containing_type is not None
    assert secret.containing_type.full_name == "google.protobuf.FieldOptions"
    authorization = options_pb2.authorization
    assert authorization.number == 50000
    assert authorization.containing_type is not None
    assert authorization.containing_type.full_name == "google.protobuf.MethodOptions"


def test_launch_authentication_numbers() -> None:
    spec = compute_driver_pb2.DriverSandboxSpec.DESCRIPTOR
    assert spec.fields_by_name["launch_authentication"].number == 16
    assert spec.fields_by_name["sandbox_token"].number == 11
    assert spec.fields_by_name["policy"].number == 7
    assert (
        spec.fields_by_name["policy"].message_type
        is sandbox_pb2.SandboxPolicy.DESCRIPTOR
    )


def test_peer_metadata_field_numbers() -> None:
    fields = {f.name: f.number for f in extension_pb2.PeerMetadata.DESCRIPTOR.fields}
    assert fields == {
        "protocol_version": 1,
        "implementation_name": 2,
        "implementation_version": 3,
        "supported_capabilities": 4,
        "required_capabilities": 5,
    }
    version = {
        f.name: f.number for f in extension_pb2.ProtocolVersion.DESCRIPTOR.fields
    }
    assert version == {"major": 1, "minor": 2}
    assert extension_pb2.DESCRIPTOR.package == "openshell.extension.v1"


def test_peer_metadata_round_trip() -> None:
    meta = extension_pb2.PeerMetadata(
        protocol_version=extension_pb2.ProtocolVersion(major=1, minor=0),
        implementation_name="openshell/podman",
        supported_capabilities=["openshell.compute.contract"],
        required_capabilities=["openshell.compute.contract"],
    )
    request = compute_driver_pb2.GetCapabilitiesRequest(gateway=meta)
    decoded = compute_driver_pb2.GetCapabilitiesRequest.FromString(
        request.SerializeToString()
    )
    assert decoded.gateway == meta


def test_timestamp_field_numbers() -> None:
    event = compute_driver_pb2.DriverPlatformEvent.DESCRIPTOR.fields_by_name[
        "event_time"
    ]
    assert event.number == 101
    assert event.message_type is not None
    assert event.message_type.full_name == "google.protobuf.Timestamp"
    cond = compute_driver_pb2.DriverCondition.DESCRIPTOR.fields_by_name[
        "transition_time"
    ]
    assert cond.number == 105


@pytest.mark.parametrize(
    ("number", "name", "enum_name"),
    [
        (4, "tls", "openshell.sandbox.v1.NetworkTlsMode"),
        (5, "enforcement", "openshell.sandbox.v1.NetworkEnforcementMode"),
        (6, "access", "openshell.sandbox.v1.NetworkAccessPreset"),
    ],
)
def test_network_endpoint_enum_fields(number: int, name: str, enum_name: str) -> None:
    field = sandbox_pb2.NetworkEndpoint.DESCRIPTOR.fields_by_number[number]
    assert field.name == name
    assert field.type == FieldDescriptor.TYPE_ENUM
    assert field.enum_type is not None
    assert field.enum_type.full_name == enum_name


def test_network_endpoint_has_26_fields() -> None:
    numbers = sorted(f.number for f in sandbox_pb2.NetworkEndpoint.DESCRIPTOR.fields)
    assert numbers == list(range(1, 27))


def test_enum_values() -> None:
    assert sandbox_pb2.NetworkTlsMode.Value("NETWORK_TLS_MODE_SKIP") == 1
    assert sandbox_pb2.NetworkTlsMode.Value("NETWORK_TLS_MODE_PASSTHROUGH") == 3
    assert (
        sandbox_pb2.NetworkEnforcementMode.Value("NETWORK_ENFORCEMENT_MODE_AUDIT") == 2
    )
    assert sandbox_pb2.NetworkAccessPreset.Value("NETWORK_ACCESS_PRESET_FULL") == 3


def test_sandbox_policy_decodes_enum_endpoint() -> None:
    policy = sandbox_pb2.SandboxPolicy(version=1)
    endpoint = policy.network_policies["web"].endpoints.add(
        host="example.com",
        port=443,
        tls=sandbox_pb2.NETWORK_TLS_MODE_SKIP,
        access=sandbox_pb2.NETWORK_ACCESS_PRESET_READ_ONLY,
    )
    endpoint.credential_binding.provider = "github"
    decoded = sandbox_pb2.SandboxPolicy.FromString(policy.SerializeToString())
    got = decoded.network_policies["web"].endpoints[0]
    assert got.tls == sandbox_pb2.NETWORK_TLS_MODE_SKIP
    assert got.access == sandbox_pb2.NETWORK_ACCESS_PRESET_READ_ONLY
    assert got.credential_binding.provider == "github"


def test_compute_driver_rpc_names() -> None:
    service = compute_driver_pb2.DESCRIPTOR.services_by_name["ComputeDriver"]
    assert service.full_name == "openshell.compute.v1.ComputeDriver"
    assert [m.name for m in service.methods] == EXPECTED_RPCS
    watch = service.methods_by_name["WatchSandboxes"]
    assert watch.server_streaming is True
    assert not any(
        m.server_streaming for m in service.methods if m.name != "WatchSandboxes"
    )
    assert hasattr(compute_driver_pb2_grpc, "ComputeDriverServicer")
    assert hasattr(compute_driver_pb2_grpc, "ComputeDriverStub")
    assert hasattr(compute_driver_pb2_grpc, "add_ComputeDriverServicer_to_server")
    for rpc in EXPECTED_RPCS:
        assert hasattr(compute_driver_pb2_grpc.ComputeDriverServicer, rpc)
