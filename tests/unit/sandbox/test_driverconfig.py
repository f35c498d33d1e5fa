"""Unit tests for podmand.sandbox.driverconfig: upstream's driver_config schema, checked whole."""

from __future__ import annotations

from typing import Any

import pytest

from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.errors import FailedPrecondition, InvalidArgument
from podmand.libpod import versions
from podmand.libpod.versions import Features
from podmand.sandbox import driverconfig, spec
from podmand.sandbox.driverconfig import Mount
from tests.jwt import make_launch

OPEN = Settings(allow_driver_config=True, enable_bind_mounts=True, admission_enabled=False)
WHERE = "sandbox.spec.template.driver_config.mounts[0]"


def template(*mounts: dict[str, Any]) -> pb.DriverSandboxTemplate:
    tpl = pb.DriverSandboxTemplate()
    tpl.driver_config.update({"mounts": list(mounts)})
    return tpl


def parse(*mounts: dict[str, Any], settings: Settings = OPEN, userns: str = "keep-id",
          podman: Features = versions.UNKNOWN) -> tuple[Mount, ...]:
    return driverconfig.parse(template(*mounts), settings, userns=userns, control_paths=("/run/agent/ssh.sock",),
                           podman=podman).mounts


def test_tmpfs_options_size_and_mode() -> None:
    """Caller options replace the default set; size_bytes and mode (decimal, written octal) follow them."""
    (m,) = parse({"type": "tmpfs", "target": "/scratch", "options": [" noexec ", "nosuid", "uid=1000"],
                  "size_bytes": 65536, "mode": 0o1777})
    assert m == Mount("tmpfs", "/scratch", "", False, ("noexec", "nosuid", "uid=1000", "size=65536", "mode=1777"))
    (default,) = parse({"type": "tmpfs", "target": "/scratch"})
    assert default.options == driverconfig.DEFAULT_TMPFS_OPTIONS


def test_bind_selinux_labels() -> None:
    shared, private, none = parse(
        {"type": "bind", "source": "/srv/a", "target": "/a", "selinux_label": "shared"},
        {"type": "bind", "source": "/srv/b", "target": "/b", "selinux_label": "private", "read_only": False},
        {"type": "bind", "source": "/srv/c", "target": "/c"},
    )
    assert (shared.selinux, private.selinux, none.selinux) == ("z", "Z", "")
    built = driverconfig.libpod_mounts((shared, private, none), {})
    assert [m["options"] for m in built.mounts] == [["rbind", "ro", "z"], ["rbind", "rw", "Z"], ["rbind", "ro"]]


def test_image_mount_is_pinned_by_id_and_read_write_by_podmans_name() -> None:
    (m,) = parse({"type": "image", "source": "localhost/data:1", "target": "/data/", "read_only": False})
    assert m == Mount("image", "/data", "localhost/data:1", False)
    built = driverconfig.libpod_mounts((m,), {"localhost/data:1": "sha256:beef"})
    assert built.image_volumes == [{"Source": "sha256:beef", "Destination": "/data", "ReadWrite": True}]
    assert built.mounts == [] and built.volumes == []


@pytest.mark.parametrize("userns", ["auto", "auto:size=2048", "nomap", "private"])
def test_image_mount_refused_where_podman_cannot_mount_it(userns: str) -> None:
    with pytest.raises(FailedPrecondition) as exc:
        parse({"type": "image", "source": "localhost/data:1", "target": "/data"}, userns=userns)
    assert exc.value.message.startswith(f"{WHERE}: ") and "containers/podman#23211" in exc.value.message
    assert f"userns={userns.split(':')[0]}" in exc.value.message


@pytest.mark.parametrize("userns", ["keep-id", "host", "keep-id:uid=1000"])
def test_image_mount_accepted_where_podman_can_mount_it(userns: str) -> None:
    assert parse({"type": "image", "source": "localhost/data:1", "target": "/data"}, userns=userns)


VOLUME_SUBPATH = {"type": "volume", "source": "shared-data", "target": "/data", "subpath": "team-a/inputs"}
IMAGE_SUBPATH = {"type": "image", "source": "localhost/data:1", "target": "/models", "subpath": "weights"}


@pytest.mark.parametrize(
    ("version", "mount", "needs"),
    [
        ("4.3.1", VOLUME_SUBPATH, "4.5.0"),  # no SubPath in 4.3's spec: ignored, the whole volume mounted
        ("4.4.0", VOLUME_SUBPATH, "4.5.0"),  # SubPath joined without checking: a symlink leads out of the volume
        ("", VOLUME_SUBPATH, "4.5.0"),  # version unknown: nothing beyond 4.3 assumed
        ("5.0.3", IMAGE_SUBPATH, "5.1.0"),
        ("4.9.3", IMAGE_SUBPATH, "5.1.0"),
    ],
)
def test_subpath_refused_where_podman_would_mount_the_whole_source(version: str, mount: dict[str, Any],
                                                                    needs: str) -> None:
    """FAILED_PRECONDITION naming the field, the Podman version it needs and the one connected."""
    with pytest.raises(FailedPrecondition) as exc:
        parse(mount, podman=Features(version))
    message = exc.value.message
    assert message.startswith(f"{WHERE}.subpath: {mount['type']} subpath needs Podman {needs} or newer"), message
    assert (f"Podman {version} would ignore it" if version else "its version is unknown") in message
    assert f"mount the whole {mount['type']}" in message


@pytest.mark.parametrize(
    ("version", "mount"),
    [("4.5.0", VOLUME_SUBPATH), ("5.4.2", VOLUME_SUBPATH), ("5.1.0", IMAGE_SUBPATH), ("v5.4.2", IMAGE_SUBPATH)],
)
def test_subpath_accepted_where_podman_honours_it(version: str, mount: dict[str, Any]) -> None:
    (m,) = parse(mount, podman=Features(version))
    assert (m.kind, m.target, m.subpath) == (mount["type"], mount["target"], mount["subpath"])


def test_subpath_reaches_libpod_by_the_names_its_spec_decodes() -> None:
    """A named volume's SubPath (an untagged Go field) and an image volume's subPath (its JSON tag);
    a mount without one sends neither."""
    sub_volume, sub_image, whole = parse(VOLUME_SUBPATH, IMAGE_SUBPATH, {"type": "volume", "source": "v",
                                                                         "target": "/v"}, podman=Features("5.4.2"))
    built = driverconfig.libpod_mounts((sub_volume, sub_image, whole), {"localhost/data:1": "sha256:beef"})
    assert built.volumes == [
        {"Name": "shared-data", "Dest": "/data", "Options": ["ro"], "SubPath": "team-a/inputs"},
        {"Name": "v", "Dest": "/v", "Options": ["ro"]},
    ]
    assert built.image_volumes == [
        {"Source": "sha256:beef", "Destination": "/models", "ReadWrite": False, "subPath": "weights"}
    ]


@pytest.mark.parametrize("subpath", ["../x", "a/../../x", "/abs", " a", "", "a\nb", 7])
def test_subpath_shape_is_checked_whatever_the_podman(subpath: Any) -> None:
    with pytest.raises(InvalidArgument) as exc:
        parse({**VOLUME_SUBPATH, "subpath": subpath}, podman=Features("5.4.2"))
    assert exc.value.message.startswith(f"{WHERE}.subpath: ")


@pytest.mark.parametrize(
    ("mount", "settings", "error", "field", "needle"),
    [
        ({"type": "bind", "source": "/srv", "target": "/srv", "selinux_label": "z"}, OPEN, InvalidArgument,
         ".selinux_label", "shared or private"),
        ({"type": "bind", "source": " /srv", "target": "/srv"}, OPEN, InvalidArgument, ".source", "absolute"),
        ({"type": "bind", "source": "/srv", "target": "/srv"}, Settings(allow_driver_config=True,
         admission_enabled=False), FailedPrecondition, "", "enable_bind_mounts"),
        ({"type": "image", "source": "localhost/d:1", "target": "/d"}, Settings(
                allow_driver_config=True),
         FailedPrecondition, "", "host bind or image mount"),
        ({"type": "image", "source": "Not An Image", "target": "/d"}, OPEN, InvalidArgument, ".source", "image"),
        ({"type": "image", "source": "localhost/d:1", "target": "/d", "subpath": "a/b"}, OPEN, FailedPrecondition,
         ".subpath", "image subpath needs Podman 5.1.0 or newer"),
        ({"type": "volume", "source": "v", "target": "/d", "subpath": "a"}, OPEN, FailedPrecondition,
         ".subpath", "volume subpath needs Podman 4.5.0 or newer"),
        ({"type": "volume", "source": "v", "target": "/d", "subpath": "../a"}, OPEN, InvalidArgument,
         ".subpath", "'..'"),
        ({"type": "volume", "source": "v", "target": "/d", "subpath": "/a"}, OPEN, InvalidArgument,
         ".subpath", "relative"),
        ({"type": "volume", "source": "v", "target": "/d", "selinux_label": "shared"}, OPEN, InvalidArgument,
         "", "selinux_label"),
        ({"type": "tmpfs", "target": "/t", "options": ["rw,exec"]}, OPEN, InvalidArgument, ".options[0]",
         "not a tmpfs mount option"),
        ({"type": "tmpfs", "target": "/t", "options": ["", "rw"]}, OPEN, InvalidArgument, ".options[0]",
         "empty"),
        ({"type": "tmpfs", "target": "/t", "options": ["size=1g"], "size_bytes": 10}, OPEN, InvalidArgument,
         ".options[0]", "size_bytes"),
        ({"type": "tmpfs", "target": "/t", "options": ["mode=999"]}, OPEN, InvalidArgument, ".options[0]",
         "invalid value"),
        ({"type": "tmpfs", "target": "/t", "options": ["noexec", "noexec"]}, OPEN, InvalidArgument, ".options",
         "twice"),
        ({"type": "tmpfs", "target": "/t", "options": "noexec"}, OPEN, InvalidArgument, ".options", "list"),
        ({"type": "tmpfs", "target": "/t", "mode": True}, OPEN, InvalidArgument, ".mode", "permission mode"),
        ({"type": "tmpfs", "target": "/t", "size_bytes": -1}, OPEN, InvalidArgument, ".size_bytes", "positive"),
        ({"type": "tmpfs", "target": "/t", "read_only": True}, OPEN, InvalidArgument, "", "read_only"),
        ({"type": "tmpfs", "target": "/run/agent"}, OPEN, InvalidArgument, ".target", "control path"),
        ({"type": "tmpfs", "target": "/run/agent/ssh.sock/x"}, OPEN, InvalidArgument, ".target", "control path"),
        ({"type": "tmpfs", "target": "/a//b"}, OPEN, InvalidArgument, ".target", "normalised"),
        ({"type": "tmpfs", "target": "/"}, OPEN, InvalidArgument, ".target", "not '/'"),
        ({"type": "tmpfs", "target": "/run/netns/x"}, OPEN, InvalidArgument, ".target", "/run/netns"),
        ({"type": "image", "target": "/etc/openshell-tls", "source": "a:1"}, OPEN, InvalidArgument, ".target",
         "reserved"),
        # each component is looked up in the image (mountlinks.py): no glob, at most DEPTH of them
        ({"type": "tmpfs", "target": "/data*"}, OPEN, InvalidArgument, ".target", "glob characters"),
        ({"type": "tmpfs", "target": "/a/b?"}, OPEN, InvalidArgument, ".target", "glob characters"),
        ({"type": "tmpfs", "target": "/a/[b]"}, OPEN, InvalidArgument, ".target", "glob characters"),
        ({"type": "tmpfs", "target": "/a\\b"}, OPEN, InvalidArgument, ".target", "glob characters"),
        ({"type": "tmpfs", "target": "/d" * (driverconfig.DEPTH + 1)}, OPEN, InvalidArgument, ".target",
         f"deeper than {driverconfig.DEPTH} directories"),
    ],
)
def test_refusals_name_the_field(
    mount: dict[str, Any], settings: Settings, error: type[Exception], field: str, needle: str
) -> None:
    with pytest.raises(error) as exc:
        parse(mount, settings=settings)
    message = exc.value.message  # type: ignore[attr-defined]
    assert message.startswith(f"{WHERE}{field}: "), message
    assert needle in message, message


@pytest.mark.parametrize(
    ("mount", "root"),
    [
        ({"type": "tmpfs", "target": "/proc"}, "/proc"),
        ({"type": "tmpfs", "target": "/proc/sys/kernel"}, "/proc"),
        ({"type": "bind", "source": "/srv/fake-proc", "target": "/proc/"}, "/proc"),
        ({"type": "tmpfs", "target": "/sys"}, "/sys"),
        ({"type": "tmpfs", "target": "/sys/fs"}, "/sys"),
        ({"type": "volume", "source": "v", "target": "/sys/fs/cgroup"}, "/sys"),
        ({"type": "tmpfs", "target": "/dev"}, "/dev"),
        ({"type": "tmpfs", "target": "/dev/shm"}, "/dev"),
        ({"type": "image", "source": "localhost/d:1", "target": "/dev/net"}, "/dev"),
    ],
)
def test_kernel_filesystems_are_reserved_targets(mount: dict[str, Any], root: str) -> None:
    """A mount at or under /proc, /sys or /dev would replace procfs, sysfs or the device
    nodes under the root supervisor: INVALID_ARGUMENT naming the target field."""
    with pytest.raises(InvalidArgument) as exc:
        parse(mount)
    target = mount["target"].rstrip("/")
    assert exc.value.message == f"{WHERE}.target: mount target {target!r} conflicts with reserved path {root!r}"


def test_unrelated_paths_are_not_reserved() -> None:
    """Overlap is by path segment: /etc/openshell-tools is not /etc/openshell, /devices is not /dev."""
    wanted = ["/etc/openshell-tools", "/run/agent-2", "/devices", "/system", "/process", "/srv/proc", "/home/dev"]
    targets = [m.target for m in parse(*({"type": "tmpfs", "target": t} for t in wanted))]
    assert targets == wanted


def test_a_target_as_deep_as_podmand_looks_is_fine() -> None:
    deepest = "/d" * driverconfig.DEPTH
    assert [m.target for m in parse({"type": "tmpfs", "target": deepest})] == [deepest]


def test_the_components_looked_up_for_all_targets_together_are_bounded() -> None:
    """Each distinct component of the targets is a request to Podman at create: 256 at most,
    shared ones counted once (the mounts are refused as a whole, naming the list)."""
    fits = [{"type": "tmpfs", "target": f"/t{i}" + "/d" * 31} for i in range(8)]  # 8 * 32 = 256
    assert len(parse(*fits)) == 8
    shared = [{"type": "tmpfs", "target": "/s" + "/d" * 30 + f"/x{i}"} for i in range(200)]  # 31 + 200
    assert len(parse(*shared)) == 200
    with pytest.raises(InvalidArgument) as exc:
        parse(*fits, {"type": "tmpfs", "target": "/one-more"})
    assert exc.value.message == (
        "sandbox.spec.template.driver_config.mounts: the targets have 257 distinct directories together, more "
        f"than {driverconfig.LOOKUPS} (podmand looks each up in the image)")


@pytest.mark.parametrize("outer", [
    {"type": "volume", "source": "v", "target": "/x"},
    {"type": "bind", "source": "/srv/x", "target": "/x"},
    {"type": "image", "source": "localhost/d:1", "target": "/x"},
])
def test_no_target_is_inside_a_volume_bind_or_image_mount(outer: dict[str, Any]) -> None:
    """A symbolic link in the outer mount's files (podmand cannot look there) would move the
    inner one: a link in a volume at /x, a/b/c/d -> /opt/openshell/bin, put a second volume at
    /x/a/b/c/d over the supervisor on Podman 4.3.1."""
    with pytest.raises(InvalidArgument) as exc:
        parse({"type": "tmpfs", "target": "/x/a/b/c/d"}, outer, settings=OPEN)
    assert exc.value.message == (
        f"sandbox.spec.template.driver_config.mounts[0].target: '/x/a/b/c/d' is inside mounts[1] ({outer['type']} "
        "at '/x'), whose files are not the image's: a symbolic link there would move it; podmand mounts nothing "
        "below a volume, bind or image mount")


def test_a_tmpfs_may_hold_other_mounts() -> None:
    mounts = parse({"type": "tmpfs", "target": "/x"}, {"type": "volume", "source": "v", "target": "/x/y"},
                   {"type": "tmpfs", "target": "/xy"})
    assert [m.target for m in mounts] == ["/x", "/x/y", "/xy"]


def test_ancestors_are_every_component_shallowest_first() -> None:
    assert driverconfig.ancestors("/a/b/c/d/e") == ["/a", "/a/b", "/a/b/c", "/a/b/c/d", "/a/b/c/d/e"]
    assert driverconfig.ancestors("/sandbox") == ["/sandbox"]
    assert driverconfig.ancestors("/") == []


def test_duplicate_targets_of_different_kinds() -> None:
    with pytest.raises(InvalidArgument) as exc:
        parse({"type": "tmpfs", "target": "/d"}, {"type": "volume", "source": "v", "target": "/d/"})
    assert exc.value.message.startswith("sandbox.spec.template.driver_config.mounts[1].target: duplicate")


def test_validate_passes_the_sandbox_userns_and_socket() -> None:
    """spec.validate hands drivercfg the sandbox's userns (the setting's auto here) and its SSH socket."""
    sandbox = pb.DriverSandbox(id="abc", name="n", spec=pb.DriverSandboxSpec(template=template(
        {"type": "image", "source": "localhost/d:1", "target": "/d"}),
        launch_authentication=make_launch("abc", "g0000000000000001")))
    with pytest.raises(FailedPrecondition, match="userns=auto"):
        spec.validate(sandbox, OPEN)
    sandbox.spec.template.user_namespaces = False
    plan = spec.validate(sandbox, Settings(
            allow_driver_config=True, admission_enabled=False, allow_host_userns=True))
    assert plan.mounts == (Mount("image", "/d", "localhost/d:1", True),)
    sandbox.spec.template.driver_config.update({"mounts": [{"type": "tmpfs", "target": "/run/openshell-x"},
                                                           {"type": "tmpfs", "target": "/run/sshd"}]})
    sandbox.spec.template.agent_socket_path = "/run/sshd/agent.sock"
    with pytest.raises(InvalidArgument, match=r"mounts\[1\]\.target: .*control path '/run/sshd/agent.sock'"):
        spec.validate(sandbox, Settings(
                allow_driver_config=True, admission_enabled=False, allow_host_userns=True))
