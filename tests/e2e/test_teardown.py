"""A sandbox whose container network Podman cannot tear down: StopSandbox and DeleteSandbox
still succeed, and what is left is nothing.

The fault is made as netavark meets it when containers of one network are torn down
together on rootless Podman 5.4.2: the container's veth is gone before Podman's teardown
runs (here deleted from inside the container's network namespace, as the rootless user).
5.4.2 answers that stop or removal 500 "removing container <id> network: netavark: failed
to delete container veth eth0: Netlink error: No such device (os error 19)", having
stopped or removed the container all the same, and podmand asks again
(podmand/driver/teardown.py); 4.3.1 logs its teardown error and answers 2xx
(cleanupNetwork returns no error there), so podmand has nothing to ask again.
"""

from __future__ import annotations

import subprocess
from typing import Any

import podman

from podmand._proto import compute_driver_pb2 as pb

from .conftest import Podmand, containers_of, podman_version, sandbox, volumes_of, wait_until

ASKED = "Podman's network teardown (netavark) failed {} its container, asking again"
VETH = "netavark: failed to delete container veth eth0: Netlink error: No such device (os error 19)"


def drop_veth(daemon: Podmand, container: Any) -> None:
    """Delete eth0 in the container's network namespace, behind Podman's back."""
    netns = container.attrs["NetworkSettings"]["SandboxKey"]
    assert netns, container.attrs["NetworkSettings"]
    cmd = ["nsenter", f"--net={netns}", "ip", "link", "del", "eth0"]
    if daemon.user:  # the rootless user's namespace owns the container's network namespace
        env = {k: daemon.env[k] for k in ("HOME", "XDG_RUNTIME_DIR")}
        env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
        cmd = ["runuser", "-u", daemon.user, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()],
               "podman", "unshare", *cmd]
    # from /: the checkout may be a directory the rootless user cannot enter (a private clone)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False, cwd="/")
    assert done.returncode == 0, done.stderr


def test_stop_and_delete_succeed_when_podman_cannot_tear_the_network_down(
        driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    watch = driver.watch()
    box = sandbox(token=True)
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning")
    [container] = containers_of(podman_client, box.id)
    drop_veth(driver, container)
    driver.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))
    assert podman_client.containers.get(container.id).status == "exited"
    watch.wait_reason(box.id, "ContainerStopped")

    driver.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id))  # a network of its own again
    watch.wait_reason(box.id, "ContainerRunning")
    [container] = containers_of(podman_client, box.id)
    drop_veth(driver, container)
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted is True
    wait_until(lambda: watch.deleted(box.id), what="Deleted event")
    assert containers_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []
    assert not (driver.state_dir / "sandboxes" / box.id).exists()
    watch.cancel()

    logs = driver.logs()
    assert "code=INTERNAL" not in logs
    asked = [line for line in logs.splitlines() if "asking again" in line]
    if podman_version(podman_client) >= (5, 4):
        assert len(asked) == 2, asked
        assert ASKED.format("stopping") in asked[0] and ASKED.format("removing") in asked[1]
        assert all(VETH in line and container.id in line for line in asked)  # the one container, started again
    else:
        assert asked == []
