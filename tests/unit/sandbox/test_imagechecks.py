"""podmand.sandbox.imagechecks: what an image may not bring into a sandbox."""

from __future__ import annotations

import pytest

from podmand import names
from podmand.libpod import ImageConfig, ImageInspect
from podmand.sandbox import imagechecks, requestchecks, rootfs


@pytest.mark.parametrize(
    ("ref", "private"),
    [
        ("localhost/podmand-rootfs:victim", True),
        ("podmand-rootfs:victim", True),  # a short name: Podman finds the local image
        ("podmand-rootfs", True),
        ("localhost/podmand-rootfs@sha256:" + "a" * 64, True),
        ("localhost/podmand-rootfs:v@sha256:" + "a" * 64, True),
        ("docker.io/library/podmand-rootfs:x", False),  # another registry's image of that name
        ("localhost/podmand-rootfsx:victim", False),
        ("localhost:5000/podmand-rootfs:victim", False),
        ("alpine:3.20", False),
    ],
)
def test_references_to_imported_rootfs_images_are_recognised(ref: str, private: bool) -> None:
    assert imagechecks.names_private_rootfs(ref) is private
    assert (imagechecks.reference_refusal(ref) is not None) is private


def image(tags: list[str] | None = None, labels: dict[str, str] | None = None) -> ImageInspect:
    return ImageInspect(id="sha256:" + "b" * 64, config=ImageConfig(labels=labels), repo_tags=tags)


def test_an_imported_rootfs_runs_only_in_the_sandbox_that_imported_it() -> None:
    mine, theirs = rootfs.reference("mine"), rootfs.reference("theirs")
    assert imagechecks.rootfs_refusal(image([mine]), mine) is None
    assert imagechecks.rootfs_refusal(image([mine, theirs]), mine) is None  # the same tar imported twice
    why = imagechecks.rootfs_refusal(image([theirs]), mine)
    assert why is not None and theirs in why and "only by the sandbox that imported it" in why
    assert imagechecks.rootfs_refusal(image([theirs])) is not None  # reached by ID or an ID prefix
    assert imagechecks.rootfs_refusal(image(["localhost/other:1"])) is None
    assert imagechecks.rootfs_refusal(image(None)) is None


def test_images_whose_labels_would_pose_as_a_sandbox_are_refused() -> None:
    assert imagechecks.label_refusal(image(labels={"maintainer": "me"})) is None
    assert imagechecks.label_refusal(image(labels=None)) is None
    why = imagechecks.label_refusal(image(labels={"a": "b", names.SANDBOX_ID: "victim", names.MANAGED: "true"}))
    assert why is not None and repr(names.SANDBOX_ID) in why and "victim" not in why  # the first, sorted
    assert imagechecks.label_refusal(image(labels={"io.podmand.owner": "podmand"})) is not None


def test_image_labels_are_held_to_the_bounds_of_template_labels() -> None:
    big = {f"k{i}": "v" * requestchecks.MAX_LABEL_VALUE for i in range(20)}  # 80 KiB > 64 KiB
    why = imagechecks.label_refusal(image(labels=big))
    assert why is not None and "KiB" in why
    huge = imagechecks.label_refusal(image(labels={"k": "v" * (requestchecks.MAX_LABEL_VALUE + 1)}))
    assert huge is not None and "longer than" in huge


def test_a_request_naming_an_imported_rootfs_is_refused_naming_the_field() -> None:
    from podmand._proto import compute_driver_pb2 as pb
    from podmand.config import Settings
    from podmand.errors import InvalidArgument
    from podmand.sandbox import spec
    from tests.jwt import make_launch

    box = pb.DriverSandbox(id="attacker", name="n", spec=pb.DriverSandboxSpec(
        launch_authentication=make_launch("attacker", "g0000000000000001")))
    box.spec.template.image = "podmand-rootfs:victim"
    with pytest.raises(InvalidArgument, match=r"^sandbox\.spec\.template\.image: .*only by the sandbox"):
        spec.validate(box, Settings())
    box.spec.template.image = "alpine"
    box.spec.template.driver_config.update(
        {"mounts": [{"type": "image", "source": "localhost/podmand-rootfs:victim", "target": "/data"}]}
    )
    with pytest.raises(InvalidArgument, match=r"^sandbox\.spec\.template\.driver_config\.mounts\[0\]\.source: "):
        spec.validate(box, Settings(allow_driver_config=True))
