"""Unit tests for podmand.sandbox.workspace: the workspace path from the image's WorkingDir."""

from __future__ import annotations

import pytest

from podmand.errors import FailedPrecondition
from podmand.sandbox import workspace
from podmand.sandbox.driverconfig import Mount

IMAGE = "localhost/app:1"
SSH = ("/run/openshell/ssh.sock",)


@pytest.mark.parametrize("working_dir", ["", "/", "/sandbox", "/sandbox/"])
def test_fallback_is_the_managed_sandbox(working_dir: str) -> None:
    assert workspace.root(IMAGE, working_dir, SSH) == "/sandbox"


@pytest.mark.parametrize(
    ("working_dir", "path"),
    [("/workspace/project", "/workspace/project"), ("/app/", "/app"), ("/usr/src/app", "/usr/src/app"),
     ("/usr/local/src/app", "/usr/local/src/app"), ("/lib32/app", "/lib32/app"), ("/etc/project", "/etc/project"),
     ("/" + "/".join(["d"] * workspace.DEPTH), "/" + "/".join(["d"] * workspace.DEPTH))],
)
def test_image_working_dir_becomes_the_workspace(working_dir: str, path: str) -> None:
    assert workspace.root(IMAGE, working_dir, SSH) == path


@pytest.mark.parametrize(
    ("working_dir", "why"),
    [
        ("/proc", "WorkingDir '/proc' conflicts with the kernel's '/proc'"),
        ("/proc/self/cwd", "WorkingDir '/proc/self/cwd' conflicts with the kernel's '/proc'"),
        ("/sys/fs/cgroup", "conflicts with the kernel's '/sys'"),
        ("/dev/", "WorkingDir '/dev' conflicts with the kernel's '/dev'"),
        ("/usr", "WorkingDir '/usr' conflicts with the system root '/usr/bin'"),
        ("/usr/lib/app", "conflicts with the system root '/usr/lib'"),
        ("/bin", "conflicts with the system root '/bin'"),
        ("/usr/local/bin", "WorkingDir '/usr/local/bin' conflicts with the system root '/usr/local/bin'"),
        ("/usr/local/sbin/x", "conflicts with the system root '/usr/local/sbin'"),
        ("/usr/local", "WorkingDir '/usr/local' conflicts with the system root '/usr/local/bin'"),
        ("/app*", "WorkingDir '/app*' has glob characters"),
        ("/a/b?", "has glob characters"),
        ("/a/[b]", "has glob characters"),
        ("/a\\b", "has glob characters"),
        ("/" + "/".join(["d"] * (workspace.DEPTH + 1)), f"is deeper than {workspace.DEPTH} directories"),
        ("/etc", "conflicts with OpenShell's control path '/etc/openshell'"),
        ("/var", "conflicts with OpenShell's control path '/var/run/netns'"),
        ("/opt/openshell/bin/x", "conflicts with OpenShell's control path '/opt/openshell'"),
        ("/run", "conflicts with OpenShell's control path '/run/openshell'"),
        ("relative/dir", "WorkingDir 'relative/dir' is not an absolute path"),
        ("/a//b", "is not a normalised path"),
        ("/a/../b", "is not a normalised path"),
        (" /app", "surrounding whitespace or control characters"),
        ("/app\n", "surrounding whitespace or control characters"),
    ],
)
def test_refused_working_dirs_say_why(working_dir: str, why: str) -> None:
    with pytest.raises(FailedPrecondition) as exc:
        workspace.root(IMAGE, working_dir, SSH)
    assert exc.value.message.startswith(f"sandbox.spec.template.image: {IMAGE}: ")
    assert why in exc.value.message


def test_the_sandboxs_own_ssh_socket_is_a_control_path() -> None:
    with pytest.raises(FailedPrecondition, match="control path '/srv/ssh/sock'"):
        workspace.root(IMAGE, "/srv", ("/srv/ssh/sock",))


def test_a_caller_mount_may_not_hide_the_workspace() -> None:
    """At the workdir or above it the mount would cover the volume; below it, it is the caller's."""
    inside = Mount("tmpfs", "/workspace/project/cache")
    assert workspace.root(IMAGE, "/workspace/project", SSH, (inside,)) == "/workspace/project"
    for target in ("/workspace", "/workspace/project"):
        with pytest.raises(FailedPrecondition) as exc:
            workspace.root(IMAGE, "/workspace/project", SSH, (inside, Mount("tmpfs", target)))
        assert exc.value.message == (
            f"sandbox.spec.template.driver_config.mounts[1].target: {target!r} would hide the workspace at the "
            "image's WorkingDir '/workspace/project'"
        )


def test_a_link_on_the_workspace_path_is_refused_naming_the_image_and_both_paths() -> None:
    refused = workspace.link_refusal(IMAGE, "/a/b/c/d/e", "/a/b/c/d/e", "/a/b/c/d/e")
    assert refused.message == (
        f"sandbox.spec.template.image: {IMAGE}: WorkingDir '/a/b/c/d/e' passes through '/a/b/c/d/e', a symbolic "
        "link in the image; podmand mounts the workspace only on the image's own directories"
    )
    assert "the workspace '/sandbox' (no WorkingDir) passes through '/sandbox'" in (
        workspace.link_refusal(IMAGE, "", "/sandbox", "/sandbox").message
    )
