"""Traces end to end: the pex with ``--otlp-endpoint`` on real rootless Podman, checked from
the side of a real OTLP/gRPC receiver (tests/otlp.py) this test starts.

A create and a delete carry the caller's W3C ``traceparent``: their server spans continue
the caller's trace, provisioning hangs off the create, its steps (the pulls of the sandbox,
supervisor and runtime images, then the pair's creation) off provisioning and each libpod
call off its step; the resource names upstream's service and the gateway; and not one byte
the receiver got holds the launch bundle's tokens, the bundle itself or an environment
value.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

from podmand._proto import compute_driver_pb2 as pb
from tests import otlp

from .conftest import DEADLINE, RUNTIME_IMAGE, SANDBOX_IMAGE, SUPERVISOR_IMAGE, Podmand, sandbox

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
SECRET_ENV = "hunter2-e2e-trace-secret"
STEPS = ("podman.pull", "podman.create_pair")


def traced(make_podmand: Callable[..., Podmand], receiver: otlp.Receiver) -> Podmand:
    daemon = make_podmand({"OTEL_BSP_SCHEDULE_DELAY": "200"}, start=False)  # batches every 0.2 s, not 5
    return daemon.start(args=("serve", "--otlp-endpoint", receiver.endpoint, "--gateway-name", "e2e-gateway"))


def one(spans: list[otlp.Received], name: str, parent: otlp.Received | None = None) -> otlp.Received:
    found = [s for s in spans if s.name == name and (parent is None or s.parent_id == parent.span_id)]
    assert len(found) == 1, (name, [(s.name, s.parent_id) for s in spans])
    return found[0]


def test_a_sandboxs_spans_continue_the_callers_trace_down_to_each_libpod_call(
        make_podmand: Callable[..., Podmand], receiver: otlp.Receiver, cleanup: list[str]) -> None:
    daemon = traced(make_podmand, receiver)
    watch = daemon.watch()
    box = sandbox(environment={"API_KEY": SECRET_ENV})
    bundle = json.loads(box.spec.launch_authentication)["supervisor"]
    cleanup.append(box.id)
    metadata = (("traceparent", TRACEPARENT),)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box), metadata=metadata)
    watch.wait_reason(box.id, "ContainerRunning", timeout=60)
    daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id, name=box.name), metadata=metadata)
    wanted = {"driver.create_sandbox", "driver.delete_sandbox", "podman.provision", *STEPS}
    spans = receiver.wait_for(lambda s: {x.name for x in s} >= wanted, DEADLINE, "the sandbox's spans")
    watch.cancel()

    create = one(spans, "driver.create_sandbox")
    delete = one(spans, "driver.delete_sandbox")
    for rpc in (create, delete):
        assert (rpc.trace_id, rpc.parent_id) == (TRACE_ID, CALLER_SPAN)
        assert rpc.attributes["rpc.grpc.status_code"] == 0 and rpc.attributes["rpc.system"] == "grpc"
    provision = one(spans, "podman.provision", create)
    assert provision.attributes["sandbox.id"] == box.id and provision.span.status.code != 2  # not ERROR
    pulls = [s for s in otlp.children(spans, provision) if s.name == "podman.pull"]
    assert sorted(p.attributes["container.image.name"] for p in pulls) == sorted(
        (SANDBOX_IMAGE, SUPERVISOR_IMAGE, RUNTIME_IMAGE))
    pair = one(spans, "podman.create_pair", provision)
    assert max(p.span.end_time_unix_nano for p in pulls) <= pair.span.start_time_unix_nano  # the pulls, then the pair
    for pull in pulls:
        assert any(s.name == "POST /libpod/images/pull" for s in otlp.children(spans, pull))
    # the pair's libpod calls: both containers made, then both started (supervisor last)
    calls = sorted(otlp.children(spans, pair), key=lambda s: s.span.start_time_unix_nano)
    made = [s for s in calls if s.name == "POST /libpod/containers/create"]
    started = [s for s in calls if s.name == "POST /libpod/containers/{name}/start"]
    assert len(made) == 2 and len(started) == 2, [s.name for s in calls]
    assert all(s.attributes["http.response.status_code"] == 201 for s in made)
    assert all(s.attributes["url.template"] == "/libpod/containers/create" for s in made)
    assert all(s.attributes["http.response.status_code"] in (204, 304) for s in started)
    assert max(s.span.start_time_unix_nano for s in made) < min(s.span.start_time_unix_nano for s in started)
    assert any(s.name == "PUT /libpod/containers/{name}/archive" for s in calls)  # the channel, workspace, auth files
    assert any(s.name.startswith("DELETE /libpod/containers/{name}") for s in otlp.children(spans, delete))

    # Every span of the caller's trace leads back to the caller's span.
    by_id = {s.span_id: s for s in spans if s.trace_id == TRACE_ID}
    for s in by_id.values():
        hops = 0
        while s.parent_id in by_id:
            s, hops = by_id[s.parent_id], hops + 1
            assert hops < 20
        assert s.parent_id == CALLER_SPAN, s.name
    assert {s.resource["service.name"] for s in spans} == {"openshell-driver-podman"}
    assert {s.resource["openshell.gateway.name"] for s in spans} == {"e2e-gateway"}

    daemon.stop()
    raw = receiver.raw
    for secret in (bundle["gateway_token"], bundle["sandbox_token"], box.spec.launch_authentication, SECRET_ENV):
        assert (secret.encode() if isinstance(secret, str) else secret) not in raw
    for token in (bundle["gateway_token"], bundle["sandbox_token"]):
        assert token.split(".")[-1].encode() not in raw  # not even the signature


def test_doctor_exports_to_the_collector(make_podmand: Callable[..., Podmand], receiver: otlp.Receiver) -> None:
    daemon = make_podmand(start=False)
    proc = subprocess.run(daemon.command("doctor", "--json", "--otlp-endpoint", receiver.endpoint,
                                         "--gateway-name", "e2e-gateway"), capture_output=True, text=True, timeout=120)
    checks = {c["name"]: c for c in json.loads(proc.stdout)}
    assert checks["traces"]["status"] == "OK", checks["traces"]
    assert "openshell.gateway.name e2e-gateway" in checks["traces"]["finding"]
    assert receiver.exports == 1
    receiver.close()  # nothing answers there now
    proc = subprocess.run(daemon.command("doctor", "--json", "--otlp-endpoint", receiver.endpoint),
                          capture_output=True, text=True, timeout=120)
    finding = {c["name"]: c for c in json.loads(proc.stdout)}["traces"]
    assert finding["status"] == "WARN" and "UNAVAILABLE" in finding["finding"], finding


def test_a_bad_endpoint_is_one_start_up_line(make_podmand: Callable[..., Podmand]) -> None:
    daemon = make_podmand(start=False)
    proc = subprocess.run(daemon.command("serve", "--otlp-endpoint", "collector:4317"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("podmand: invalid setting otlp_endpoint"), lines
    assert "--otlp-endpoint" in lines[0] and "OPENSHELL_OTLP_ENDPOINT" in lines[0]
