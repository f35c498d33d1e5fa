"""Sandbox create→Ready and delete through podmand, next to raw Podman doing the same work.

    python3 bench/lifecycle.py --driver /path/driver.sock --podman /path/podman.sock [-n 10]

podmand: CreateSandbox until the watch stream says Ready=True, then DeleteSandbox.
Raw: the same image and command created and started with podman-py (userns=auto),
then force-removed.  The ratio is podmand's overhead on top of Podman's own work
(podmand also extracts nothing after the first run, and makes a volume and network).
Use the test images of tests/images/build.sh and a podmand serving on --driver.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import grpc
import podman

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc

IMAGE = "localhost/podmand-test/sandbox:1"


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
        box = pb.DriverSandbox(
            id=sid,
            name="bench",
            workspace="bench",
            spec=pb.DriverSandboxSpec(command=["sleep", "600"], template=pb.DriverSandboxTemplate(image=IMAGE)),
        )
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


def via_podman(client: podman.PodmanClient, n: int) -> tuple[list[float], list[float]]:
    create, delete = [], []
    idmap = {"HostUIDMapping": False, "HostGIDMapping": False, "AutoUserNs": True}
    for _ in range(n):
        start = time.perf_counter()
        container = client.containers.create(IMAGE, ["sleep", "600"], idmappings=idmap, userns_mode="auto")
        container.start()
        create.append(time.perf_counter() - start)
        start = time.perf_counter()
        container.stop(timeout=0)  # `sleep` as PID 1 ignores SIGTERM; podmand's supervisor does not
        container.remove(force=True)
        delete.append(time.perf_counter() - start)
    return create, delete


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--driver", required=True)
    parser.add_argument("--podman", required=True)
    parser.add_argument("-n", type=int, default=10)
    args = parser.parse_args()
    stub = pb_grpc.ComputeDriverStub(grpc.insecure_channel(f"unix://{args.driver}"))
    with podman.PodmanClient(base_url=f"unix://{args.podman}") as client:
        raw_create, raw_delete = via_podman(client, args.n)
    pd_create, pd_delete = via_podmand(stub, args.n)
    print(f"{args.n} sandboxes each")
    print(
        f"create→running  raw Podman {ms(raw_create)} | podmand create→Ready {ms(pd_create)} | "
        f"x{statistics.median(pd_create) / statistics.median(raw_create):.2f}"
    )
    print(
        f"delete          raw Podman {ms(raw_delete)} | podmand DeleteSandbox {ms(pd_delete)} | "
        f"x{statistics.median(pd_delete) / statistics.median(raw_delete):.2f}"
    )


if __name__ == "__main__":
    main()
