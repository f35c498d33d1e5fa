"""Sandbox create→Ready and delete of the pair (a workload and a supervisor container per
sandbox, podmand/pair/) through a running podmand, next to podman-py making the pair's
containers and volumes with nothing else.

    # a podmand serving on --driver as the rootless user, test images of tests/images/build.sh, with
    #   OPENSHELL_SANDBOX_RUNTIME_IMAGE=localhost/podmand-test/runtime:1
    #   OPENSHELL_SUPERVISOR_IMAGE=localhost/podmand-test/supervisor2:1
    python3 bench/lifecycle.py --driver /path/driver.sock --podman /path/podman.sock [-n 10]

podmand: CreateSandbox (the sandbox image sandbox:1, with a real Ed25519-signed launch
bundle from tests/standin/launch.py, as the gateway sends one) until the watch stream says
Ready=True, then DeleteSandbox. Ready there means both containers run: a podmand with no
supervisor health check (OPENSHELL_HEALTH_CHECK_INTERVAL_SECS unset) does not wait for the
stand-ins' handshake. So the delete right after it can find the supervisor stand-in's
interpreter still starting, as PID 1 with no SIGTERM handler yet: the stop's SIGTERM is
then ignored and the supervisor killed after podmand's stop timeout (OPENSHELL_STOP_TIMEOUT).

Raw, what this compares with: the pair's skeleton only (bench/_pair.py: two volumes, the
workload and the supervisor, each a shell that exits on SIGTERM), its SpecGenerators posted
with podman-py's API client; created and started in the pair's order (workload first),
then stopped supervisor first and removed with the volumes. It makes none of the pair's
archive uploads, TLS authority, documents or handshake, so the ratio overstates what
podmand adds to the pair's own calls; bench/pair_lifecycle.py writes those out in full
(with podmand's own client) for issue 31's comparison.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import podman

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _pair
from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc

LABELS = {"io.podmand.bench": "lifecycle-raw"}  # not podmand's owner label


def ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1000:7.1f} ms  max {max(samples) * 1000:7.1f} ms"


def via_podmand(stub: pb_grpc.ComputeDriverStub, n: int) -> tuple[list[float], list[float]]:
    ready: dict[str, threading.Event] = {}
    stream = stub.WatchSandboxes(pb.WatchSandboxesRequest())

    def reader() -> None:
        try:
            for event in stream:
                if event.WhichOneof("payload") == "sandbox":
                    snap = event.sandbox.sandbox
                    if any(c.type == "Ready" and c.status == "True" for c in snap.status.conditions):
                        ready.setdefault(snap.id, threading.Event()).set()
        except grpc.RpcError:
            pass

    threading.Thread(target=reader, daemon=True).start()
    create, delete = [], []
    for _ in range(n):
        sid = f"bench-{uuid.uuid4().hex[:10]}"
        event = ready.setdefault(sid, threading.Event())
        box = _pair.sandbox(sid, _pair.COMMAND, "bench", "bench")
        start = time.perf_counter()
        stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        if not event.wait(60):
            raise SystemExit(f"{sid} never became ready")
        create.append(time.perf_counter() - start)
        start = time.perf_counter()
        stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=sid))
        delete.append(time.perf_counter() - start)
    stream.cancel()
    return create, delete


def raw_pair(client: podman.PodmanClient, sid: str, images: tuple[str, str]) -> list[Any]:
    """The pair's volumes and containers, created and started in its order: the volumes."""
    volumes = [client.volumes.create(name, labels=LABELS) for name in _pair.volumes(sid)]
    for spec in (_pair.workload(sid, images[0], LABELS), _pair.supervisor(sid, images[1], LABELS)):
        client.api.post("/containers/create", headers={"content-type": "application/json"},
                        data=json.dumps(spec)).raise_for_status()
    for name in _pair.containers(sid):
        client.api.post(f"/containers/{name}/start").raise_for_status()
    return volumes


def via_podman(client: podman.PodmanClient, n: int) -> tuple[list[float], list[float]]:
    create, delete = [], []
    images = (client.images.get(_pair.SANDBOX_IMAGE).id, client.images.get(_pair.SUPERVISOR_IMAGE).id)
    for _ in range(n):
        sid = f"bench-raw-{uuid.uuid4().hex[:10]}"
        start = time.perf_counter()
        volumes = raw_pair(client, sid, images)
        create.append(time.perf_counter() - start)
        start = time.perf_counter()
        for name in reversed(_pair.containers(sid)):  # supervisor first, as podmand stops the pair
            client.api.post(f"/containers/{name}/stop", params={"timeout": _pair.STOP_TIMEOUT}).raise_for_status()
            client.api.delete(f"/containers/{name}", params={"force": True}).raise_for_status()
        for volume in volumes:
            volume.remove(force=True)
        delete.append(time.perf_counter() - start)
    return create, delete


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--driver", required=True)
    parser.add_argument("--podman", required=True)
    parser.add_argument("-n", type=int, default=10)
    args = parser.parse_args()
    stub = pb_grpc.ComputeDriverStub(grpc.insecure_channel(f"unix://{args.driver}"))
    with podman.PodmanClient(base_url=f"unix://{args.podman}") as client:
        raw_create, raw_delete = via_podman(client, args.n)
    pd_create, pd_delete = via_podmand(stub, args.n)
    print(f"{args.n} sandboxes each (raw: the pair's volumes and containers only)")
    print(
        f"create→running  raw pair {ms(raw_create)} | podmand create→Ready {ms(pd_create)} | "
        f"x{statistics.median(pd_create) / statistics.median(raw_create):.2f}"
    )
    print(
        f"delete          raw pair {ms(raw_delete)} | podmand DeleteSandbox {ms(pd_delete)} | "
        f"x{statistics.median(pd_delete) / statistics.median(raw_delete):.2f}"
    )


if __name__ == "__main__":
    main()
