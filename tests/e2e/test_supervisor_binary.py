"""The runtime binary every workload starts from (``/openshell-sandbox`` of the runtime image,
extracted into podmand's cache by sandbox/supervisor.py and bound read-only at
/opt/openshell/bin/openshell-sandbox), through the pex against real rootless Podman (issue 30):
no sandbox can change it for another, whatever its user namespace, a copy changed behind
podmand's back is never run, and no sandbox maps podmand's own uid, or takes more subordinate
ids than the operator allows, unless the operator says so.

Tried before the fix, in the single-container layout: a keep-id sandbox (its uid map holds
podmand's uid) remounted the shared binary read-write as its root and chmod'ed it 0000, and
every later sandbox failed with "permission denied"; a binary rewritten on the host ran as the
next sandbox's root. The split's workload has no CAP_SYS_ADMIN, so that remount now fails
inside; the file a keep-id sandbox's mapped uid owns is still its own copy, which the tests
change from the host as that uid could.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import podman

from podmand._proto import compute_driver_pb2 as pb
from tests.standin.launch import Launch

from .conftest import USER, Podmand, containers_of, run_in, sandbox
from .test_hardening_input import create, nothing_created, refused, running
from .test_userns import WHERE, asking

OPEN = {"PODMAND_ALLOW_DRIVER_CONFIG": "true", "PODMAND_ALLOW_USERNS": "true"}
OWN_UID = {**OPEN, "PODMAND_ALLOW_USERNS_OWN_UID": "true", "OPENSHELL_PODMAN_USERNS": "nomap"}
BIN = "/opt/openshell/bin/openshell-sandbox"


def source_of(client: podman.PodmanClient, sandbox_id: str) -> Path:
    """The host file Podman binds at the runtime's path in the sandbox's workload container."""
    (container,) = containers_of(client, sandbox_id)
    (mount,) = [m for m in container.attrs["Mounts"] if m["Destination"] == BIN]
    return Path(mount["Source"])


def as_user(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", USER, "--", *cmd], capture_output=True, text=True, timeout=60)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def restart(daemon: Podmand, sandbox_id: str) -> None:
    """Stop, then start again as a gateway does: a new launch bundle under a new generation."""
    daemon.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=sandbox_id))
    daemon.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=sandbox_id,
                                                    launch_authentication=Launch(sandbox_id=sandbox_id).bundle(),
                                                    generation_id=f"g{uuid.uuid4().hex[:16]}"))


def test_a_sandbox_mapping_podmands_uid_changes_only_its_own_copy(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """With the operator's opt-in, a keep-id sandbox maps podmand's uid, which owns the binary it
    runs: that is its own copy (in its state directory), so once that copy is chmod'ed 0000 the
    shared binary stays 0555 and unchanged, a sandbox made afterwards runs, and the sandbox's own
    next start gets its copy back. From inside, the old remount no longer works at all."""
    daemon = make_podmand(OWN_UID)
    tenant, victim = asking("keep-id"), sandbox()
    cleanup += [tenant.id, victim.id]
    create(daemon, tenant)()
    running(daemon, tenant.id)
    (container,) = containers_of(podman_client, tenant.id)
    code, out, err = run_in(container, ["/bin/sh", "-c", f"mount -o remount,bind,rw {BIN} && chmod 0000 {BIN}"])
    assert code != 0, (out, err)  # the workload has no CAP_SYS_ADMIN: its bind stays read-only
    own = source_of(podman_client, tenant.id)
    assert own.parent == daemon.state_dir / "sandboxes" / tenant.id
    done = as_user("chmod", "0000", str(own))  # what its mapped uid (podmand's) could do to the file
    assert done.returncode == 0, done.stderr

    create(daemon, victim)()
    running(daemon, victim.id)  # the old code: exec ... permission denied, for every later sandbox
    assert (os.stat(own).st_mode & 0o7777) == 0
    shared = source_of(podman_client, victim.id)
    assert shared.parent.parent == daemon.state_dir / "supervisor"
    assert (os.stat(shared).st_mode & 0o7777) == 0o555
    assert digest(shared) == (shared.parent / "openshell-sandbox.sha256").read_text().split()[1]

    restart(daemon, tenant.id)  # its changed copy is replaced before the start
    running(daemon, tenant.id)
    assert (os.stat(own).st_mode & 0o7777) == 0o555 and digest(own) == digest(shared)


def test_a_binary_changed_on_the_host_is_never_run(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """The shared binary replaced as podmand's user, mode and all (a trojan that would run as the
    workload's launcher, root with CHOWN, SETUID, SETGID): the next create and the next start each
    run a fresh copy from the runtime image."""
    daemon = make_podmand()
    first, second = sandbox(), sandbox()
    cleanup += [first.id, second.id]
    create(daemon, first)()
    running(daemon, first.id)
    shared = source_of(podman_client, first.id)
    pristine = digest(shared)
    trojan = "#!/bin/sh\necho TROJAN-SUPERVISOR; exec sleep 600\n"

    def plant() -> None:  # a new file of the same mode renamed over it (the old one runs: "text file busy")
        planted = shared.parent / ".planted"
        script = f"printf '%s' '{trojan}' > {planted} && chmod 0555 {planted} && mv -f {planted} {shared}"
        done = as_user("sh", "-c", script)
        assert done.returncode == 0, done.stderr
        assert digest(shared) != pristine and (os.stat(shared).st_mode & 0o7777) == 0o555

    plant()
    create(daemon, second)()
    running(daemon, second.id)
    (container,) = containers_of(podman_client, second.id)
    code, out, _ = run_in(container, ["/usr/bin/sha256sum", BIN])
    assert code == 0 and out.split()[0] == pristine  # the old code: the trojan, as the sandbox's root
    assert digest(shared) == pristine and (os.stat(shared).st_mode & 0o7777) == 0o555

    plant()
    restart(daemon, first.id)
    running(daemon, first.id)
    (container,) = containers_of(podman_client, first.id)
    code, out, _ = run_in(container, ["/usr/bin/sha256sum", BIN])
    assert code == 0 and out.split()[0] == pristine


def test_podmands_uid_is_mapped_only_with_the_opt_in(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient
) -> None:
    """Without allow_userns_own_uid: a sandbox's keep-id is refused naming the setting, nothing made;
    the operator's own userns=keep-id stops serve at start with one line naming it."""
    daemon = make_podmand({**OPEN, "OPENSHELL_PODMAN_USERNS": "nomap"})
    box = asking("keep-id")
    refused(create(daemon, box), grpc.StatusCode.FAILED_PRECONDITION,
            WHERE + "userns keep-id maps podmand's own uid", "PODMAND_ALLOW_USERNS_OWN_UID")
    nothing_created(daemon, podman_client, box.id)

    operator = make_podmand({"OPENSHELL_PODMAN_USERNS": "keep-id"}, start=False)
    proc = subprocess.run(operator.command("serve"), capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "invalid setting userns (--userns / OPENSHELL_PODMAN_USERNS): userns keep-id maps podmand's own uid" in (
        proc.stderr + proc.stdout)
    assert "Traceback" not in proc.stderr + proc.stdout


def test_auto_size_is_capped(make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
                             cleanup: list[str]) -> None:
    """auto:size=64000 (which took the ids the next sandbox needed) is refused naming the setting;
    the operator's own size still runs, and userns_max_size raises the cap."""
    daemon = make_podmand(OPEN)
    greedy = asking("auto:size=64000")
    refused(create(daemon, greedy), grpc.StatusCode.FAILED_PRECONDITION,
            WHERE + "auto size 64000 is more than the 1024 ids a sandbox may ask for",
            "userns_max_size (--userns-max-size / PODMAND_USERNS_MAX_SIZE)")
    nothing_created(daemon, podman_client, greedy.id)
    fits = asking("auto:size=1024")
    cleanup.append(fits.id)
    create(daemon, fits)()
    running(daemon, fits.id)
    daemon.stop()
    raised = make_podmand({**OPEN, "PODMAND_USERNS_MAX_SIZE": "2048"})
    bigger = asking("auto:size=2048")
    cleanup.append(bigger.id)
    create(raised, bigger)()
    running(raised, bigger.id)
