"""The image's working directory as the sandbox's workspace (upstream PR #2715), through the pex
against real rootless Podman: where the workspace volume is mounted on the workload (podman-py's
inspect), the path the runtime (its launcher form) and the supervisor (--workdir) are given, and
the main process's cwd (from inside the workload); a refused WorkingDir leaves nothing
behind, one through a symbolic link in the image included (issue 30, item 3). The images come
from tests/images/build.sh (sandbox-workdir*), the hostile ones are made here (test_tenants.image_from).
"""

from __future__ import annotations

import grpc
import podman
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from tests.wait import wait_until

from .conftest import SANDBOX_IMAGE, Podmand, Watch, containers_of, run_in, sandbox
from .test_hardening_input import create, nothing_created, refused, running, validate
from .test_tenants import image_from

WORKDIR = "localhost/podmand-test/sandbox-workdir"
# The main process (the image's USER, 1000) says where it runs and shows it can write there.
# (HOME is no longer checked: the single container's supervisor set it to the workspace; in the
# pair the main process's environment is bootstrap.json's child_env, the image's and the caller's.)
PROBE = ["/bin/sh", "-c", "pwd > /tmp/probe.cwd; id -u >> /tmp/probe.cwd; touch written; exec sleep 600"]


def probe(container: podman.domain.containers.Container) -> tuple[str, str]:
    """The main process's cwd and uid. The workload has no environment of its own (no PATH for
    an exec): commands are named by path."""
    def read() -> tuple[str, str] | None:
        code, out, _ = run_in(container, ["/bin/cat", "/tmp/probe.cwd"])
        return tuple(out.split()) if code == 0 and len(out.split()) == 2 else None  # type: ignore[return-value]

    return wait_until(read, 60, "the main process's probe")  # type: ignore[no-any-return]


def test_workspace_follows_the_image_working_dir(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """WorkingDir /workspace/project gets the volume there, with the image's files copied up;
    empty, / and /sandbox keep /sandbox. The workload starts at / with the path as its launcher
    form's workspace (it chowns it to the identity), the supervisor with --workdir the path, and
    the main process runs there as the identity."""
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
        assert attrs["Args"][0] == "launch-capability-free" and attrs["Args"][-1] == expected, attrs["Args"]
        (supervisor,) = containers_of(podman_client, box.id, "supervisor")
        args = supervisor.attrs["Args"]
        assert args[args.index("--workdir") + 1] == expected
        assert names.volume_name(box.id) not in {m.get("Name") for m in supervisor.attrs["Mounts"]}
        assert probe(container) == (expected, "1000"), image
        assert run_in(container, ["/bin/test", "-f", f"{expected}/written"])[0] == 0
        assert run_in(container, ["/bin/stat", "-c", "%u:%g", expected])[1].strip() == "1000:1000"
        if expected != "/sandbox":  # Podman copied the image's directory into the new volume
            assert run_in(container, ["/bin/cat", f"{expected}/README"])[1] == "image content\n"


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



# An image's own "supervisor", which the old code ran as PID 1, root, with the sandbox's token.
TROJAN = ("mkdir -p /opt/openshell/bin /etc/openshell/auth /a/b/c/d && "
          "printf '#!/bin/sh\\necho TROJAN uid=$(id -u)\\nexec sleep 600\\n' > /opt/openshell/bin/openshell-sandbox && "
          "chmod 0755 /opt/openshell/bin/openshell-sandbox")


def readers_of(client: podman.PodmanClient, daemon: Podmand) -> list[str]:
    mine = {"label": f"{names.STATE_DIR}={daemon.state_dir}"}
    return [c.name for c in client.containers.list(all=True, filters=mine) if c.name.startswith("podmand-read-")]


def refused_image(driver: Podmand, podman_client: podman.PodmanClient, watch: Watch, box: pb.DriverSandbox) -> str:
    """The create's ImageRefused message, once nothing is left of it: no container of either
    role, no image reader; then the sandbox deletes."""
    snap = watch.wait_reason(box.id, "ImageRefused")
    assert containers_of(podman_client, box.id) == [] == containers_of(podman_client, box.id, "supervisor")
    assert readers_of(podman_client, driver) == []
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
    return snap.status.conditions[0].message


@pytest.mark.parametrize("target", ["/opt/openshell/bin", "/.openshell/channel"])
def test_a_working_dir_through_a_symbolic_link_is_refused(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str], target: str
) -> None:
    """Issue 30, item 3: WORKDIR /a/b/c/d/e with /a/b/c/d/e -> ``target`` (OpenShell's binary
    directory, or the pair's channel). Podman would resolve the volume's destination through the
    link and mount it after podmand's shallower mounts, over them: the image's own
    openshell-sandbox ran as PID 1 (root) in the runtime's place, or the channel (the bootstrap,
    the control socket) was hidden. (The single container's token directory was the second
    case before.) Refused at create,
    FAILED_PRECONDITION naming the field, the image and the path; nothing made, no reader
    left; ValidateSandboxCreate refuses it too once the image was read."""
    script = f"{TROJAN} && ln -s {target} /a/b/c/d/e"
    with image_from(podman_client, ["WORKDIR=/a/b/c/d/e"], script) as image:
        box = sandbox(image=image)
        cleanup.append(box.id)  # only if it were made
        needles = (f"sandbox.spec.template.image: {image}: WorkingDir '/a/b/c/d/e' passes through '/a/b/c/d/e', "
                   "a symbolic link in the image",)
        refused(create(driver, box), grpc.StatusCode.FAILED_PRECONDITION, *needles)
        nothing_created(driver, podman_client, box.id)
        assert readers_of(podman_client, driver) == []
        refused(validate(driver, box), grpc.StatusCode.FAILED_PRECONDITION, *needles)


def test_a_link_higher_up_the_working_dir_is_refused(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """A link anywhere on the path counts: /srv/app -> /opt/openshell, WORKDIR /srv/app/bin."""
    script = f"{TROJAN} && mkdir -p /srv && ln -s /opt/openshell /srv/app"
    with image_from(podman_client, ["WORKDIR=/srv/app/bin"], script) as image:
        box = sandbox(image=image)
        cleanup.append(box.id)
        refused(create(driver, box), grpc.StatusCode.FAILED_PRECONDITION,
                f"{image}: WorkingDir '/srv/app/bin' passes through '/srv/app', a symbolic link in the image")
        nothing_created(driver, podman_client, box.id)


def test_a_link_at_the_default_workspace_fails_provisioning(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """No WorkingDir, but /sandbox -> /usr/bin in the image: the workspace volume would replace
    the directory the runtime, root in its launcher form, runs its programs from. The image is
    read while provisioning: the terminal ImageRefused, naming the image and the path, and no
    container of either role."""
    with image_from(podman_client, [], "rm -rf /sandbox && ln -s /usr/bin /sandbox") as image:
        watch = Watch(driver.stub)
        box = sandbox(image=image)
        cleanup.append(box.id)
        create(driver, box)()
        message = refused_image(driver, podman_client, watch, box)
        assert f"{image}: the workspace '/sandbox' (no WorkingDir) passes through '/sandbox'" in message, message


def test_usr_local_bin_is_a_refused_root(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """The volume there would let the workload put programs on the root helpers' PATH."""
    with image_from(podman_client, ["WORKDIR=/usr/local/bin"]) as image:
        box = sandbox(image=image)
        cleanup.append(box.id)
        refused(create(driver, box), grpc.StatusCode.FAILED_PRECONDITION,
                f"sandbox.spec.template.image: {image}: WorkingDir '/usr/local/bin' conflicts with the system root "
                "'/usr/local/bin'")
        nothing_created(driver, podman_client, box.id)
