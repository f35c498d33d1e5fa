"""The workspace's path against the image's own files (issue 30, item 3): a symbolic link
anywhere on it is refused, at create when the image is present and has a WorkingDir of its
own (FAILED_PRECONDITION, nothing made), else while provisioning (ImageRefused). In-process,
on the fake libpod, whose HEAD of the archive endpoint answers as Podman 4.3.1 does (the stat
in a base64 JSON header; real Podman: tests/e2e/test_workdir.py)."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.errors import FailedPrecondition
from podmand.sandbox import imagefiles
from tests.fakes.harness import Rig, driver_on, eventually
from tests.fakes.libpod import Reply, Request

IMAGE = "registry.example/app:1"
DEADLINE = 30.0
DIRECTORY = (1 << 31) | 0o755  # Go's os.ModeDir | 0755, as the stat says of a directory
SYMLINK = (1 << 27) | 0o777  # Go's os.ModeSymlink | 0777


def stat(name: str, mode: int, target: str) -> str:
    info = {"name": name, "size": 4096, "mode": mode, "mtime": "2026-12-06T06:38:28Z", "isDir": True,
            "linkTarget": target}
    return base64.urlsafe_b64encode(json.dumps(info).encode()).decode()


def image_with(rig: Rig, working_dir: str, links: dict[str, str], dirs: tuple[str, ...] = ()) -> list[str]:
    """The image has ``working_dir``, the symbolic links ``links`` (path -> target) and the
    directories ``dirs``; what is looked at in it is listed in the answer, in order."""
    looked: list[str] = []
    config = {"User": "1000:1000", **({"WorkingDir": working_dir} if working_dir else {})}
    rig.fake.route("GET", "/images/.+/json", (200, {}, {"Id": "sha256:img", "Config": config}))

    def head(req: Request) -> Reply:
        path = req.query["path"]
        looked.append(path)
        if path in links:
            return 200, {"X-Docker-Container-Path-Stat": stat(path, SYMLINK, links[path])}, b""
        if path in dirs:
            return 200, {"X-Docker-Container-Path-Stat": stat(path, DIRECTORY, path)}, b""
        return 404, {}, {"message": "no such file or directory", "response": 404}

    rig.fake.route("HEAD", "/containers/[^/]+/archive", head)
    return looked


def box(sandbox_id: str) -> pb.DriverSandbox:
    template = pb.DriverSandboxTemplate(image=IMAGE)
    return pb.DriverSandbox(id=sandbox_id, name="demo", workspace="ws", spec=pb.DriverSandboxSpec(template=template))


def run(body: Any) -> None:
    async def main() -> None:
        async with driver_on(lambda _t: Settings()) as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), DEADLINE))


def test_a_deep_link_in_the_working_dir_is_refused_at_create_and_nothing_is_made() -> None:
    """/a/b/c/d/e -> /opt/openshell/bin: each component is looked at in one reader, the link
    is named, no account file is read, the reader is removed, no record (volume) is made; a
    second create of that image needs no reader (the image ID's answer is kept), and neither
    does ValidateSandboxCreate, which refuses it too now."""

    async def body(rig: Rig) -> None:
        dirs = ("/a", "/a/b", "/a/b/c", "/a/b/c/d")
        looked = image_with(rig, "/a/b/c/d/e", {"/a/b/c/d/e": "/opt/openshell/bin"}, dirs)
        for sandbox_id in ("sb-1", "sb-2"):
            with pytest.raises(FailedPrecondition) as exc:
                await rig.driver.create(box(sandbox_id))
            assert exc.value.message == (
                f"sandbox.spec.template.image: {IMAGE}: WorkingDir '/a/b/c/d/e' passes through '/a/b/c/d/e', a "
                "symbolic link in the image; podmand mounts the workspace only on the image's own directories"
            )
        with pytest.raises(FailedPrecondition, match="passes through '/a/b/c/d/e'"):
            await rig.driver.validate(box("sb-3"))
        assert looked == ["/a", "/a/b", "/a/b/c", "/a/b/c/d", "/a/b/c/d/e"]
        [reader] = rig.fake.created()
        assert reader.startswith(imagefiles.READER_PREFIX)
        assert rig.fake.count(f"DELETE .*/containers/{reader}") == 1 and rig.fake.count("/archive") == len(looked)
        assert rig.fake.volumes == {} and rig.driver.files.sandbox_ids() == []
        assert not imagefiles.ACTIVE

    run(body)


def test_a_link_higher_up_is_found_and_nothing_below_it_is_looked_at() -> None:
    async def body(rig: Rig) -> None:
        looked = image_with(rig, "/srv/app/data", {"/srv/app": "/etc/openshell"}, ("/srv",))
        with pytest.raises(FailedPrecondition, match="WorkingDir '/srv/app/data' passes through '/srv/app'"):
            await rig.driver.create(box("sb-1"))
        assert looked == ["/srv", "/srv/app"]

    run(body)


def test_validate_sandbox_create_makes_no_reader() -> None:
    async def body(rig: Rig) -> None:
        image_with(rig, "/a/b", {"/a": "/opt/openshell"})
        await rig.driver.validate(box("sb-1"))  # nothing read yet: nothing to refuse it with
        assert rig.fake.created() == [] and rig.fake.count("/archive") == 0

    run(body)


def test_a_working_dir_without_links_is_read_once_for_the_create_and_its_provisioning() -> None:
    """Components that are directories, then missing ones (Podman makes those): accepted; the
    reader that looked at them read the account files too, and provisioning needs no other."""

    async def body(rig: Rig) -> None:
        looked = image_with(rig, "/workspace/project/sub", {}, ("/workspace",))
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: any(s == "sb-1" for _c, s in rig.sink.refreshes), "sb-1 started")
        assert looked == ["/workspace", "/workspace/project"]  # nothing below a missing one
        readers = [n for n in rig.fake.created() if n.startswith(imagefiles.READER_PREFIX)]
        passwd = rig.fake.count(r"GET .*/containers/podmand-read-[^/]+/archive\?path=/etc/passwd")
        assert passwd == 1 and len(readers) == 2  # the accounts and links, and the supervisor binary

    run(body)


def test_a_link_at_the_default_sandbox_path_fails_provisioning_as_image_refused() -> None:
    """No WorkingDir: the workspace is /sandbox, looked at when the image is read while
    provisioning; a link there is the terminal ImageRefused, and no container is made."""

    async def body(rig: Rig) -> None:
        looked = image_with(rig, "", {"/sandbox": "/usr/bin"})
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: "ImageRefused" in rig.sink.reasons(), "the refusal")
        snap = await rig.driver.get("sb-1")
        assert snap.status.conditions[0].message == (
            f"sandbox.spec.template.image: {IMAGE}: the workspace '/sandbox' (no WorkingDir) passes through "
            "'/sandbox', a symbolic link in the image; podmand mounts the workspace only on the image's own "
            "directories"
        )
        assert looked == ["/sandbox"]
        assert [n for n in rig.fake.created() if not n.startswith(imagefiles.READER_PREFIX)] == []

    run(body)
