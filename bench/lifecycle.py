"""Sandbox create→Ready and delete of the pair (a workload and a supervisor container per
sandbox, podmand/pair/) through a running podmand, next to podman-py making the pair's
containers and volumes with nothing else.

    # a podmand serving on --driver as the rootless user, test images of tests/images/build.sh, with
    #   OPENSHELL_SANDBOX_RUNTIME_IMAGE=localhost/podmand-test/runtime:1
    #   OPENSHELL_SUPERVISOR_IMAGE=localhost/podmand-test/supervisor2:1
    python3 bench/lifecycle.py --driver /path/driver.sock --podman /path/podman.sock [-n 10]

podmand: CreateSandbox (the sandbox image sandbox:1, with a real Ed25519-signed launch
bundle from tests/standin/launch.py, as the gateway sends one) until the watch stream says
Ready=True, then DeleteSandbox. Ready there means the runtime stand-in and the supervisor
stand-in have completed their TLS handshake and the main process runs.

Raw, what this compares with: the pair's skeleton only, with podman-py. A workspace and a
channel volume; the workload (sandbox:1, ``userns=auto``, network ``none``, no capability,
both volumes, no_new_privileges) and the supervisor (supervisor2:1, host network, host user namespace, no
capability, the channel volume read-only, as uid:gid 1000), each running a shell that exits
on SIGTERM in place of the stand-ins; created and started in the pair's order (workload
first), then stopped supervisor first and removed with the volumes. It makes none of the
pair's archive uploads, TLS authority, documents or handshake, so the ratio overstates
what podmand adds to the pair's own calls; bench/pair_lifecycle.py writes those out in
full (with podmand's own client) for issue 31's comparison.
"""

from __future__ import annotations

import argparse
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

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from tests.standin.launch import Launch

IMAGE = "localhost/podmand-test/sandbox:1"
SUPERVISOR_IMAGE = "localhost/podmand-test/supervisor2:1"
IDENTITY = "1000:1000"  # sandbox:1's USER sandbox
COMMAND = ["/bin/sh", "-c", 'trap "exit 0" TERM; sleep 600 & wait']  # a PID 1 that exits on SIGTERM


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
            spec=pb.DriverSandboxSpec(command=COMMAND, template=pb.DriverSandboxTemplate(image=IMAGE),
                                      launch_authentication=Launch(sandbox_id=sid).bundle()),
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


def raw_pair(client: podman.PodmanClient, sid: str) -> tuple[list[Any], list[Any]]:
    """The pair's volumes and containers, created and started in its order: (containers, volumes)."""
    workspace, channel = f"{sid}-ws", names.channel_volume_name(sid)
    volumes = [client.volumes.create(workspace), client.volumes.create(channel)]
    workload = client.containers.create(
        IMAGE, COMMAND, name=sid, userns_mode="auto",
        idmappings={"HostUIDMapping": False, "HostGIDMapping": False, "AutoUserNs": True},
        network_mode="none", cap_drop=["ALL"], no_new_privileges=True,
        volumes={workspace: {"bind": "/sandbox", "mode": "rw"}, channel: {"bind": names.CHANNEL_DIR, "mode": "rw"}},
    )
    supervisor = client.containers.create(
        SUPERVISOR_IMAGE, COMMAND[1:], entrypoint=[COMMAND[0]], name=names.supervisor_name(sid),
        user=IDENTITY, userns_mode="host", network_mode="host", cap_drop=["ALL"],
        no_new_privileges=True, volumes={channel: {"bind": names.CHANNEL_DIR, "mode": "ro"}},
    )
    workload.start()
    supervisor.start()
    return [supervisor, workload], volumes


def via_podman(client: podman.PodmanClient, n: int) -> tuple[list[float], list[float]]:
    create, delete = [], []
    for _ in range(n):
        sid = f"bench-raw-{uuid.uuid4().hex[:10]}"
        start = time.perf_counter()
        containers, volumes = raw_pair(client, sid)
        create.append(time.perf_counter() - start)
        start = time.perf_counter()
        for container in containers:  # supervisor first, as podmand stops the pair
            container.stop()
            container.remove(force=True)
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
