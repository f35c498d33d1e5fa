"""Health that means something: ``podmand serve`` against a fake libpod that goes
away and comes back. The health service says NOT_SERVING once Podman has been
unreachable for ``podman_down_grace`` seconds and SERVING when it is back, and
the log says so once each way.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.fakes.libpod import FakeLibpod
from tests.faults import test_faults as base
from tests.faults.test_faults import ROOT, Podmand, wait_until

launch = base.launch

SERVICE = "openshell.compute.v1.ComputeDriver"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def statuses(d: Podmand) -> set[int]:
    """What the health service says for the server ("") and for the driver service."""
    with grpc.insecure_channel(f"unix://{d.socket}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return {stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status for name in ("", SERVICE)}


def health_command(d: Podmand) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podmand", "health", "--socket", d.socket], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)


def count(d: Podmand, text: str) -> int:
    return sum(text in line for line in list(d.lines))


def test_health_follows_podman_with_a_grace_period(fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    d = launch(PODMAND_PODMAN_DOWN_GRACE="1").wait_ready()
    assert statuses(d) == {SERVING}
    path = fake.path
    fake.stop_thread()  # Podman gone: the event stream breaks, the socket is removed
    wait_until(lambda: "lost Podman's event stream" in d.log, "the loss to be logged")
    wait_until(lambda: statuses(d) == {NOT_SERVING}, "health to turn NOT_SERVING")
    answer = health_command(d)
    assert (answer.returncode, answer.stdout.strip()) == (1, f"{d.socket}: NOT_SERVING"), answer

    back = FakeLibpod().start_in_thread(path)
    try:
        wait_until(lambda: statuses(d) == {SERVING}, "health to turn SERVING again")
        assert health_command(d).returncode == 0
        assert back.count(r"GET .*/events") >= 1  # resubscribed to the new Podman
        wait_until(lambda: count(d, "Podman is reachable again after ") == 1, "the return to be logged")
        # Said once each way, however many resubscription attempts failed in between.
        warnings = [line for line in d.lines if "WARNING" in line]
        assert count(d, "lost Podman's event stream") == 1, warnings
        assert count(d, "Podman has been unreachable for 1 s (podman_down_grace): health is NOT_SERVING") == 1, \
            warnings
        assert d.proc.poll() is None
    finally:
        back.stop_thread()


def test_a_short_outage_keeps_health_serving(fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """An event stream that drops and is re-made at once (a Podman restart) is not an outage
    to report: health stays SERVING, and the return is still logged."""
    d = launch(PODMAND_PODMAN_DOWN_GRACE="60").wait_ready()
    fake.events.drop()
    wait_until(lambda: fake.count(r"GET .*/events") == 2, "the hub to resubscribe")
    wait_until(lambda: "Podman is reachable again after 0 s" in d.log, "the return to be logged")
    assert statuses(d) == {SERVING}
    assert "NOT_SERVING" not in d.log
