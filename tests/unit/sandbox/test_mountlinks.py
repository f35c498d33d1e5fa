"""Unit tests for podmand.sandbox.mountlinks: which destinations are walked in the image,
what is still to be looked at, and the refusal of one through a symbolic link."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.errors import FailedPrecondition
from podmand.pair import specs
from podmand.sandbox import mountlinks, ownmounts, spec
from podmand.sandbox.driverconfig import Mount
from podmand.sandbox.identity import Resolved
from podmand.sandbox.mountlinks import ABSENT, FILE, HERE, LINK, Walk
from podmand.sandbox.plan import Provision

IMAGE = "localhost/app:1"


def test_walks_are_podmands_own_destinations_the_workspace_and_each_caller_target_in_order() -> None:
    mounts = (Mount("tmpfs", "/scratch"), Mount("volume", "/data", "v"))
    walks = mountlinks.walks("/workspace", mounts)
    own = [w.path for w in walks if w.whose == "own"]
    assert own == list(ownmounts.destinations())
    assert walks[len(own):] == [Walk("/workspace", "workspace"), Walk("/scratch", "caller", 0, "tmpfs"),
                                Walk("/data", "caller", 1, "volume")]


@pytest.mark.parametrize(("tls", "proxy"), list(itertools.product([False, True], repeat=2)))
def test_every_destination_podmand_mounts_in_the_workload_is_walked_whatever_the_settings(
    tls: bool, proxy: bool, tmp_path: Path
) -> None:
    """ownmounts.destinations lists podmand's own mounts in the workload (pair.specs), under any
    settings: the runtime binary, the channel volume and the proxy CA's tmpfs. Not its
    /etc/resolv.conf, a file Podman binds in place of the image's whatever that is; the TLS and
    proxy files are the supervisor's, in its own image."""
    files = {"proxy_auth_file": str(tmp_path / "auth"), "proxy_ca_bundle": str(tmp_path / "ca")} if proxy else {}
    settings = Settings(tls_ca="/tls/ca.crt" if tls else "", **files)  # type: ignore[arg-type]
    sandbox = pb.DriverSandbox(id="abc123", name="demo", spec=pb.DriverSandboxSpec())
    plan = spec.validate(sandbox, settings, recorded=True)
    identity = Resolved(uid=1000, gid=1000, supplementary=(), source="image", digest="sha256:feed")
    prov = Provision(image_id="sha256:feed", image_user="", image_env=(), network="", supervisor_path="/state/bin",
                     secrets_dir="/state/s", instance="i", identity=identity)
    built = specs.workload_spec(plan, settings, prov, rootless=False)
    made = {m["destination"] for m in built["mounts"]} | {v["Dest"] for v in built["volumes"]}
    assert made - {names.RESOLV_CONF, names.WORKSPACE_PATH} == set(ownmounts.destinations())


def test_a_walk_ends_at_a_link_an_absent_component_or_a_file() -> None:
    known = {"/a": HERE, "/a/b": LINK, "/x": ABSENT, "/f": FILE, "/d": HERE}
    assert mountlinks.first_link("/a/b/c", known) == "/a/b"
    assert mountlinks.first_link("/a/b", known) == "/a/b"
    assert mountlinks.first_link("/x/y/z", known) == ""
    assert mountlinks.first_link("/f/g", known) == ""
    assert mountlinks.first_link("/d", known) == ""
    assert mountlinks.first_link("/d/e", known) is None  # not known yet
    assert mountlinks.first_link("/a/c", known) is None


def test_what_to_look_at_next_is_the_first_unknown_component_of_each_open_walk_once() -> None:
    known = {"/a": HERE, "/x": ABSENT}
    assert mountlinks.to_look(["/a/b/c", "/a/b/d", "/x/y", "/q/r"], known) == ["/a/b", "/q"]
    assert mountlinks.to_look(["/a"], known) == []
    assert mountlinks.to_look([], {}) == []


def test_found_names_the_first_walk_through_a_known_link_and_answered_says_all_are_known() -> None:
    walks = mountlinks.walks("/sandbox", (Mount("tmpfs", "/a/b/c"),))
    known = {"/etc": HERE, "/etc/openshell": ABSENT, "/opt": ABSENT, "/run": HERE, "/run/netns": ABSENT,
             "/run/openshell-supervisor-ca": ABSENT, "/.openshell": ABSENT, "/sandbox": HERE}
    assert mountlinks.found(walks, known) is None and not mountlinks.answered(walks, known)
    known["/a"] = HERE
    known["/a/b"] = LINK
    assert mountlinks.found(walks, known) == (Walk("/a/b/c", "caller", 0, "tmpfs"), "/a/b")
    assert mountlinks.answered(walks, known)
    known["/opt"] = LINK  # podmand's own come first
    assert mountlinks.found(walks, known) == (Walk("/opt/openshell/bin/openshell-sandbox", "own"), "/opt")


def test_each_refusal_names_its_field_the_image_and_the_link() -> None:
    caller = mountlinks.refusal(IMAGE, "", Walk("/a/b/c/d/e", "caller", 2), "/a/b/c/d/e")
    assert caller.message == (
        "sandbox.spec.template.driver_config.mounts[2].target: '/a/b/c/d/e' passes through '/a/b/c/d/e', a "
        f"symbolic link in image {IMAGE}; podmand mounts only on the image's own directories"
    )
    own = mountlinks.refusal(IMAGE, "", Walk("/etc/openshell/auth/sandbox.jwt", "own"), "/etc/openshell")
    assert own.message == (
        f"sandbox.spec.template.image: {IMAGE}: '/etc/openshell' is a symbolic link in the image, on the way to "
        "OpenShell's '/etc/openshell/auth/sandbox.jwt'; podmand mounts only on the image's own directories"
    )
    work = mountlinks.refusal(IMAGE, "/a/b", Walk("/a/b", "workspace"), "/a")
    assert work.message.startswith(f"sandbox.spec.template.image: {IMAGE}: WorkingDir '/a/b' passes through '/a'")


# ---------------------------------------------------------------- the image's VOLUMEs, and one mount inside another


def test_image_volumes_are_placed_as_podman_cleans_them() -> None:
    declared = {"/data/": {}, "//cache//x/../y": {}, "/data": {}, "/srv/./app": {}}
    assert mountlinks.image_volumes(IMAGE, declared) == ["/cache/y", "/data", "/srv/app"]
    assert mountlinks.image_volumes(IMAGE, None) == []


@pytest.mark.parametrize(
    ("volume", "needle"),
    [("data", "VOLUME 'data' is not an absolute path"), ("/", "VOLUME '/' is '/'"), ("/a/..", "VOLUME '/a/..' is '/'"),
     ("/d*", "VOLUME '/d*' is '/', has glob characters"), ("/d" * 33, "deeper than 32 directories")],
)
def test_an_image_volume_podmand_cannot_look_up_refuses_the_image(volume: str, needle: str) -> None:
    with pytest.raises(FailedPrecondition) as exc:
        mountlinks.image_volumes(IMAGE, {volume: {}})
    assert exc.value.message.startswith(f"sandbox.spec.template.image: {IMAGE}: VOLUME "), exc.value.message
    assert needle in exc.value.message


def test_the_components_of_an_images_volumes_are_bounded() -> None:
    fits = {f"/v{i}" + "/d" * 31: {} for i in range(8)}  # 256
    assert len(mountlinks.image_volumes(IMAGE, fits)) == 8
    with pytest.raises(FailedPrecondition, match="its VOLUMEs have more than 256 distinct directories"):
        mountlinks.image_volumes(IMAGE, {**fits, "/one-more": {}})


def test_walks_take_the_image_volumes_no_other_mount_replaces() -> None:
    walks = mountlinks.walks("/work", (Mount("tmpfs", "/data"),), ["/data", "/work", "/cache", "/run/netns"])
    assert [w for w in walks if w.whose == "volume"] == [Walk("/cache", "volume"), Walk("/run/netns", "volume")]


@pytest.mark.parametrize(
    ("workdir", "mounts", "volumes", "inner", "outer"),
    [
        ("/w", (Mount("tmpfs", "/w/cache"),), (), "/w/cache", "/w"),  # inside the workspace
        ("/sandbox", (), ("/data", "/data/a/b"), "/data/a/b", "/data"),  # a VOLUME inside a VOLUME
        ("/home/app/project", (), ("/home/app",), "/home/app/project", "/home/app"),  # the workspace in a VOLUME
        ("/sandbox", (), ("/opt",), "/opt/openshell/bin/openshell-sandbox", "/opt"),  # podmand's files in one
        ("/sandbox", (Mount("volume", "/x", "v"),), ("/x/y",), "/x/y", "/x"),  # a VOLUME in a caller's volume
        ("/sandbox", (Mount("tmpfs", "/t/u"),), ("/t",), "/t/u", "/t"),  # a caller's tmpfs in a VOLUME
    ],
)
def test_nothing_is_mounted_inside_a_mount_whose_files_are_not_the_images(
    workdir: str, mounts: tuple[Mount, ...], volumes: tuple[str, ...], inner: str, outer: str
) -> None:
    found = mountlinks.nested(mountlinks.walks(workdir, mounts, volumes))
    assert found is not None and (found[0].path, found[1].path) == (inner, outer)


def test_a_tmpfs_may_hold_other_mounts_and_siblings_are_fine() -> None:
    mounts = (Mount("tmpfs", "/t"), Mount("tmpfs", "/t/u"), Mount("volume", "/t/v", "vol"), Mount("bind", "/tt", "/s"))
    assert mountlinks.nested(mountlinks.walks("/work", mounts, ["/data", "/data2", "/workspace"])) is None


def test_a_mount_inside_another_is_refused_naming_the_callers_target_else_the_image() -> None:
    walks = mountlinks.walks("/w", (Mount("volume", "/x", "v"),), ["/x/y", "/w2"])
    caller_outer = mountlinks.nested_refusal(IMAGE, Walk("/x/y", "volume"), Walk("/x", "caller", 0, "volume"))
    assert caller_outer.message == (
        f"sandbox.spec.template.driver_config.mounts[0].target: image {IMAGE}'s VOLUME '/x/y' would be mounted "
        "inside mounts[0] (volume at '/x'), whose files are not the image's: a symbolic link there would move it; "
        "podmand mounts nothing below a volume, bind or image mount"
    )
    inside_workspace = mountlinks.nested_refusal(IMAGE, Walk("/w/c", "caller", 2, "tmpfs"), walks[len(walks) - 4])
    assert inside_workspace.message.startswith(
        "sandbox.spec.template.driver_config.mounts[2].target: mounts[2] (tmpfs at '/w/c') would be mounted inside "
        "the workspace at '/w'")
    own = mountlinks.nested_refusal(IMAGE, Walk("/etc/openshell/auth/sandbox.jwt", "own"), Walk("/etc", "volume"))
    assert own.message.startswith(
        f"sandbox.spec.template.image: {IMAGE}: OpenShell's '/etc/openshell/auth/sandbox.jwt' would be mounted "
        "inside its VOLUME '/etc'")
    volume_link = mountlinks.refusal(IMAGE, "", Walk("/a/b/c/d/e", "volume"), "/a/b/c/d/e")
    assert volume_link.message == (
        f"sandbox.spec.template.image: {IMAGE}: '/a/b/c/d/e' is a symbolic link in the image, on the way to its "
        "VOLUME '/a/b/c/d/e'; podmand mounts only on the image's own directories"
    )
