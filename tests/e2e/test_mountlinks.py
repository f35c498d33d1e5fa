"""Every mount's destination against the symbolic links in the image and in the mounts above it
(issue 30), through the pex against real rootless Podman: Podman follows a link when it places a
mount, but mounts in the order of the destinations as written, so a link lets a deep mount cover
podmand's own files. Before the fix each case here ran the image's (or the volume's) own
openshell-sandbox as PID 1, root, and reported Ready; under the split topology that path is the
workload's entrypoint, the runtime podmand binds there, and the pair's own destinations (the
channel at /.openshell/channel, the runtime's proxy-CA tmpfs) are guarded the same way. A
caller's mount target through a link in the image, a link on the way of podmand's own files, an
image VOLUME through a link and a caller's mount inside another volume are refused with nothing
made and no reader left. (The workspace's own path: test_workdir.py.) The hostile images are made
here (test_tenants.image_from). The caller's mounts are the workload's; the supervisor gets none.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import podman
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from tests.wait import wait_until

from .conftest import Podmand, Watch, containers_of, sandbox
from .test_conformance import logs
from .test_hardening_input import create, nothing_created, refused, running, validate
from .test_tenants import image_from
from .test_workdir import TROJAN, readers_of, refused_image

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
    caller's mount at /a/b/c/d/e: Podman would place it through the link over the runtime's
    bind (mounted before it: shallower as written), and the image's program would run as PID 1,
    root, in the runtime's place. Refused at create, FAILED_PRECONDITION naming the mount's target, the image and the
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
    Podman bound the runtime at /a/b/c/d/bin/openshell-sandbox, then mounted the workspace
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


@pytest.mark.parametrize("link", [names.CHANNEL_DIR.rsplit("/", 1)[0], names.SUPERVISOR_CA_DIR])
def test_a_link_on_the_way_of_the_pairs_own_files_fails_provisioning(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str], link: str
) -> None:
    """/.openshell (the channel volume's way) or /run/openshell-supervisor-ca (the runtime's
    proxy-CA tmpfs) a link to /tmp/os in the image, no WorkingDir, no mounts: the image is read
    while provisioning; the terminal ImageRefused, naming the image and the link, and no
    container of either role. (The single container's token path was the case here before.)"""
    script = f"rm -rf {link} && mkdir -p /tmp/os && ln -s /tmp/os {link}"
    with image_from(podman_client, [], script) as image:
        watch = Watch(driver.stub)
        box = sandbox(image=image)
        cleanup.append(box.id)
        create(driver, box)()
        message = refused_image(driver, podman_client, watch, box)
        assert f"{image}: {link!r} is a symbolic link in the image, on the way to OpenShell's" in message, message


def test_an_image_shipping_the_protocols_hierarchy_fails_provisioning(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """A directory /.openshell in the image (no link): the Sandbox Protocol's, never the
    image's; the terminal ImageRefused saying so, and no container of either role."""
    with image_from(podman_client, [], "mkdir -p /.openshell/channel/sandbox") as image:
        watch = Watch(driver.stub)
        box = sandbox(image=image)
        cleanup.append(box.id)
        create(driver, box)()
        message = watch.wait_reason(box.id, "ImageRefused").status.conditions[0].message
        assert f"image {image}: a workload image must not ship /.openshell" in message, message
        assert containers_of(podman_client, box.id) == [] == containers_of(podman_client, box.id, "supervisor")
        assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_an_image_volume_through_a_symbolic_link_fails_provisioning(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """VOLUME /a/b/c/d/e with /a/b/c/d/e -> /opt/openshell/bin and the image's openshell-sandbox
    there (default settings): Podman put the anonymous volume, a copy of the image's files, over
    the runtime. No WorkingDir, no mounts: found while provisioning, the terminal
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
    runtime. Refused before anything is made, naming the inner target and the outer mount."""
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
    accepted and running on the workload, whose entrypoint is podmand's runtime (it starts the
    main process); the supervisor has neither mount."""
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
        assert {"/a/b/c/d/e", names.RUNTIME_BIN} <= destinations
        wait_until(lambda: "openshell-sandbox: started the main process sleep" in logs(podman_client, box.id), 60,
                   "podmand's runtime to start the main process")
        (supervisor,) = containers_of(podman_client, box.id, "supervisor")
        assert not {"/a/b/c/d/e", "/new/dir"} & {m["Destination"] for m in supervisor.attrs["Mounts"]}
