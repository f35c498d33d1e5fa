"""The pair (podmand/pair/: a workload and a supervisor container per sandbox, joined by a
channel volume) as every bench makes it, both ways, so that each bench's podmand side and
raw side make the same topology.

- podmand's side: :func:`sandbox` is a CreateSandbox request of the sandbox image
  sandbox:1 carrying a real Ed25519-signed launch bundle for its id
  (tests/standin/launch.py), as a gateway sends one: podmand refuses a create without
  it (FAILED_PRECONDITION). :func:`start` is a StartSandbox with a fresh bundle (a new
  runtime generation), which a start from stopped needs just as much. The podmand these
  go to runs the runtime and supervisor stand-ins (bench/_scale_procs.py's settings).
- the raw side: the pair's skeleton only, as libpod SpecGenerators (:func:`workload`,
  :func:`supervisor`) and volume names (:func:`volumes`). A workspace and a channel
  volume; the workload (sandbox:1, ``userns=auto`` with podmand's 1024 ids, network
  ``none``, no capability, no_new_privileges, both volumes) and the supervisor
  (supervisor2:1, host network, host user namespace, no capability, no_new_privileges,
  the channel volume read-only, as the sandbox's uid:gid), each running a shell that
  exits on SIGTERM in place of the stand-ins. A bench makes them in the pair's order
  (volumes, workload, supervisor, start the workload, start the supervisor) and stops and
  removes them supervisor first, as podmand does. None of the pair's archive uploads, TLS authority, documents or
  handshake: a ratio against this skeleton overstates what podmand adds to the pair's own
  calls; bench/pair_lifecycle.py writes those out in full.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.sandbox.usernamespace import AUTO_USERNS_SIZE
from tests.standin.launch import Launch

SANDBOX_IMAGE = "localhost/podmand-test/sandbox:1"
RUNTIME_IMAGE = "localhost/podmand-test/runtime:1"
SUPERVISOR_IMAGE = "localhost/podmand-test/supervisor2:1"
IDENTITY = "1000:1000"  # sandbox:1's USER sandbox, which the supervisor runs as
COMMAND = ["/bin/sh", "-c", 'trap "exit 0" TERM; sleep 3600 & wait']  # a PID 1 that exits on SIGTERM
STOP_TIMEOUT = 5  # seconds: the raw pair's, and the benches' podmand's (OPENSHELL_STOP_TIMEOUT)


def bundle(sandbox_id: str) -> bytes:
    """A real Ed25519-signed launch bundle for ``sandbox_id`` (a new runtime generation each call)."""
    return Launch(sandbox_id=sandbox_id).bundle()


def sandbox(sandbox_id: str, command: list[str], workspace: str = "bench", name: str = "") -> pb.DriverSandbox:
    """A CreateSandbox request's sandbox: sandbox:1 running ``command``, with its bundle."""
    return pb.DriverSandbox(
        id=sandbox_id,
        name=name or sandbox_id[-12:],
        workspace=workspace,
        spec=pb.DriverSandboxSpec(command=command, template=pb.DriverSandboxTemplate(image=SANDBOX_IMAGE),
                                  launch_authentication=bundle(sandbox_id)),
    )


def start(sandbox_id: str) -> pb.StartSandboxRequest:
    """StartSandbox of a stopped sandbox, with a fresh bundle (its generation is the start's)."""
    return pb.StartSandboxRequest(sandbox_id=sandbox_id, launch_authentication=bundle(sandbox_id))


# ---------------------------------------------------------------- raw: the skeleton


def volumes(sid: str) -> tuple[str, str]:
    """The raw pair's workspace and channel volumes."""
    return f"{sid}-ws", names.channel_volume_name(sid)


def containers(sid: str) -> tuple[str, str]:
    """The raw pair's workload and supervisor container names."""
    return sid, names.supervisor_name(sid)


def _shell(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` running :data:`COMMAND` whatever its image's entrypoint, stopped as podmand stops its pair."""
    return {**spec, "entrypoint": COMMAND[:1], "command": COMMAND[1:], "stop_signal": 15,
            "stop_timeout": STOP_TIMEOUT, "cap_drop": ["ALL"], "no_new_privileges": True}


def workload(sid: str, image: str, labels: Mapping[str, str]) -> dict[str, Any]:
    workspace, channel = volumes(sid)
    return _shell({
        "name": containers(sid)[0],
        "image": image,
        "labels": dict(labels),
        "netns": {"nsmode": "none"},
        "userns": {"nsmode": "auto"},
        "idmappings": {"HostUIDMapping": False, "HostGIDMapping": False, "AutoUserNs": True,
                       "AutoUserNsOpts": {"Size": AUTO_USERNS_SIZE}},
        "volumes": [{"Name": workspace, "Dest": names.WORKSPACE_PATH, "Options": ["rw"]},
                    {"Name": channel, "Dest": names.CHANNEL_DIR, "Options": ["rw"]}],
    })


def supervisor(sid: str, image: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return _shell({
        "name": containers(sid)[1],
        "image": image,
        "labels": dict(labels),
        "user": IDENTITY,
        "netns": {"nsmode": "host"},
        "userns": {"nsmode": "host"},
        "volumes": [{"Name": volumes(sid)[1], "Dest": names.CHANNEL_DIR, "Options": ["ro"]}],
    })
