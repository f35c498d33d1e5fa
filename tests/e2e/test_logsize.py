"""A sandbox's logs are bounded (issue 30, item 6): podmand gives every container it creates
``log_configuration.size`` = ``log_size_max`` (libpod.client, both containers of the pair),
Podman hands it to conmon as ``--log-size-max``, and conmon starts the k8s-file log again,
empty, before an entry would pass it. Through the pex against the real rootless Podman.

What a tenant controls in the split topology is its main process, whose stdout and stderr
the runtime leaves on the workload container's own (conmon's pipes): so the flood here is
the sandbox's command, writing far more than the bound before it idles, and the workload's
log file (inspect's ``HostConfig.LogConfig.Path``) is measured as the rootless user sees
it. The supervisor's log carries only the supervisor's own lines; its bound is the same
setting on the same create path, checked in its inspect."""

from __future__ import annotations

import pwd
import subprocess
from collections.abc import Callable
from typing import Any

import podman

from podmand._proto import compute_driver_pb2 as pb
from tests.e2e.conftest import USER, Podmand, containers_of, sandbox
from tests.wait import wait_until

BOUND = 100_000  # bytes: Podman's inspect shows it as "100kB" (decimal units, four digits)
WRITTEN = 40 * BOUND
END = "flood-logged-to-the-end"
DEADLINE = 60.0
FLOOD = ["sh", "-c", f"head -c {WRITTEN} /dev/zero | tr '\\0' x | fold -w 999; echo {END}; exec sleep 600"]


def as_user(*cmd: str) -> str:
    """``cmd``'s output, run as the rootless user in its own user namespace (``podman unshare``):
    the log's directory belongs to the container's root, a subordinate uid of that user's."""
    entry = pwd.getpwnam(USER)
    env = [f"HOME={entry.pw_dir}", "PATH=/usr/bin:/bin", f"XDG_RUNTIME_DIR=/run/user/{entry.pw_uid}"]
    done = subprocess.run(["runuser", "-u", USER, "--", "env", "-i", *env, "podman", "unshare", *cmd],
                          capture_output=True, text=True, timeout=30, cwd="/")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def running_pair(daemon: Podmand, podman_client: podman.PodmanClient, cleanup: list[str],
                 command: list[str] | None = None) -> tuple[Any, Any]:
    """A new sandbox of ``daemon``, running: (its workload, its supervisor), inspected."""
    watch = daemon.watch()
    box = sandbox(command=command)
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", timeout=DEADLINE)
    [workload] = containers_of(podman_client, box.id)
    [supervisor] = containers_of(podman_client, box.id, "supervisor")
    return workload, supervisor


def test_a_sandbox_log_never_grows_past_log_size_max(make_podmand: Callable[..., Podmand],
                                                     podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    daemon = make_podmand({"PODMAND_LOG_SIZE_MAX": str(BOUND)})
    workload, supervisor = running_pair(daemon, podman_client, cleanup, FLOOD)
    log = workload.attrs["HostConfig"]["LogConfig"]
    # Once the last line is logged (after every earlier one), the file is what conmon keeps.
    wait_until(lambda: END in as_user("tail", "-c", "200", log["Path"]), DEADLINE, f"{END} in {log['Path']}")
    size = int(as_user("stat", "-c", "%s", log["Path"]))
    assert 0 < size <= BOUND, f"{log['Path']} is {size} bytes after {WRITTEN} written; log_size_max is {BOUND}"
    for container in (workload, supervisor):
        kept = container.attrs["HostConfig"]["LogConfig"]
        assert (kept["Type"], kept["Size"]) == ("k8s-file", "100kB"), (container.name, kept)


def test_the_default_bound_is_ten_mib(make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
                                      cleanup: list[str]) -> None:
    """No setting: 10 MiB (10485760 bytes, "10.49MB" in Podman's decimal words), on both containers."""
    for container in running_pair(make_podmand(), podman_client, cleanup):
        assert container.attrs["HostConfig"]["LogConfig"]["Size"] == "10.49MB", container.attrs["HostConfig"]
