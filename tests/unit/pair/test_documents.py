"""The pair's JSON documents (podmand/pair/documents.py, contract §2.3, §2.4): their exact
shapes, what goes where, and that the gateway's tokens reach auth.json alone."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from podmand.errors import FailedPrecondition
from podmand.pair import documents, outerfence, tls
from podmand.sandbox.identity import Resolved
from tests.unit.pair import launches
from tests.unit.pair.launches import CONTAINER_ID, GENERATION, SANDBOX, START_GENERATION

SESSION = "7f0c0a52-2f43-4c5e-9a52-4b5c7b2b9d11"  # tests/jwt.py's bundles


@pytest.fixture(scope="module")
def launch() -> documents.Launch:
    return launches.launch()


@pytest.fixture(scope="module")
def docs(launch: documents.Launch) -> documents.Documents:
    return documents.documents(launch)


def test_bootstrap_json(launch: documents.Launch, docs: documents.Documents) -> None:
    doc = json.loads(docs.bootstrap)
    assert list(doc) == ["boundary_id", "generation", "session_id", "session_rotation", "auth_epoch", "gateway_id",
                         "verification_keys", "listener", "resource_claims", "resource_claim_files",
                         "workload_identity", "outer_fence", "child_env"]
    assert (doc["boundary_id"], doc["generation"], doc["session_id"]) == (SANDBOX, GENERATION, SESSION)
    assert (doc["session_rotation"], doc["auth_epoch"], doc["gateway_id"]) == (1, 1, "gw-test")
    assert doc["verification_keys"] == [{"key_id": "k1", "public_key_pem": launches.KEYS_PEM}]  # a string here
    assert doc["listener"] == {
        "kind": "unix", "socket_path": "/.openshell/channel/sandbox/control.sock",
        "tls": {"certificate_chain_path": "/.openshell/channel/sandbox/server.crt",
                "private_key_path": "/.openshell/channel/sandbox/server.key"}}
    assert doc["resource_claims"] == {"podman.container_id": CONTAINER_ID,
                                      "podman.image_identity": "sha256:" + "7e" * 32}
    assert doc["resource_claim_files"] == {}
    assert doc["workload_identity"] == {"uid": 1000, "gid": 1001, "supplementary_gids": [2000], "source": "image",
                                        "resource_digest": "sha256:" + "7e" * 32}
    assert doc["outer_fence"] == json.loads(msgspec.json.encode(launch.fence))
    assert list(doc["outer_fence"]) == ["generation", "established", "evidence_digest"]
    assert doc["child_env"] == {"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin", "TEAM": "blue"}
    assert msgspec.json.decode(docs.bootstrap, type=documents.BoundaryConfig).generation == GENERATION


def test_runtime_descriptor(launch: documents.Launch, docs: documents.Documents) -> None:
    doc = json.loads(docs.runtime_descriptor)
    assert list(doc) == ["boundary_id", "generation", "session_id", "workload_identity", "transport", "tls",
                         "host_gateway_ip", "resource_claims", "outer_fence"]
    assert (doc["boundary_id"], doc["generation"], doc["session_id"]) == (SANDBOX, GENERATION, SESSION)
    assert doc["transport"] == {"kind": "unix", "socket_path": "/.openshell/channel/sandbox/control.sock"}
    assert doc["tls"] == {"server_name": f"sandbox.{SESSION}.openshell.internal",
                          "trust_anchor_pem": launch.tls.trust_anchor_pem}
    assert doc["host_gateway_ip"] == "127.0.0.1"
    boot = json.loads(docs.bootstrap)
    for same in ("resource_claims", "workload_identity", "outer_fence"):
        assert doc[same] == boot[same]
    msgspec.json.decode(docs.runtime_descriptor, type=documents.RuntimeDescriptor)


def test_the_channels_tls_goes_to_the_workload_its_anchor_to_the_supervisor(
        launch: documents.Launch, docs: documents.Documents) -> None:
    assert docs.server_certificate == launch.tls.certificate_chain_pem.encode()
    assert docs.server_key == launch.tls.private_key_pem.encode()
    assert launch.tls.trust_anchor_pem.encode() not in docs.bootstrap
    for doc in (docs.bootstrap, docs.runtime_descriptor, docs.restart_metadata, docs.auth):
        assert b"PRIVATE KEY" not in doc


def test_auth_json_is_the_supervisor_object_as_sent() -> None:
    """A newer gateway's fields ride along (contract §9): auth.json is the object's own bytes."""
    bundle = launches.bundle(ssh_host_private_key="-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n")
    docs = documents.documents(launches.launch(bundle=bundle))
    assert docs.auth == bundle.supervisor_json
    assert json.loads(docs.auth)["ssh_host_private_key"].startswith("-----BEGIN OPENSSH")
    assert b"ssh_host_private_key" not in docs.bootstrap + docs.runtime_descriptor + docs.restart_metadata


def test_restart_metadata_round_trip(launch: documents.Launch, docs: documents.Documents) -> None:
    doc = json.loads(docs.restart_metadata)
    assert list(doc) == ["generation", "workload_identity", "child_env"]
    assert doc["generation"] == START_GENERATION
    meta = documents.read_restart_metadata(docs.restart_metadata)
    assert meta == documents.RestartMetadata(START_GENERATION, launch.identity, launch.child_env)
    extra = docs.restart_metadata[:-1] + b',"later":1}'  # read leniently, as upstream reads it
    assert documents.read_restart_metadata(extra) == meta


@pytest.mark.parametrize(("change", "said"), [
    (lambda d: b"{", "restart-metadata.json: not valid JSON"),
    (lambda d: b"[]", r"Expected `object`, got `array`"),
    (lambda d: d.replace(b'"generation":"g00000000000000a2"', b'"generation":""'), "generation is empty"),
    (lambda d: d.replace(b'"uid":1000', b'"uid":0'), "workload identity: uid 0"),
    (lambda d: d.replace(b'"uid":1000', b'"uid":"x"'), r"\$\.workload_identity\.uid"),
    (lambda d: d.replace(b'"supplementary_gids":[2000]', b'"supplementary_gids":[2000,1001]'), "not normalised"),
    (lambda d: d.replace(b',"child_env"', b',"gone"'), "missing required field `child_env`"),
])
def test_restart_metadata_refused(docs: documents.Documents, change: Any, said: str) -> None:
    with pytest.raises(FailedPrecondition, match=said):
        documents.read_restart_metadata(change(docs.restart_metadata))


def test_no_token_anywhere_but_auth_json(launch: documents.Launch, docs: documents.Documents) -> None:
    """No 12-byte piece of either bearer token is in any document the workload reads, nor in
    the descriptor or the restart metadata; auth.json has both whole."""
    sup = launch.bundle.supervisor
    assert sup.gateway_token.encode() in docs.auth and sup.sandbox_token.encode() in docs.auth
    assert launches.leaks(docs.auth, launch)  # the check finds what is there
    for name in ("bootstrap", "server_certificate", "server_key", "runtime_descriptor", "restart_metadata"):
        assert launches.leaks(getattr(docs, name), launch) == [], name


def test_the_same_launch_gives_the_same_bytes(launch: documents.Launch, docs: documents.Documents) -> None:
    assert documents.documents(launch).bootstrap == docs.bootstrap
    swapped = launches.launch(child_env={"Z": "1", "A": "2"}, tls=launch.tls, bundle=launch.bundle)
    assert list(json.loads(documents.documents(swapped).bootstrap)["child_env"]) == ["A", "Z"]


def test_parts_of_another_launch_are_refused(launch: documents.Launch) -> None:
    other = launches.bundle("g0000000000000009")
    with pytest.raises(FailedPrecondition, match="outer fence: made for another runtime generation"):
        documents.documents(launches.launch(bundle=other, fence=launch.fence))
    with pytest.raises(FailedPrecondition, match="resource claims: made for another workload"):
        documents.documents(launches.launch(container_id="8b" * 32))
    with pytest.raises(FailedPrecondition, match="channel TLS: made for another session"):
        documents.documents(launches.launch(tls=tls.mint("00000000-0000-4000-8000-000000000001")))


# ---------------------------------------------------------------- identity, claims, env, address


def test_identity_is_normalised() -> None:
    ident = documents.workload_identity(1000, 1001, [3000, 1001, 2000, 3000], "policy", "sha256:x")
    assert ident.supplementary_gids == [2000, 3000]
    resolved = Resolved(1000, 1001, (1001, 2000), "image", "sha256:x")
    assert documents.identity_of(resolved) == documents.WorkloadIdentity(1000, 1001, [2000], "image", "sha256:x")


@pytest.mark.parametrize(("args", "said"), [
    ((0, 1001, [], "image", "d"), "uid 0 .root. is never"),
    ((1000, 0, [], "image", "d"), "gid 0 .root. is never"),
    ((1000, 1001, [5, 0], "image", "d"), "supplementary gid 0 .root."),
    ((2**32 - 1, 1001, [], "image", "d"), "uid 4294967295 is out of range"),
    ((-1, 1001, [], "image", "d"), "uid -1 is out of range"),
    ((1000, 1001, [], " ", "d"), "its source is empty"),
    ((1000, 1001, [], "image", ""), "its image digest is empty"),
])
def test_identity_refused(args: tuple[Any, ...], said: str) -> None:
    with pytest.raises(FailedPrecondition, match=f"^workload identity: {said}"):
        documents.workload_identity(*args)


@pytest.mark.parametrize(("userns", "extra"), [
    ("auto", False), ("auto:size=2048", False), ("private", False), ("nomap", False), ("host", False),
    ("keep-id", True), ("keep-id:uid=1000,gid=1000", True),
])
def test_claims_allow_extra_groups_only_with_keep_id(userns: str, extra: bool) -> None:
    claims = documents.resource_claims(CONTAINER_ID, launches.identity(), userns)
    assert claims.pop("openshell.identity.allow_extra_supplementary_groups", None) == ("true" if extra else None)
    assert claims == {"podman.container_id": CONTAINER_ID, "podman.image_identity": "sha256:" + "7e" * 32}


def test_claims_need_the_container() -> None:
    with pytest.raises(FailedPrecondition, match="container id is empty"):
        documents.resource_claims("", launches.identity(), "auto")


def test_child_env() -> None:
    env = documents.child_env(["PATH=/bin", "EMPTY=", "NOEQUALS", "=x", "OPENSHELL_SANDBOX=img", "A=1=2"],
                              {"PATH": "/opt/bin", "OPENSHELL_ENDPOINT": "x", "B": "b"})
    assert env == {"A": "1=2", "B": "b", "EMPTY": "", "PATH": "/opt/bin"}


@pytest.mark.parametrize(("value", "ok"), [
    ("127.0.0.1", "127.0.0.1"), ("10.0.2.2", "10.0.2.2"), ("::1", "::1"), ("fd00::0001", "fd00::1"),
    ("0.0.0.0", None), ("::", None), ("224.0.0.1", None), ("255.255.255.255", None), ("169.254.169.254", None),
    ("host-gateway", None), ("", None),
])
def test_host_gateway_ip(value: str, ok: str | None) -> None:
    if ok:
        assert documents.host_gateway_ip(value) == ok
    else:
        with pytest.raises(FailedPrecondition, match=r"^host_gateway_ip: "):
            documents.host_gateway_ip(value)


def test_fence_travels_unchanged(launch: documents.Launch, docs: documents.Documents) -> None:
    fence = msgspec.json.decode(json.dumps(json.loads(docs.bootstrap)["outer_fence"]), type=outerfence.OuterFence)
    assert fence == launch.fence and fence.generation == GENERATION
