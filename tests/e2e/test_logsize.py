"""A sandbox's log is bounded (issue 30, item 6): podmand gives every container it creates
``log_configuration.size`` = ``log_size_max``, Podman hands it to conmon as
``--log-size-max``, and conmon starts the k8s-file log again, empty, before an entry
would pass it. Through the pex against the real rootless Podman.

What reaches a sandbox's container log is what its PID 1, the supervisor, writes: the
supervisor keeps the workload's own output for the gateway's attach, and an exec cannot
reopen PID 1's pipes (they are conmon's, a uid the container does not map). A workload
makes the log grow through what the supervisor logs about it; so the test's supervisor
image is the stand-in's, with ``/openshell-sandbox`` a script that writes far more than
the bound before it waits as a supervisor does, and the log file (inspect's
``HostConfig.LogConfig.Path``) is measured as the rootless user sees it."""

from __future__ import annotations

import io
import pwd
import subprocess
import tarfile
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from tests.e2e.conftest import SUPERVISOR_IMAGE, USER, Podmand, containers_of, sandbox
from tests.wait import wait_until

BOUND = 100_000  # bytes: Podman's inspect shows it as "100kB" (decimal units, four digits)
WRITTEN = 40 * BOUND
END = "flood-logged-to-the-end"
DEADLINE = 60.0
FLOOD = f"""#!/bin/sh
head -c {WRITTEN} /dev/zero | tr '\\0' x | fold -w 999
echo {END}
exec sleep 600
"""


@pytest.fixture
def flooding_supervisor(podman_client: podman.PodmanClient) -> Iterator[str]:
    """A supervisor image whose ``/openshell-sandbox`` logs ``WRITTEN`` bytes, then ``END``."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("openshell-sandbox")
        info.size, info.mode = len(FLOOD), 0o755
        tar.addfile(info, io.BytesIO(FLOOD.encode()))
    repository, tag = "localhost/podmand-test/supervisor-flood", uuid.uuid4().hex[:12]
    base = podman_client.containers.create(SUPERVISOR_IMAGE, command=["/openshell-sandbox"])
    try:
        base.put_archive("/", layer.getvalue())
        base.commit(repository=repository, tag=tag)
    finally:
        base.remove(force=True)
    yield f"{repository}:{tag}"
    podman_client.images.remove(f"{repository}:{tag}", force=True)


def as_user(*cmd: str) -> str:
    """``cmd``'s output, run as the rootless user in its own user namespace (``podman unshare``):
    the log's directory belongs to the container's root, a subordinate uid of that user's."""
    entry = pwd.getpwnam(USER)
    env = [f"HOME={entry.pw_dir}", "PATH=/usr/bin:/bin", f"XDG_RUNTIME_DIR=/run/user/{entry.pw_uid}"]
    done = subprocess.run(["runuser", "-u", USER, "--", "env", "-i", *env, "podman", "unshare", *cmd],
                          capture_output=True, text=True, timeout=30, cwd="/")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def running_container(daemon: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> Any:
    """A new sandbox of ``daemon``, running: its container, inspected."""
    watch = daemon.watch()
    box = sandbox()
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning")
    [container] = containers_of(podman_client, box.id)
    return container


def test_a_sandbox_log_never_grows_past_log_size_max(make_podmand: Callable[..., Podmand],
                                                     podman_client: podman.PodmanClient, cleanup: list[str],
                                                     flooding_supervisor: str) -> None:
    daemon = make_podmand({"PODMAND_LOG_SIZE_MAX": str(BOUND), "OPENSHELL_SUPERVISOR_IMAGE": flooding_supervisor})
    container = running_container(daemon, podman_client, cleanup)
    log = container.attrs["HostConfig"]["LogConfig"]
    # Once the last line is logged (after every earlier one), the file is what conmon keeps.
    wait_until(lambda: END in as_user("tail", "-c", "200", log["Path"]), DEADLINE, f"{END} in {log['Path']}")
    size = int(as_user("stat", "-c", "%s", log["Path"]))
    assert 0 < size <= BOUND, f"{log['Path']} is {size} bytes after {WRITTEN} written; log_size_max is {BOUND}"
    assert (log["Type"], log["Size"]) == ("k8s-file", "100kB"), log


def test_the_default_bound_is_ten_mib(make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
                                      cleanup: list[str]) -> None:
    """No setting: 10 MiB (10485760 bytes, "10.49MB" in Podman's decimal words)."""
    container = running_container(make_podmand(), podman_client, cleanup)
    assert container.attrs["HostConfig"]["LogConfig"]["Size"] == "10.49MB", container.attrs["HostConfig"]
