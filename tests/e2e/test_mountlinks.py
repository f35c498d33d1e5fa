"""Every mount's destination against the symbolic links in the image and in the mounts above it
(issue 30), through the pex against real rootless Podman: Podman follows a link when it places a
mount, but mounts in the order of the destinations as written, so a link lets a deep mount cover
podmand's supervisor. Before the fix each case here ran the image's (or the volume's) own
openshell-sandbox as PID 1, root, and reported Ready. A caller's mount target through a link in
the image, a link on the way of podmand's own files, an image VOLUME through a link and a caller's
mount inside another volume are refused with nothing made and no reader left. (The workspace's own
path: test_workdir.py.) The hostile images are made here (test_tenants.image_from).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb

from .conftest import Podmand, Watch, containers_of, sandbox
from .test_hardening_input import create, nothing_created, refused, running, validate
from .test_tenants import image_from
from .test_workdir import TROJAN, readers_of

OPEN = {"PODMAND_ALLOW_DRIVER_CONFIG": "true", "PODMAND_RESOURCE_ADMISSION": "false"}
# The image's own "supervisor" at /a/b/c/d/bin, and /opt/openshell -> /a/b/c/d.
OWN_LINK = ("mkdir -p /a/b/c/d/bin && printf '#!/bin/sh\\necho TROJAN uid=$(id -u)\\nexec sleep 600\\n' > "
            "/a/b/c/d/bin/openshell-sandbox && chmod 0755 /a/b/c/d/bin/openshell-sandbox && chown -R 1000:1000 /a && "
            "rm -rf /opt/openshell && mkdir -p /opt && ln -s /a/b/c/d /opt/openshell")


@pytest.fixture
def open_driver(make_podmand: Callable[..., Podmand]) -> Podmand:
    return make_podmand(OPEN)


@pytest.fixture
def volume(podman_client: podman.PodmanClient) -> Iterator[Any]:
    vol = podman_client.volumes.create(f"links-{uuid.uuid4().hex[:10]}")
    yield vol
    with contextlib.suppress(podman.errors.NotFound):
        vol.remove(force=True)


@pytest.mark.parametrize("kind", ["volume", "tmpfs"])
def test_a_caller_mount_through_a_symbolic_link_is_refused(
    open_driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str], volume: Any, kind: str
) -> None:
    """An image with /a/b/c/d/e -> /opt/openshell/bin and its own openshell-sandbox there, and a
    caller's mount at /a/b/c/d/e: Podman would place it through the link over the supervisor's
    bind (mounted before it: shallower as written), and the image's program would run as PID 1,
    root. Refused at create, FAILED_PRECONDITION naming the mount's target, the image and the
    link; nothing made, no reader left; ValidateSandboxCreate refuses it too once read."""
    script = f"{TROJAN} && ln -s /opt/openshell/bin /a/b/c/d/e"
    with image_from(podman_client, [], script) as image:
        mount = ({"type": "volume", "source": volume.name, "target": "/a/b/c/d/e", "read_only": False}
                 if kind == "volume" else {"type": "tmpfs", "target": "/a/b/c/d/e", "options": ["rw", "tmpcopyup"]})
        box = sandbox(image=image)
        box.spec.template.driver_config.update({"mounts": [{"type": "tmpfs", "target": "/scratch"}, mount]})
        cleanup.append(box.id)  # only if it were made
        needles = ("sandbox.spec.template.driver_config.mounts[1].target: '/a/b/c/d/e' passes through '/a/b/c/d/e', "
                   f"a symbolic link in image {image}",)
        refused(create(open_driver, box), grpc.StatusCode.FAILED_PRECONDITION, *needles)
        nothing_created(open_driver, podman_client, box.id)
        assert readers_of(podman_client, open_driver) == []
        refused(validate(open_driver, box), grpc.StatusCode.FAILED_PRECONDITION, *needles)


def test_a_link_on_the_way_of_podmands_own_files_is_refused(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """/opt/openshell -> /a/b/c/d and WORKDIR /a/b/c/d/bin (no link on the workspace's own path):
    Podman bound the supervisor at /a/b/c/d/bin/openshell-sandbox, then mounted the workspace
    volume (a copy of the image's /a/b/c/d/bin, the workload's to write) over that directory, and
    the entrypoint, through the same link, was the image's program. Refused at create naming the
    image and the link (default settings); nothing made."""
    with image_from(podman_client, ["WORKDIR=/a/b/c/d/bin"], OWN_LINK) as image:
        box = sandbox(image=image)
        cleanup.append(box.id)
        refused(create(driver, box), grpc.StatusCode.FAILED_PRECONDITION,
                f"sandbox.spec.template.image: {image}: '/opt/openshell' is a symbolic link in the image, on the way "
                "to OpenShell's '/opt/openshell/bin/openshell-sandbox'")
        nothing_created(driver, podman_client, box.id)
        assert readers_of(podman_client, driver) == []


def test_a_link_on_the_way_of_the_token_fails_provisioning(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """/etc/openshell -> /tmp/os, no WorkingDir, no mounts: the image is read while
    provisioning; the terminal ImageRefused, naming the image and the link, and no container."""
    script = "rm -rf /etc/openshell && mkdir -p /tmp/os && ln -s /tmp/os /etc/openshell"
    with image_from(podman_client, [], script) as image:
        watch = Watch(driver.stub)
        box = sandbox(image=image, token=True)
        cleanup.append(box.id)
        create(driver, box)()
        snap = watch.wait_reason(box.id, "ImageRefused")
        message = snap.status.conditions[0].message
        assert f"{image}: '/etc/openshell' is a symbolic link in the image, on the way to OpenShell's" in message, \
            message
        assert containers_of(podman_client, box.id) == [] and readers_of(podman_client, driver) == []
        assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_an_image_volume_through_a_symbolic_link_fails_provisioning(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """VOLUME /a/b/c/d/e with /a/b/c/d/e -> /opt/openshell/bin and the image's openshell-sandbox
    there (default settings): Podman put the anonymous volume, a copy of the image's files, over
    the supervisor. No WorkingDir, no mounts: found while provisioning, the terminal
    ImageRefused naming the image, the volume and the link; no container."""
    script = f"{TROJAN} && ln -s /opt/openshell/bin /a/b/c/d/e"
    with image_from(podman_client, ["VOLUME=/a/b/c/d/e"], script) as image:
        watch = Watch(driver.stub)
        box = sandbox(image=image)
        cleanup.append(box.id)
        create(driver, box)()
        message = watch.wait_reason(box.id, "ImageRefused").status.conditions[0].message
        assert (f"{image}: '/a/b/c/d/e' is a symbolic link in the image, on the way to its VOLUME '/a/b/c/d/e'"
                in message), message
        assert containers_of(podman_client, box.id) == [] and readers_of(podman_client, driver) == []
        assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_a_caller_mount_inside_another_volume_is_refused(
    open_driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str], volume: Any
) -> None:
    """A volume at /x holding a/b/c/d -> /opt/openshell/bin (links podmand cannot look at), and
    a second mount at /x/a/b/c/d: Podman placed the second one through the volume's link over the
    supervisor. Refused before anything is made, naming the inner target and the outer mount."""
    box = sandbox()
    box.spec.template.driver_config.update({"mounts": [
        {"type": "volume", "source": volume.name, "target": "/x"},
        {"type": "tmpfs", "target": "/x/a/b/c/d"},
    ]})
    cleanup.append(box.id)
    needle = ("sandbox.spec.template.driver_config.mounts[1].target: '/x/a/b/c/d' is inside mounts[0] (volume at "
              "'/x'), whose files are not the image's")
    for call in (validate, create):
        refused(call(open_driver, box), grpc.StatusCode.INVALID_ARGUMENT, needle)
    nothing_created(open_driver, podman_client, box.id)


def test_mounts_on_the_images_own_directories_still_run(
    open_driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str], volume: Any
) -> None:
    """The same caller mounts where the image has directories (and where it has nothing):
    accepted and running, the supervisor podmand's."""
    with image_from(podman_client, [], "mkdir -p /a/b/c/d/e") as image:
        box = sandbox(image=image)
        box.spec.template.driver_config.update({"mounts": [
            {"type": "volume", "source": volume.name, "target": "/a/b/c/d/e", "read_only": False},
            {"type": "tmpfs", "target": "/new/dir"},
        ]})
        cleanup.append(box.id)
        create(open_driver, box)()
        running(open_driver, box.id)
        (container,) = containers_of(podman_client, box.id)
        destinations = {m["Destination"] for m in container.attrs["Mounts"]}
        assert {"/a/b/c/d/e", "/opt/openshell/bin/openshell-sandbox"} <= destinations
