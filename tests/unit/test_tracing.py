"""Traces (tracing.py, rpcspans.py): the endpoint's check, spans as a real OTLP/gRPC
receiver gets them from ``podmand serve`` in-process on the fake libpod, and a podmand
without an endpoint never importing the SDK."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from podmand import __version__, rpcspans, tracing
from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from podmand.config import Settings
from podmand.server import Server
from tests import otlp
from tests.fakes.libpod import FakeLibpod
from tests.unit.test_server_lifecycle import CAPABILITIES, DEADLINE, run_server, settings_for, until

REPO_ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:4317", "http://collector", "https://otel.example:443/",
                                      "http://[::1]:4317", "unix:///run/otel/otlp.sock"])
def test_an_otlp_grpc_endpoint_is_accepted(endpoint: str) -> None:
    assert tracing.endpoint_problem(endpoint) == ""


@pytest.mark.parametrize(("endpoint", "why"), [
    ("collector:4317", "must start with http://, https:// or unix://"),
    ("grpc://collector:4317", "must start with http://"),
    ("http://:4317", "names no host"),
    ("http://collector:99999", "not a URL"),
    ("http://collector:4317/v1/traces", "no path, query or credentials"),
    ("http://user:pw@collector:4317", "no path, query or credentials"),
    ("unix://relative.sock", "unix:///absolute/path"),
])
def test_a_bad_endpoint_is_refused_saying_why(endpoint: str, why: str) -> None:
    assert why in tracing.endpoint_problem(endpoint)


def test_the_resource_is_upstreams_and_a_blank_gateway_name_is_left_out() -> None:
    assert tracing.resource_attributes("1.2", "  ") == {"service.name": "openshell-driver-podman",
                                                        "service.version": "1.2"}
    assert tracing.resource_attributes("1.2", "prod-west")["openshell.gateway.name"] == "prod-west"


@pytest.mark.parametrize(("path", "name"), [
    ("/openshell.compute.v1.ComputeDriver/CreateSandbox", "driver.create_sandbox"),
    ("/openshell.compute.v1.ComputeDriver/GetGatewayListenerRequirements", "driver.unknown"),  # not in our proto
    ("/openshell.compute.v1.ComputeDriver/ValidateSandboxCreate", "driver.validate_sandbox_create"),
    ("/openshell.compute.v1.ComputeDriver/AttackerControlled12345", "driver.unknown"),
])
def test_rpc_span_names_are_upstreams_and_bounded(path: str, name: str) -> None:
    assert rpcspans.operation(path) == name


def test_rpc_spans_reach_the_collector_with_the_callers_trace(tmp: Path, fake: FakeLibpod, receiver: otlp.Receiver,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """serve in-process with an endpoint: each ComputeDriver RPC is a server span whose parent is
    the caller's traceparent, its libpod calls its children; health is not traced; close flushes."""
    settings = settings_for(tmp, fake)
    settings.otlp_endpoint, settings.gateway_name = receiver.endpoint, "prod-west"
    traces = rpcspans.start(settings)
    assert traces is not None
    srv = Server(settings)
    public = str(tmp / "run" / "d.sock")
    metadata = (("traceparent", TRACEPARENT),)

    async def scenario(running: asyncio.Task[int]) -> None:
        await until(lambda: srv.ready or running.done(), "podmand to serve")
        async with grpc.aio.insecure_channel(f"unix://{public}") as channel:
            stub = pb_grpc.ComputeDriverStub(channel)
            await stub.GetCapabilities(CAPABILITIES, metadata=metadata)
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="nope"),
                                      metadata=metadata)
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND
            await stub.ListSandboxes(pb.ListSandboxesRequest())  # no traceparent: a trace of its own
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            watch = stub.WatchSandboxes(pb.WatchSandboxesRequest(), metadata=metadata)
            await until(lambda: "rpc=WatchSandboxes" in caplog.text, "the watch to subscribe")
            srv.stop.on_signal(signal.SIGTERM)  # which ends the stream
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await watch.read()
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE

    try:
        with caplog.at_level("INFO", "podmand"):
            assert run_server(srv, scenario) == 0
    finally:
        traces.close()
    assert not tracing.enabled()
    names = {"driver.get_capabilities", "driver.get_sandbox", "driver.list_sandboxes", "driver.watch_sandboxes"}
    spans = receiver.wait_for(lambda s: {x.name for x in s} >= names, DEADLINE, "RPC spans")
    rpcs = {s.name: s for s in spans if s.name.startswith("driver.")}
    assert set(rpcs) == names  # no health
    assert rpcs["driver.watch_sandboxes"].attributes["rpc.grpc.status_code"] == grpc.StatusCode.UNAVAILABLE.value[0]
    for name in ("driver.get_capabilities", "driver.get_sandbox", "driver.watch_sandboxes"):
        assert (rpcs[name].trace_id, rpcs[name].parent_id) == (TRACE_ID, CALLER_SPAN)
    listed = rpcs["driver.list_sandboxes"]
    assert listed.trace_id != TRACE_ID and listed.parent_id == ""
    got = rpcs["driver.get_sandbox"]
    assert got.attributes == {"rpc.system": "grpc", "rpc.service": "openshell.compute.v1.ComputeDriver",
                              "rpc.method": "get_sandbox", "rpc.grpc.status_code": grpc.StatusCode.NOT_FOUND.value[0],
                              "error.type": "NOT_FOUND"}
    assert rpcs["driver.get_capabilities"].attributes["rpc.grpc.status_code"] == 0
    assert got.span.kind == otlp.trace_pb2.Span.SPAN_KIND_SERVER
    lookups = list(otlp.children(spans, got))
    assert lookups and all(s.span.kind == otlp.trace_pb2.Span.SPAN_KIND_CLIENT for s in lookups)
    for call in lookups:
        assert call.name == f"{call.attributes['http.request.method']} {call.attributes['url.template']}"
        assert "nope" not in call.name and "http.response.status_code" in call.attributes
    # The hub's own calls (its list, its event stream) have no parent, so no span.
    assert all(s.parent_id for s in spans if not s.name.startswith("driver."))
    assert {s.resource["service.name"] for s in spans} == {"openshell-driver-podman"}
    assert {s.resource["service.version"] for s in spans} == {__version__}
    assert {s.resource["openshell.gateway.name"] for s in spans} == {"prod-west"}


NO_ENDPOINT = r"""
import asyncio, json, signal, sys, tempfile
from pathlib import Path
import grpc
from podmand import server
from podmand._proto import compute_driver_pb2 as pb, compute_driver_pb2_grpc as pb_grpc
from tests.fakes.libpod import FakeLibpod
from tests.unit.test_server_lifecycle import CAPABILITIES, run_server, settings_for, until

tmp = Path(tempfile.mkdtemp(prefix="pdt-", dir="/tmp"))
fake = FakeLibpod().start_in_thread(str(tmp / "podman.sock"))
srv = server.Server(settings_for(tmp, fake))

async def scenario(running):
    await until(lambda: srv.ready or running.done(), "podmand to serve")
    async with grpc.aio.insecure_channel(f"unix://{tmp}/run/d.sock") as channel:
        stub = pb_grpc.ComputeDriverStub(channel)
        await stub.GetCapabilities(CAPABILITIES, metadata=(("traceparent", sys.argv[1]),))
        await stub.ListSandboxes(pb.ListSandboxesRequest())
    srv.stop.on_signal(signal.SIGTERM)

status = run_server(srv, scenario)
fake.stop_thread()
print(json.dumps([status, sorted(m for m in sys.modules if m.startswith("opentelemetry"))]))
"""


def test_serving_without_an_endpoint_never_imports_opentelemetry(tmp: Path) -> None:
    """In a fresh interpreter (this one has the SDK loaded): serve, answer RPCs that carry a
    traceparent, stop; not one opentelemetry module was imported, and nothing is installed."""
    assert rpcspans.start(Settings()) is None and rpcspans.interceptors() == ()
    out = subprocess.run([sys.executable, "-c", NO_ENDPOINT, TRACEPARENT], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    status, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert (status, loaded) == (0, [])


def test_a_gateway_name_with_a_control_character_is_refused() -> None:
    out = subprocess.run([sys.executable, "-m", "podmand", "serve", "--gateway-name", "prod\nwest"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and out.stderr.count("\n") == 1, out.stderr
    assert "invalid setting gateway_name (--gateway-name / OPENSHELL_GATEWAY_NAME)" in out.stderr


def test_a_bad_endpoint_is_one_start_up_line_naming_the_setting() -> None:
    out = subprocess.run([sys.executable, "-m", "podmand", "serve", "--otlp-endpoint", "collector:4317"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr
    assert "otlp_endpoint" in out.stderr and "--otlp-endpoint" in out.stderr and "OPENSHELL_OTLP_ENDPOINT" in out.stderr


def test_the_doctors_probe_exports_to_a_real_collector(receiver: otlp.Receiver) -> None:
    assert tracing.probe(receiver.endpoint) == ""
    assert receiver.exports == 1


def test_a_unix_socket_endpoint_reaches_its_collector(tmp: Path) -> None:
    unix = otlp.Receiver(unix=str(tmp / "otlp.sock"))
    try:
        assert tracing.probe(unix.endpoint) == "" and unix.exports == 1
    finally:
        unix.close()


def test_the_doctors_probe_says_why_nothing_answers(tmp: Path) -> None:
    assert tracing.probe(f"unix://{tmp}/none.sock").startswith("UNAVAILABLE")



def test_the_doctors_traces_line(receiver: otlp.Receiver) -> None:
    from podmand.cli.doctor import tracechecks

    assert tracechecks.check_traces("", "").status == "OK"
    found = asyncio.run(tracechecks.traces(receiver.endpoint, "prod-west"))
    assert found.status == "OK" and "openshell.gateway.name prod-west" in found.finding
    refused = tracechecks.check_traces("http://127.0.0.1:9", "UNAVAILABLE: failed to connect")
    assert refused.status == "WARN" and "--otlp-endpoint" in refused.fix
