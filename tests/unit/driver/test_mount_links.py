"""Every mount's destination against the image's own files (issue 30): a symbolic link on
the way of the workspace, of podmand's own files or of a caller's mount target is refused,
at create when the image is present and has a WorkingDir of its own or the caller has mounts
(FAILED_PRECONDITION, nothing made), else while provisioning (ImageRefused, or MountRefused
for a caller's target). What is looked up is kept per image ID, path by path. In-process,
on the fake libpod, whose HEAD of the archive endpoint answers as Podman 4.3.1 does (the stat
in a base64 JSON header; real Podman: tests/e2e/test_workdir.py, tests/e2e/test_mountlinks.py)."""

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
from tests.jwt import make_launch

IMAGE = "registry.example/app:1"
DEADLINE = 30.0
DIRECTORY = (1 << 31) | 0o755  # Go's os.ModeDir | 0755, as the stat says of a directory
SYMLINK = (1 << 27) | 0o777  # Go's os.ModeSymlink | 0777
FILE = 0o644
OWN_ROOTS = ["/.openshell", "/opt", "/run"]  # where podmand's own destinations begin: absent from these images


def stat(name: str, mode: int, target: str) -> str:
    info = {"name": name, "size": 4096, "mode": mode, "mtime": "2026-12-06T06:38:28Z", "isDir": mode == DIRECTORY,
            "linkTarget": target}
    return base64.urlsafe_b64encode(json.dumps(info).encode()).decode()


def image_with(rig: Rig, working_dir: str, links: dict[str, str], dirs: tuple[str, ...] = (),
               files: tuple[str, ...] = (), volumes: tuple[str, ...] = ()) -> list[str]:
    """The image has ``working_dir``, the symbolic links ``links`` (path -> target), the
    directories ``dirs``, the files ``files`` and the VOLUMEs ``volumes``; what is looked at
    in it is listed in the answer, in order."""
    looked: list[str] = []
    config: dict[str, Any] = {"User": "1000:1000", **({"WorkingDir": working_dir} if working_dir else {})}
    if volumes:
        config["Volumes"] = {v: {} for v in volumes}
    rig.fake.route("GET", "/images/.+/json", (200, {}, {"Id": "sha256:img", "Config": config}))

    def head(req: Request) -> Reply:
        path = req.query["path"]
        looked.append(path)
        if path in links:
            return 200, {"X-Docker-Container-Path-Stat": stat(path, SYMLINK, links[path])}, b""
        if path in dirs or path in files:
            return 200, {"X-Docker-Container-Path-Stat": stat(path, DIRECTORY if path in dirs else FILE, path)}, b""
        return 404, {}, {"message": "no such file or directory", "response": 404}

    rig.fake.route("HEAD", "/containers/[^/]+/archive", head)
    return looked


def box(sandbox_id: str, *mounts: dict[str, Any]) -> pb.DriverSandbox:
    template = pb.DriverSandboxTemplate(image=IMAGE)
    if mounts:
        template.driver_config.update({"mounts": list(mounts)})
    spec = pb.DriverSandboxSpec(template=template, launch_authentication=make_launch(sandbox_id, "g0000000000000001"))
    return pb.DriverSandbox(id=sandbox_id, name="demo", workspace="ws", spec=spec)


def tmpfs(target: str) -> dict[str, Any]:
    return {"type": "tmpfs", "target": target}


def run(body: Any, **settings: Any) -> None:
    async def main() -> None:
        async with driver_on(lambda _t: Settings(**settings)) as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), DEADLINE))


def readers(rig: Rig) -> list[str]:
    return [n for n in rig.fake.created() if n.startswith(imagefiles.READER_PREFIX)]


def passwd_reads(rig: Rig) -> int:
    return rig.fake.count(r"GET .*/containers/podmand-read-[^/]+/archive\?path=/etc/passwd")


def test_a_deep_link_in_the_working_dir_is_refused_at_create_and_nothing_is_made() -> None:
    """/a/b/c/d/e -> /opt/openshell/bin: each component is looked at in one reader (and the
    first of podmand's own destinations), the link is named, no account file is read, the
    reader is removed, no record (volume) is made; a second create of that image needs no
    reader (the image ID's answer is kept), and neither does ValidateSandboxCreate, which
    refuses it too now."""

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
        # shallowest first: each round looks at the next component of every walk not ended yet
        assert looked == [*sorted(["/a", *OWN_ROOTS]), "/a/b", "/a/b/c", "/a/b/c/d", "/a/b/c/d/e"]
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
        assert [p for p in looked if p.startswith("/srv")] == ["/srv", "/srv/app"]

    run(body)


def test_validate_sandbox_create_makes_no_reader() -> None:
    async def body(rig: Rig) -> None:
        image_with(rig, "/a/b", {"/a": "/opt/openshell"})
        await rig.driver.validate(box("sb-1"))  # nothing read yet: nothing to refuse it with
        await rig.driver.validate(box("sb-1", tmpfs("/a/c")))
        assert rig.fake.created() == [] and rig.fake.count("/archive") == 0

    run(body, allow_driver_config=True)


def test_a_working_dir_without_links_is_read_once_for_the_create_and_its_provisioning() -> None:
    """Components that are directories, then missing ones (Podman makes those): accepted; the
    reader that looked at them read the account files too, and provisioning needs no other."""

    async def body(rig: Rig) -> None:
        looked = image_with(rig, "/workspace/project/sub", {}, ("/workspace",))
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: any(s == "sb-1" for _c, s in rig.sink.refreshes), "sb-1 started")
        # nothing below a missing one
        assert looked == ["/.openshell", "/opt", "/run", "/workspace", "/workspace/project"]
        assert passwd_reads(rig) == 1 and len(readers(rig)) == 2  # the accounts and links, and the runtime binary

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
        assert "/sandbox" in looked
        assert [n for n in rig.fake.created() if not n.startswith(imagefiles.READER_PREFIX)] == []

    run(body)


# ---------------------------------------------------------------- the caller's mount targets


@pytest.mark.parametrize("kind", ["tmpfs", "volume"])
def test_a_caller_mount_through_a_link_is_refused_at_create_naming_its_target(kind: str) -> None:
    """A caller's target /a/b/c/d/e with /a/b/c/d/e -> /opt/openshell/bin in the image: Podman
    would mount it over the runtime binary. FAILED_PRECONDITION naming mounts[1].target, the image
    and the link; nothing made, the reader removed; ValidateSandboxCreate refuses it too."""

    async def body(rig: Rig) -> None:
        image_with(rig, "", {"/a/b/c/d/e": "/opt/openshell/bin"}, ("/a", "/a/b", "/a/b/c", "/a/b/c/d"))
        rig.fake.volumes["v1"] = {"Name": "v1", "Labels": {}}
        mount = tmpfs("/a/b/c/d/e") if kind == "tmpfs" else {"type": "volume", "source": "v1", "target": "/a/b/c/d/e"}
        request = box("sb-1", tmpfs("/scratch"), mount)
        for attempt in (rig.driver.create, rig.driver.validate):
            with pytest.raises(FailedPrecondition) as exc:
                await attempt(request)
            assert exc.value.message == (
                "sandbox.spec.template.driver_config.mounts[1].target: '/a/b/c/d/e' passes through '/a/b/c/d/e', a "
                f"symbolic link in image {IMAGE}; podmand mounts only on the image's own directories"
            )
        assert len(readers(rig)) == 1 and passwd_reads(rig) == 0 and not imagefiles.ACTIVE
        assert list(rig.fake.volumes) == ["v1"] and rig.driver.files.sandbox_ids() == []

    run(body, allow_driver_config=True, admission_enabled=False)


def test_each_path_is_looked_up_once_per_image_and_only_new_ones_need_a_reader() -> None:
    """The answers are kept per path: a second create whose only new target is /data/cache
    looks at that alone (and /data/cache/x under it not at all: absent); a third asking the
    same makes no reader."""

    async def body(rig: Rig) -> None:
        looked = image_with(rig, "", {}, ("/data",))
        await rig.driver.create(box("sb-1", tmpfs("/data")))
        assert sorted(looked) == ["/.openshell", "/data", "/opt", "/run", "/sandbox"]
        looked.clear()
        await rig.driver.create(box("sb-2", tmpfs("/data/cache/x")))
        assert looked == ["/data/cache"]
        await rig.driver.create(box("sb-3", tmpfs("/data/cache/x")))
        assert looked == ["/data/cache"] and passwd_reads(rig) == 1
        await eventually(lambda: {s for _c, s in rig.sink.refreshes} >= {"sb-1", "sb-2", "sb-3"}, "all started")
        assert len(readers(rig)) == 3  # sb-1's, sb-2's and the runtime binary's

    run(body, allow_driver_config=True)


def test_a_target_under_a_file_of_the_image_ends_its_walk() -> None:
    async def body(rig: Rig) -> None:
        looked = image_with(rig, "", {}, ("/srv",), ("/srv/file",))
        await rig.driver.create(box("sb-1", tmpfs("/srv/file/x/y")))
        assert [p for p in looked if p.startswith("/srv")] == ["/srv", "/srv/file"]

    run(body, allow_driver_config=True)


def test_a_caller_mount_through_a_link_in_an_image_pulled_later_fails_provisioning_as_mount_refused() -> None:
    """The image is not here at create (nothing to read): pulled while provisioning, then
    read, and the link on the caller's target is the terminal MountRefused; no container."""

    async def body(rig: Rig) -> None:
        image_with(rig, "", {"/a": "/opt/openshell"})
        pulled: list[bool] = []
        present = (200, {}, {"Id": "sha256:img", "Config": {"User": "1000:1000"}})

        def inspect(req: Request) -> Reply:
            if "openshell" in req.path or pulled:  # the supervisor and runtime images are here
                return present
            return 404, {}, {"message": "no such image", "response": 404}

        def pull(req: Request) -> Reply:
            pulled.append(True)
            return 200, {"Transfer-Encoding": "chunked"}, b'{"stream":"pulling"}\n{"id":"sha256:img"}\n'

        rig.fake.route("GET", "/images/.+/json", inspect)
        rig.fake.route("POST", "/images/pull", pull)
        await rig.driver.create(box("sb-1", tmpfs("/a/b")))
        await eventually(lambda: "MountRefused" in rig.sink.reasons(), "the refusal")
        snap = await rig.driver.get("sb-1")
        assert snap.status.conditions[0].message == (
            "sandbox.spec.template.driver_config.mounts[0].target: '/a/b' passes through '/a', a symbolic link in "
            f"image {IMAGE}; podmand mounts only on the image's own directories"
        )
        assert [n for n in rig.fake.created() if not n.startswith(imagefiles.READER_PREFIX)] == []

    run(body, allow_driver_config=True)


# ---------------------------------------------------------------- podmand's own destinations


def test_a_link_on_the_way_of_podmands_own_files_fails_provisioning_as_image_refused() -> None:
    """/opt/openshell -> /srv/os: the runtime binary's bind would land at /srv/os/bin, where a
    deeper mount could cover it. No WorkingDir, no mounts: found while provisioning."""

    async def body(rig: Rig) -> None:
        image_with(rig, "", {"/opt/openshell": "/srv/os"}, ("/opt",))
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: "ImageRefused" in rig.sink.reasons(), "the refusal")
        snap = await rig.driver.get("sb-1")
        assert snap.status.conditions[0].message == (
            f"sandbox.spec.template.image: {IMAGE}: '/opt/openshell' is a symbolic link in the image, on the way "
            "to OpenShell's '/opt/openshell/bin/openshell-sandbox'; podmand mounts only on the image's own "
            "directories"
        )
        assert [n for n in rig.fake.created() if not n.startswith(imagefiles.READER_PREFIX)] == []
        with pytest.raises(FailedPrecondition, match="'/opt/openshell' is a symbolic link in the image"):
            await rig.driver.create(box("sb-2"))  # known now: refused at create

    run(body)


@pytest.mark.parametrize("link", ["/.openshell/channel", "/opt/openshell/bin", "/run/openshell-supervisor-ca"])
def test_every_own_destination_is_walked(link: str) -> None:
    async def body(rig: Rig) -> None:
        parents = tuple(link.rsplit("/", i)[0] for i in range(1, link.count("/")))
        image_with(rig, "/work", {link: "/work"}, parents)
        with pytest.raises(FailedPrecondition, match=f"'{link}' is a symbolic link in the image, on the way to"):
            await rig.driver.create(box("sb-1"))

    run(body)


# ---------------------------------------------------------------- the image's VOLUMEs, and one mount inside another


def test_an_image_volume_through_a_link_fails_provisioning_as_image_refused() -> None:
    """VOLUME /a/b/c/d/e with /a/b/c/d/e -> /opt/openshell/bin: Podman would put the anonymous
    volume (a copy of the image's files there) over the runtime binary."""

    async def body(rig: Rig) -> None:
        image_with(rig, "", {"/a/b/c/d/e": "/opt/openshell/bin"}, ("/a", "/a/b", "/a/b/c", "/a/b/c/d"),
                   volumes=("/a/b/c/d/e",))
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: "ImageRefused" in rig.sink.reasons(), "the refusal")
        snap = await rig.driver.get("sb-1")
        assert snap.status.conditions[0].message == (
            f"sandbox.spec.template.image: {IMAGE}: '/a/b/c/d/e' is a symbolic link in the image, on the way to "
            "its VOLUME '/a/b/c/d/e'; podmand mounts only on the image's own directories"
        )
        assert [n for n in rig.fake.created() if not n.startswith(imagefiles.READER_PREFIX)] == []

    run(body)


def test_a_caller_mount_inside_the_workspace_is_refused_at_create_without_a_reader() -> None:
    async def body(rig: Rig) -> None:
        image_with(rig, "/workspace/project", {}, ("/workspace",))
        request = box("sb-1", tmpfs("/workspace/project/cache"))
        for attempt in (rig.driver.validate, rig.driver.create):
            with pytest.raises(FailedPrecondition) as exc:
                await attempt(request)
            assert exc.value.message.startswith(
                "sandbox.spec.template.driver_config.mounts[0].target: mounts[0] (tmpfs at '/workspace/project/cache') "
                "would be mounted inside the workspace at '/workspace/project', whose files are not the image's")
        assert rig.fake.created() == [] and rig.driver.files.sandbox_ids() == []

    run(body, allow_driver_config=True)


def test_a_working_dir_inside_an_image_volume_is_refused_at_create() -> None:
    async def body(rig: Rig) -> None:
        image_with(rig, "/home/app/project", {}, volumes=("/home/app",))
        with pytest.raises(FailedPrecondition) as exc:
            await rig.driver.create(box("sb-1"))
        assert exc.value.message.startswith(
            f"sandbox.spec.template.image: {IMAGE}: the workspace at '/home/app/project' would be mounted inside its "
            "VOLUME '/home/app'")
        assert rig.fake.created() == []

    run(body)
