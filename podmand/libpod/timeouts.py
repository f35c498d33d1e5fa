"""Every deadline the libpod client sets, in one place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timeouts:
    """Seconds; each says why it is as long as it is.  Streams (events, pulls, logs,
    waits) have none: their callers decide when to give up."""

    connect: float = 5.0  # a live socket accepts at once; longer means a wedged service
    request: float = 30.0  # any call without a deadline of its own below
    ping: float = 2.0  # discovery probes several sockets: a silent one must not hold it up
    # A create in a new user namespace (userns=auto) can copy the image's layers with their owners
    # shifted: 31 s for the 160 MB test image under the VM lane's emulation, past `request`, and
    # a client that stops waiting leaves Podman carrying the create out behind its back.
    create: float = 180.0
    start: float = 120.0  # the OCI runtime, mounts, network setup and conmon: slow on a loaded host
    stop_grace: float = 30.0  # after the container's own stop timeout: SIGKILL, cleanup, the answer
    remove_grace: float = 60.0  # after the stop timeout: a forced removal also deletes the container's storage
    healthcheck: float = 60.0  # runs the container's own check command inside it
    past_events: float = 10.0  # reads Podman's event log file, which can be long
