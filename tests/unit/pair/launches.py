"""One launch of a sandbox's pair, as the tests of podmand/pair/ build it: a gateway bundle
with real-looking tokens, a fenced workload, fresh TLS material."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from podmand.libpod import ContainerInspect
from podmand.pair import documents, outerfence, tls
from podmand.security import tokens
from tests.jwt import make_launch

SANDBOX = "box-1"
CONTAINER_ID = "9a" * 32
GENERATION = "g0000000000000001"  # the bundle's runtime generation
START_GENERATION = "g00000000000000a2"  # what podmand records in restart-metadata.json
KEYS_PEM = "-----BEGIN PUBLIC KEY-----\nAAAA\n"


def bundle(generation: str = GENERATION, **supervisor: Any) -> tokens.LaunchAuthentication:
    doc = json.loads(make_launch(SANDBOX, generation))
    doc["supervisor"].update(supervisor)
    return tokens.decode_launch_authentication(json.dumps(doc).encode(), "launch_authentication")


def fenced(container_id: str = CONTAINER_ID) -> ContainerInspect:
    return msgspec.convert({"Id": container_id, "Name": "openshell--box-box-1",
                            "HostConfig": {"NetworkMode": "none"}}, ContainerInspect)


def identity(**over: Any) -> documents.WorkloadIdentity:
    fields: dict[str, Any] = {"uid": 1000, "gid": 1001, "supplementary": [2000], "source": "image",
                              "resource_digest": "sha256:" + "7e" * 32, **over}
    return documents.workload_identity(fields["uid"], fields["gid"], fields["supplementary"], fields["source"],
                                       fields["resource_digest"])


def launch(userns: str = "auto", **over: Any) -> documents.Launch:
    auth = over.pop("bundle", None) or bundle()
    ident = over.pop("identity", None) or identity()
    fields: dict[str, Any] = {
        "sandbox_id": SANDBOX,
        "container_id": CONTAINER_ID,
        "generation": START_GENERATION,
        "host_gateway_ip": "127.0.0.1",
        "identity": ident,
        "claims": documents.resource_claims(CONTAINER_ID, ident, userns),
        "child_env": documents.child_env(["PATH=/usr/bin:/bin", "LANG=C.UTF-8"], {"TEAM": "blue"}),
        "bundle": auth,
        "fence": outerfence.outer_fence(auth.supervisor.runtime_generation, fenced()),
        "tls": tls.mint(auth.supervisor.session_id),
        **over,
    }
    return documents.Launch(**fields)


def secret_windows(launch: documents.Launch, width: int = 12) -> set[bytes]:
    """Every ``width``-byte window of the launch's two bearer tokens."""
    out = set()
    for token in (launch.bundle.supervisor.gateway_token, launch.bundle.supervisor.sandbox_token):
        data = token.encode()
        out |= {data[i:i + width] for i in range(len(data) - width + 1)}
    return out


def leaks(data: bytes, launch: documents.Launch) -> list[bytes]:
    """The token windows found in ``data`` (none, for anything but auth.json)."""
    return sorted(w for w in secret_windows(launch) if w in data)
