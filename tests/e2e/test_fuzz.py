"""Hostile requests against the pex on real rootless Podman (issue 9, item 7).

Hypothesis generates malformed requests for every RPC: bad ids, names and
workspaces (traversal, control characters, a trailing newline, empty, huge),
bad environment keys, quantities and labels, NaN in driver_config, random
launch bundles, bad generation ids, missing fields.  None may end INTERNAL or
UNKNOWN, none may be accepted, podmand keeps serving, and nothing this podmand
owns (container of either role, volume, network, state file) is left behind.

Split topology: every create-like request starts from a valid signed launch
bundle for its id (a create without one is refused before most fields are
looked at), and ``sandbox_token`` is not fuzzed: podmand ignores it there (the
supervisor's bearer is the bundle's), so a bad one makes no request malformed.
"""

from __future__ import annotations

import collections
import functools
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import podman
from google.protobuf import struct_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podmand._proto import compute_driver_pb2 as pb
from tests.standin.launch import Launch

from .conftest import SANDBOX_IMAGE, Podmand, gateway_metadata

EXAMPLES = int(os.environ.get("PODMAND_FUZZ_EXAMPLES", "1200"))
OWNED = {"label": "io.podmand.owner=podmand"}
SANDBOX_ID = "openshell.ai/sandbox-id"
_VALID_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}")
_VALID_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,255}")

BAD_NAMES = [
    ".", "..", "../x", "../../etc", "/abs", "/", "a/b", "a\\b", "abc\n", "\nabc", "abc\r", "a b", "a\x00b", "a\tb",
    "-lead", "_lead", ".hidden", "x" * 129, "x" * 5000, "ü", "a;id", "$(id)", "a:b", "A" * 127 + "\n", " ", "a\x7f",
]
BAD_ENV_KEYS = ["", "A=B", "1A", "A B", "A\n", "\x00", "ü", "A\x00", "=", "x" * 300]
BAD_CPU = ["abc", "-1", "1e20", "NaN", "nan", "inf", "Infinity", "1.5.5", "99999999999", "0x10", "1" * 70, " ", "1 m",
           "5000", "-0.5", "1Ki"]
BAD_MEM = ["8Ei", "-1Gi", "1e30", "nan", "1Qi", "1" * 70, "Gi", "1.2.3Gi", "99999999999999999999", "inf", "-5"]
BAD_IMAGES = ["::::", "UPPER/Case::x", "a" * 5000, "image name", "img\n", "\x00", "@@", "/abs/path"]


def bad_text(valid: re.Pattern[str], extra: list[str], *, allow_empty: bool) -> st.SearchStrategy[str]:
    """Strings that ``valid`` refuses: known traps and random text."""
    pool = [s for s in extra if (s or allow_empty) and not valid.fullmatch(s)]
    random = st.text(min_size=0 if allow_empty else 1, max_size=300).filter(lambda s: not valid.fullmatch(s))
    return st.one_of(st.sampled_from(pool), random)


bad_names = bad_text(_VALID_NAME, BAD_NAMES, allow_empty=True)
bad_workspaces = bad_text(_VALID_NAME, BAD_NAMES, allow_empty=False)  # "" is the default workspace
any_ids = st.one_of(bad_names, st.just("fz-unknown"), st.text(max_size=200))


@functools.cache
def bundle(sandbox_id: str) -> bytes:
    """A valid launch bundle for ``sandbox_id`` (made once: each Launch makes keys and a certificate)."""
    return Launch(sandbox_id=sandbox_id).bundle()


def base_sandbox(sandbox_id: str = "fz-1") -> pb.DriverSandbox:
    return pb.DriverSandbox(
        id=sandbox_id, name="fuzz", workspace="fuzz",
        spec=pb.DriverSandboxSpec(command=["sleep", "600"], template=pb.DriverSandboxTemplate(image=SANDBOX_IMAGE),
                                  launch_authentication=bundle(sandbox_id)),
    )


def nan_struct(value: float) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update({"mounts": [{"type": "volume", "source": "v", "target": "/x", "size": value}], "n": value})
    return s


# One mutation that makes a create request invalid, with what it breaks (for the histogram).
Mutation = tuple[str, Callable[[pb.DriverSandbox], None]]


def _set(path: str, value: Any) -> Callable[[pb.DriverSandbox], None]:
    def apply(box: pb.DriverSandbox) -> None:
        *parents, last = path.split(".")
        target: Any = box
        for p in parents:
            target = getattr(target, p)
        setattr(target, last, value)

    return apply


def _env(where: str, key: str) -> Callable[[pb.DriverSandbox], None]:
    return lambda box: getattr(box.spec, where).__setitem__(key, "v") if where == "environment" \
        else box.spec.template.environment.__setitem__(key, "v")


mutations: st.SearchStrategy[Mutation] = st.one_of(
    bad_names.map(lambda v: ("id", _set("id", v))),
    bad_names.map(lambda v: ("name", _set("name", v))),
    bad_workspaces.map(lambda v: ("workspace", _set("workspace", v))),
    bad_text(_VALID_ENV, BAD_ENV_KEYS, allow_empty=True).map(lambda k: ("env key", _env("environment", k))),
    bad_text(_VALID_ENV, BAD_ENV_KEYS, allow_empty=True).map(lambda k: ("template env key", _env("template", k))),
    st.sampled_from(BAD_CPU).map(lambda v: ("cpu quantity", _set("spec.template.resources.cpu_limit", v))),
    st.sampled_from(BAD_CPU).map(lambda v: ("cpu quantity", _set("spec.template.resources.cpu_request", v))),
    st.sampled_from(BAD_MEM).map(lambda v: ("memory quantity", _set("spec.template.resources.memory_limit", v))),
    st.sampled_from([math.nan, math.inf, -math.inf]).map(
        lambda v: ("NaN driver_config", lambda box: box.spec.template.driver_config.CopyFrom(nan_struct(v)))),
    st.binary(min_size=1, max_size=512).map(lambda v: ("launch bundle", _set("spec.launch_authentication", v))),
    st.sampled_from(BAD_IMAGES).map(lambda v: ("image", _set("spec.template.image", v))),
    st.sampled_from(["relative", "/x; reboot", "/a" * 80, "/x\n", "/x y"]).map(
        lambda v: ("agent socket", _set("spec.template.agent_socket_path", v))),
    st.sampled_from([("", "v"), ("k", "v" * 5000), ("k\n", "v"), ("x" * 300, "v")]).map(
        lambda kv: ("label", lambda box: box.spec.template.labels.__setitem__(*kv))),
    st.sampled_from(["a\x00b", "\x00"]).map(lambda v: ("command", lambda box: box.spec.command.append(v))),
    st.just(("missing spec", lambda box: box.ClearField("spec"))),
    st.just(("missing id", _set("id", ""))),
    st.just(("missing name", _set("name", ""))),
)


@st.composite
def bad_sandboxes(draw: st.DrawFn) -> tuple[str, pb.DriverSandbox | None]:
    if draw(st.integers(0, 30)) == 0:
        return "missing sandbox", None
    box = base_sandbox(draw(st.sampled_from(["fz-1", "fz-2"])))
    kinds = []
    for kind, apply in draw(st.lists(mutations, min_size=1, max_size=3)):
        apply(box)
        kinds.append(kind)
    return "+".join(sorted(set(kinds))), box


def create_like(method: str, request_type: Any) -> st.SearchStrategy[tuple[str, str, Any]]:
    return bad_sandboxes().map(
        lambda kb: (method, kb[0], request_type(sandbox=kb[1]) if kb[1] is not None else request_type()))


requests: st.SearchStrategy[tuple[str, str, Any]] = st.one_of(
    create_like("CreateSandbox", pb.CreateSandboxRequest),
    create_like("CreateSandbox", pb.CreateSandboxRequest),
    create_like("ValidateSandboxCreate", pb.ValidateSandboxCreateRequest),
    any_ids.map(lambda i: ("GetSandbox", "id", pb.GetSandboxRequest(sandbox_id=i))),
    any_ids.map(lambda i: ("StopSandbox", "id", pb.StopSandboxRequest(sandbox_id=i))),
    any_ids.map(lambda i: ("DeleteSandbox", "id", pb.DeleteSandboxRequest(sandbox_id=i))),
    st.tuples(any_ids, st.text(max_size=300), st.binary(max_size=300), st.text(max_size=200)).map(
        lambda t: ("StartSandbox", "id/generation/bundle", pb.StartSandboxRequest(
            sandbox_id=t[0], generation_id=t[1], launch_authentication=t[2], expected_runtime_identity=t[3]))),
    bad_workspaces.map(lambda w: ("EnsureWorkspace", "workspace", pb.EnsureWorkspaceRequest(workspace=w))),
    bad_workspaces.map(lambda w: ("DeleteWorkspace", "workspace", pb.DeleteWorkspaceRequest(workspace=w))),
    st.text(max_size=2000).map(lambda c: ("AuthenticateSandbox", "credential",
                                          pb.AuthenticateSandboxRequest(credential=c))),
    st.tuples(st.integers(0, 2**32 - 1), st.text(max_size=100)).map(lambda t: ("GetCapabilities", "gateway", (
        pb.GetCapabilitiesRequest(gateway=_peer(*t))))),
)


def _peer(major: int, name: str) -> Any:
    peer = gateway_metadata()
    peer.protocol_version.major = major
    peer.implementation_name = name
    del peer.required_capabilities[:]
    peer.required_capabilities.append(name or "x")
    return peer


def owned(client: podman.PodmanClient) -> dict[str, dict[str, str]]:
    """Everything podmand owns on the store, by kind: name -> the sandbox id it is labelled with."""
    def of(items: list[Any]) -> dict[str, str]:
        return {i.name: (i.attrs.get("Labels") or i.attrs.get("labels") or {}).get(SANDBOX_ID, "") for i in items}

    return {
        "containers": of(client.containers.list(all=True, filters=OWNED)),
        "volumes": of(client.volumes.list(filters=OWNED)),
        "networks": of(client.networks.list(filters=OWNED)),
    }


Owned = dict[str, dict[str, str]]


def leftovers(before: Owned, after: Owned, ids: set[str]) -> dict[str, list[str]]:
    """What appeared since ``before`` for a sandbox id among ``ids`` (those this test's requests
    named): other sessions' sandboxes on the shared store come and go meanwhile."""
    return {kind: sorted(n for n, i in after[kind].items() if n not in before[kind] and i in ids) for kind in after}


def state_files(state_dir: Path, ids: set[str]) -> list[str]:
    """The state directory's files of the sandbox ids among ``ids``: a podmand also keeps the
    fence evidence of other podmands' sandboxes it sees on a shared store (podmand.driver.observer)."""
    root = state_dir / "sandboxes"
    found = sorted(p.relative_to(root) for p in root.rglob("*")) if root.exists() else []
    return [str(p) for p in found if p.parts[0] in ids]


def test_malformed_requests_are_refused_cleanly(make_podmand: Callable[..., Podmand],
                                               podman_client: podman.PodmanClient) -> None:
    before = owned(podman_client)
    driver = make_podmand()
    stub = driver.stub
    codes: collections.Counter[str] = collections.Counter()
    by_rpc: collections.Counter[tuple[str, str]] = collections.Counter()
    bad: list[str] = []
    asked: set[str] = set()  # the sandbox ids of every request sent

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(requests)
    def one(call: tuple[str, str, Any]) -> None:
        method, kind, request = call
        if hasattr(request, "sandbox_id"):
            asked.add(request.sandbox_id)
        elif hasattr(request, "sandbox") and request.HasField("sandbox"):
            asked.add(request.sandbox.id)
        try:
            getattr(stub, method)(request, timeout=20)
            code = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            code = exc.code()
        codes[code.name] += 1
        by_rpc[(method, code.name)] += 1
        shown = f"{method} [{kind}] -> {code.name}: {str(request)[:300]!r}"
        if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
            bad.append(shown)
        elif code == grpc.StatusCode.OK and method not in ("GetSandbox", "DeleteSandbox"):
            bad.append(shown)
            if method == "CreateSandbox":
                stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=request.sandbox.id), timeout=60)

    one()
    total = sum(codes.values())
    print(f"\nfuzz: {total} malformed requests; status codes: {dict(codes.most_common())}")
    for (method, code), n in sorted(by_rpc.items()):
        print(f"  {method:22} {code:20} {n}")
    caps = stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()), timeout=10)
    assert caps.driver_name  # still serving
    left = leftovers(before, owned(podman_client), asked)
    print(f"  leftovers: {left}, state files: {state_files(driver.state_dir, asked)}")
    assert total >= 1000
    assert not bad, f"{len(bad)} malformed request(s) not refused cleanly:\n" + "\n".join(bad[:40])
    assert asked and left == {"containers": [], "volumes": [], "networks": []}
    assert state_files(driver.state_dir, asked) == []
    assert "Traceback" not in driver.logs()
