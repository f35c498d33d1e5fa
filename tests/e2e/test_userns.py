"""A sandbox's own user namespace, driver_config.userns_mode (upstream PR #2141), through the pex
against real rootless Podman: the mapping Podman made (podman-py's inspect, IDMappings, in the
intermediate namespace's ids) and the one the sandbox sees (/proc/1/uid_map from inside); the
refusals, with nothing left behind; and the workload identity checked against the chosen mode.

keep-id and nomap take every subordinate id while they exist, so no userns=auto container may
be made beside them (usernamespace.py): the keep-id podmand's sandboxes are removed by
``cleanup`` before another test makes an auto one.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import podman
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb

from .conftest import USER, Podmand, containers_of, run_in, sandbox, volumes_of
from .test_hardening_input import create, nothing_created, refused, running

OPEN = {"PODMAND_ALLOW_DRIVER_CONFIG": "true", "PODMAND_ALLOW_USERNS": "true"}
WHERE = "sandbox.spec.template.driver_config.userns_mode: "


def asking(mode: str, **kwargs: Any) -> pb.DriverSandbox:
    box = sandbox(**kwargs)
    box.spec.template.driver_config.update({"userns_mode": mode})
    return box


def maps(client: podman.PodmanClient, sandbox_id: str) -> tuple[list[str], list[tuple[int, int, int]]]:
    """(Podman's UidMap, "container:host:size"; the sandbox's own /proc/1/uid_map)."""
    (container,) = containers_of(client, sandbox_id)
    code, out, _ = run_in(container, ["/bin/cat", "/proc/1/uid_map"])
    assert code == 0
    inside = [(int(a), int(b), int(c)) for a, b, c in (line.split() for line in out.splitlines())]
    podman_map = container.attrs["HostConfig"]["IDMappings"]["UidMap"]
    # the same, seen from inside (the kernel splits a range where the rootless user's own map does)
    assert merged(inside) == merged([(int(c), int(h), int(s)) for c, h, s in (m.split(":") for m in podman_map)])
    return podman_map, inside


def merged(ranges: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for c, h, s in sorted(ranges):
        if out and out[-1][0] + out[-1][2] == c and out[-1][1] + out[-1][2] == h:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + s)
        else:
            out.append((c, h, s))
    return out


def test_auto_size_beside_the_operators_auto(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """auto:size=N gets N ids; the workload identity is checked against those: USER 2345 fits in 4096
    ids though not in the operator's 1024. keep-id and nomap are refused beside userns=auto."""
    daemon = make_podmand({**OPEN, "PODMAND_USERNS_MAX_SIZE": "4096"})
    box = asking("auto:size=4096", image="localhost/podmand-test/sandbox-uid:1")
    cleanup.append(box.id)
    create(daemon, box)()
    running(daemon, box.id)
    podman_map, inside = maps(podman_client, box.id)
    assert [int(m.split(":")[2]) for m in podman_map] == [4096]
    assert [(c, size) for c, _h, size in inside] == [(0, 4096)]
    small = asking("auto:size=2000", image="localhost/podmand-test/sandbox-uid:1")
    refused(create(daemon, small), grpc.StatusCode.FAILED_PRECONDITION,
            "uid 2345 cannot exist in the sandbox's user namespace, which maps ids 0-1999")
    nothing_created(daemon, podman_client, small.id)
    for mode in ("keep-id", "nomap"):
        other = asking(mode)
        refused(create(daemon, other), grpc.StatusCode.FAILED_PRECONDITION,
                WHERE + f"{mode} cannot run beside this podmand's userns=auto")
        nothing_created(daemon, podman_client, other.id)


def test_keep_id_and_nomap(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """Beside the operator's keep-id: keep-id:uid=1000,gid=1000 puts the podmand user at the
    workload's uid 1000; nomap leaves the podmand user out; auto is refused."""
    daemon = make_podmand({**OPEN, "OPENSHELL_PODMAN_USERNS": "keep-id", "PODMAND_ALLOW_USERNS_OWN_UID": "true"})
    keep, nomap = asking("keep-id:uid=1000,gid=1000"), asking("nomap")
    for box in (keep, nomap):
        cleanup.append(box.id)
        create(daemon, box)()
    for box in (keep, nomap):
        running(daemon, box.id)
    podman_map, _ = maps(podman_client, keep.id)
    assert "1000:0:1" in podman_map  # container uid 1000 is the rootless user itself
    (container,) = containers_of(podman_client, keep.id)
    code, out, _ = run_in(container, ["/bin/sh", "-c", "touch /sandbox/mine && stat -c %u /sandbox/mine"], user="1000")
    assert (code, out.strip()) == (0, "1000")
    [volume] = [v for v in volumes_of(podman_client, keep.id) if v.name == names.volume_name(keep.id)]
    owner = os.stat(Path(volume.attrs["Mountpoint"]) / "mine").st_uid
    assert owner == pwd.getpwnam(USER).pw_uid  # on the host: the user podmand runs as
    podman_map, inside = maps(podman_client, nomap.id)
    assert inside[0][:2] == (0, 1) and all(host != 0 for _c, host, _s in inside)  # the user is mapped nowhere
    other = asking("auto")
    refused(create(daemon, other), grpc.StatusCode.FAILED_PRECONDITION,
            WHERE + "auto cannot run beside this podmand's userns=keep-id")
    nothing_created(daemon, podman_client, other.id)


@pytest.mark.parametrize(
    ("env", "mode", "code", "needle"),
    [
        ({"PODMAND_ALLOW_DRIVER_CONFIG": "true"}, "keep-id", grpc.StatusCode.FAILED_PRECONDITION,
         WHERE + "a sandbox's own user namespace mode is disabled; an operator must enable allow_userns "
         "(--allow-userns / PODMAND_ALLOW_USERNS)"),
        ({"PODMAND_ALLOW_USERNS": "true"}, "auto", grpc.StatusCode.FAILED_PRECONDITION,
         "caller driver config is disabled"),
        (OPEN, "host", grpc.StatusCode.INVALID_ARGUMENT,
         WHERE + "'host' is never allowed: it would run the sandbox in the host's user namespace"),
        ({**OPEN, "PODMAND_ALLOW_HOST_USERNS": "true", "PODMAND_ALLOW_USERNS_OWN_UID": "true"},
         "ns:/proc/1/ns/user", grpc.StatusCode.INVALID_ARGUMENT,
         WHERE + "'ns' is never allowed: it would run the sandbox in another process's user namespace"),
    ],
    ids=["without-allow-userns", "without-allow-driver-config", "host", "ns"],
)
def test_refused(make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
                 env: dict[str, str], mode: str, code: grpc.StatusCode, needle: str) -> None:
    daemon = make_podmand(env)
    box = asking(mode)
    refused(create(daemon, box), code, needle)
    nothing_created(daemon, podman_client, box.id)


def test_doctor_says_what_may_be_asked(make_podmand: Callable[..., Podmand]) -> None:
    """`podmand doctor` (the pex, serve's settings): allow_userns without allow_driver_config is a
    WARN; with both, which modes run beside userns=auto on this rootless Podman."""
    for env, status, finding in (
        ({"PODMAND_ALLOW_USERNS": "true"}, "WARN", "allow_userns is on but allow_driver_config is off"),
        (OPEN, "OK", "on: a sandbox may ask for auto; keep-id cannot run beside this podmand's userns=auto"),
    ):
        daemon = make_podmand(env, start=False)
        proc = subprocess.run(daemon.command("doctor", "--json"), capture_output=True, text=True, timeout=120)
        check = {c["name"]: c for c in json.loads(proc.stdout)}["userns requests"]
        assert check["status"] == status and check["finding"].startswith(finding), check
