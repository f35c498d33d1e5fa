"""The image's working directory as the sandbox's workspace (upstream PR #2715), through the pex
against real rootless Podman: where the workspace volume is mounted (podman-py's inspect), and
the main process's cwd and HOME (from inside the container); a refused WorkingDir leaves nothing
behind. The images come from tests/images/build.sh (sandbox-workdir*).
"""

from __future__ import annotations

import grpc
import podman
import pytest

from podmand import names
from tests.wait import wait_until

from .conftest import SANDBOX_IMAGE, Podmand, containers_of, run_in, sandbox
from .test_hardening_input import create, nothing_created, refused, running

WORKDIR = "localhost/podmand-test/sandbox-workdir"
# The main process (the image's USER, 1000) says where it runs and shows it can write there.
PROBE = ["/bin/sh", "-c", 'pwd > /tmp/probe.cwd; echo "$HOME" > /tmp/probe.home; touch written; exec sleep 600']


def probe(container: podman.domain.containers.Container) -> tuple[str, str]:
    def read() -> tuple[str, str] | None:
        code, out, _ = run_in(container, ["cat", "/tmp/probe.cwd", "/tmp/probe.home"])
        return tuple(out.split()) if code == 0 and len(out.split()) == 2 else None  # type: ignore[return-value]

    return wait_until(read, 30, "the main process's probe")  # type: ignore[no-any-return]


def test_workspace_follows_the_image_working_dir(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """WorkingDir /workspace/project gets the volume there, with the image's files copied up;
    empty, / and /sandbox keep /sandbox. The supervisor starts at / with --workdir the path, and
    the main process runs there with HOME the same."""
    cases = {
        f"{WORKDIR}:1": "/workspace/project",
        f"{WORKDIR}-root:1": "/sandbox",
        f"{WORKDIR}-sandbox:1": "/sandbox",
        SANDBOX_IMAGE: "/sandbox",  # no WorkingDir at all
    }
    boxes = {image: sandbox(image=image, command=PROBE) for image in cases}
    for box in boxes.values():
        cleanup.append(box.id)
        create(driver, box)()
    for image, expected in cases.items():
        box = boxes[image]
        running(driver, box.id)
        (container,) = containers_of(podman_client, box.id)
        attrs = container.attrs
        volume = next(m for m in attrs["Mounts"] if m.get("Name") == names.volume_name(box.id))
        assert volume["Destination"] == expected, image
        assert attrs["Config"]["WorkingDir"] == "/"
        args = attrs["Args"]
        assert args[args.index("--workdir") + 1] == expected
        assert probe(container) == (expected, expected), image
        assert run_in(container, ["test", "-f", f"{expected}/written"])[0] == 0
        if expected != "/sandbox":  # Podman copied the image's directory into the new volume
            assert run_in(container, ["cat", f"{expected}/README"])[1] == "image content\n"
            assert run_in(container, ["stat", "-c", "%u:%g", expected])[1].strip() == "1000:1000"


def test_refused_working_dir_leaves_nothing(driver: Podmand, podman_client: podman.PodmanClient) -> None:
    """An image whose WorkingDir is under /proc is refused before anything is made, naming it."""
    box = sandbox(image=f"{WORKDIR}-proc:1")
    refused(create(driver, box), grpc.StatusCode.FAILED_PRECONDITION,
            f"sandbox.spec.template.image: {WORKDIR}-proc:1: WorkingDir '/proc/sys' conflicts with the "
            "kernel's '/proc'")
    nothing_created(driver, podman_client, box.id)


@pytest.fixture
def open_driver(make_podmand: object) -> Podmand:
    return make_podmand({"PODMAND_ALLOW_DRIVER_CONFIG": "true"})  # type: ignore[operator, no-any-return]


def test_a_mount_over_the_workspace_is_refused(open_driver: Podmand, podman_client: podman.PodmanClient) -> None:
    """A caller's mount at or above the image's WorkingDir would hide the workspace volume."""
    box = sandbox(image=f"{WORKDIR}:1")
    box.spec.template.driver_config.update({"mounts": [{"type": "tmpfs", "target": "/workspace"}]})
    refused(create(open_driver, box), grpc.StatusCode.FAILED_PRECONDITION,
            "sandbox.spec.template.driver_config.mounts[0].target: '/workspace' would hide the workspace at the "
            "image's WorkingDir '/workspace/project'")
    nothing_created(open_driver, podman_client, box.id)
