"""A sandbox image's VOLUMEs through the pex against real rootless Podman (issue 30): Podman gives
the workload container an anonymous volume for each (the supervisor, from its own image, gets
none of them), and podmand removes them with the container
(libpod's ``volumes=true``; named volumes, the workspace's and the caller's, are never removed
that way). The image is made here (test_tenants.image_from).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable

import podman
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb

from .conftest import Podmand, containers_of, sandbox, volumes_of
from .test_hardening_input import create, running
from .test_tenants import image_from


@pytest.fixture
def open_driver(make_podmand: Callable[..., Podmand]) -> Podmand:
    return make_podmand({"PODMAND_ALLOW_DRIVER_CONFIG": "true", "PODMAND_RESOURCE_ADMISSION": "false"})


def test_deleting_a_sandbox_removes_its_images_anonymous_volumes_and_no_named_one(
    open_driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """An image with VOLUME /data and VOLUME /cache, and a caller's named volume at /shared:
    after DeleteSandbox the two anonymous volumes are gone (the old code left them in Podman for
    good: nothing names them again), the caller's volume is still there, the workspace volume
    gone as before."""
    shared = podman_client.volumes.create(f"keep-{uuid.uuid4().hex[:10]}")
    anonymous: list[str] = []
    try:
        with image_from(podman_client, ["VOLUME=/data", "VOLUME=/cache"], "mkdir -p /data /cache") as image:
            box = sandbox(image=image)
            box.spec.template.driver_config.update(
                {"mounts": [{"type": "volume", "source": shared.name, "target": "/shared", "read_only": False}]})
            cleanup.append(box.id)
            create(open_driver, box)()
            running(open_driver, box.id)
            (container,) = containers_of(podman_client, box.id)
            by_destination = {m["Destination"]: m for m in container.attrs["Mounts"] if m["Type"] == "volume"}
            anonymous = [by_destination["/data"]["Name"], by_destination["/cache"]["Name"]]
            assert by_destination["/shared"]["Name"] == shared.name
            assert by_destination["/sandbox"]["Name"] == names.volume_name(box.id)
            assert all(podman_client.volumes.exists(name) for name in anonymous)
            (supervisor,) = containers_of(podman_client, box.id, "supervisor")
            held = {m.get("Name") for m in supervisor.attrs["Mounts"]}
            assert not held & {*anonymous, shared.name, names.volume_name(box.id)}, held
            assert open_driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
            assert containers_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []
            assert [name for name in anonymous if podman_client.volumes.exists(name)] == []
            assert podman_client.volumes.exists(shared.name)
    finally:
        for name in [*anonymous, shared.name]:
            with contextlib.suppress(podman.errors.NotFound, podman.errors.APIError):
                podman_client.volumes.get(name).remove(force=True)
