"""Unit tests for podmand.sandbox.rootfs: which staged paths are taken, and what a slot is."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from podmand import names, negotiation
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.driver import Driver
from podmand.driver.pending import Pending
from podmand.errors import AlreadyExists, ConfigError, FailedPrecondition, InvalidArgument
from podmand.host import enforcement
from podmand.sandbox import driverconfig, rootfs, snapshots, spec
from podmand.sandbox.plan import Plan
from podmand.sandbox.snapshots import Condition
from tests.fakes import harness
from tests.fakes.libpod import FakeLibpod
from tests.jwt import make_launch

ROOT = "/srv/staging"
GENERATION = "g0000000000000001"
ON = Settings(rootfs_staging_dir=ROOT, rootfs_max_bytes=1024)
SLOT = "req-0b6c2e57-3a1f-4c2d-9e8f-1a2b3c4d5e6f"  # as the gateway names one: req- and a lowercase UUID
TAR = f"{ROOT}/{SLOT}/rootfs.tar"


def new_slot() -> str:
    return f"req-{uuid.uuid4()}"


def staged_in(tmp_path: Path, max_bytes: int = 1024) -> Settings:
    root = tmp_path / "staging"
    root.mkdir(exist_ok=True)
    return Settings(rootfs_staging_dir=str(root), rootfs_max_bytes=max_bytes)


SHAPE = "must name a file directly in a slot the gateway staged, /srv/staging/req-<uuid>/<file>"
FILE_NAME = "the file name in the slot must be at most 128 bytes"


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (f"{SLOT}/rootfs.tar", "must be an absolute path"),
        (7, "must be an absolute path"),
        (f"/srv/staging/{SLOT}/../../etc/shadow", "must be normalised"),
        (f"/srv/staging/./{SLOT}/rootfs.tar", "must be normalised"),
        (f"/srv/staging//{SLOT}/rootfs.tar", "must be normalised"),
        (f"/srv/staging/{SLOT}/", "must be normalised"),
        ("/srv/staging/req\n1/rootfs.tar", "must be an absolute path"),
        ("/srv/staging", "must be inside the rootfs staging directory /srv/staging"),
        (f"/srv/staging-evil/{SLOT}/rootfs.tar", "must be inside the rootfs staging directory"),
        ("/etc/shadow", "must be inside the rootfs staging directory"),
        # Anything but the gateway's own shape: a refused create deletes what the path names.
        ("/srv/staging/rootfs.tar", SHAPE),
        ("/srv/staging/victimdir/x.tar", SHAPE),
        (f"/srv/staging/{SLOT}", SHAPE),
        (f"/srv/staging/{SLOT}/sub/x.tar", SHAPE),
        ("/srv/staging/req-1/rootfs.tar", SHAPE),
        (f"/srv/staging/{SLOT.upper().replace('REQ-', 'req-')}/rootfs.tar", SHAPE),
        (f"/srv/staging/req-{uuid.UUID(SLOT[4:]).hex}/rootfs.tar", SHAPE),
        (f"/srv/staging/{{{SLOT[4:]}}}/rootfs.tar", SHAPE),
        (f"/srv/staging/{SLOT}x/rootfs.tar", SHAPE),
        (f"/srv/staging/{SLOT}/.driver-request-pending", FILE_NAME),
        (f"/srv/staging/{SLOT}/a\\b.tar", FILE_NAME),
        (f"/srv/staging/{SLOT}/" + "x" * 129, FILE_NAME),
    ],
)
def test_paths_refused_before_the_filesystem_is_asked(value: object, needle: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        rootfs.check_path(value, ON)
    assert exc.value.message.startswith(f"{rootfs.WHERE}: ") and needle in exc.value.message


def test_a_file_in_a_gateway_slot_is_taken() -> None:
    assert rootfs.check_path(TAR, ON) == TAR
    for name in ("x" * 128, "é" * 64, "rootfs.tar.gz", "my rootfs (1).tar"):
        assert rootfs.check_path(f"{ROOT}/{SLOT}/{name}", ON) == f"{ROOT}/{SLOT}/{name}"
    with_slash = Settings(rootfs_staging_dir=ROOT + "/", rootfs_max_bytes=1024)
    assert rootfs.check_path(TAR, with_slash) == TAR


@pytest.mark.parametrize("settings", [Settings(
        rootfs_max_bytes=0, rootfs_staging_dir=ROOT), Settings()])
def test_disabled_or_unprepared_is_a_failed_precondition(settings: Settings) -> None:
    with pytest.raises(FailedPrecondition) as exc:
        rootfs.check_path(TAR, settings)
    assert "rootfs tar sources are not supported" in exc.value.message


@pytest.mark.parametrize(
    ("path", "slot"),
    [
        (TAR, f"/srv/staging/{SLOT}"),
        (f"/srv/staging/{SLOT}/deeper/rootfs.tar", None),
        ("/srv/staging/req-1/rootfs.tar", None),
        ("/srv/staging/rootfs.tar", None),
        (f"/srv/staging-evil/{SLOT}/rootfs.tar", None),
        ("/srv/staging", None),
        ("/srv/staging/../x", None),
        ("/tmp/rootfs.tar", None),
    ],
)
def test_slot_is_the_gateway_directory_holding_the_tar(path: str, slot: str | None) -> None:
    found = rootfs.slot(path, ON)
    assert (str(found) if found else None) == slot


def test_open_staged_takes_a_regular_file_within_the_limit(tmp_path: Path) -> None:
    s = staged_in(tmp_path)
    tar = Path(s.rootfs_staging_dir) / SLOT / "rootfs.tar"
    tar.parent.mkdir()
    tar.write_bytes(b"x" * 100)
    staged = rootfs.open_staged(str(tar), s)
    with staged.file:
        assert staged.size == 100 and staged.file.read() == b"x" * 100


def test_open_staged_refusals(tmp_path: Path) -> None:
    s = staged_in(tmp_path, max_bytes=10)
    root = Path(s.rootfs_staging_dir)
    outside = tmp_path / "secret.tar"
    outside.write_bytes(b"secret")
    slots = {name: new_slot() for name in ("big", "empty", "dir", "link", "inner", "escape", "missing")}
    (root / slots["big"]).mkdir()
    (root / slots["big"] / "rootfs.tar").write_bytes(b"x" * 11)
    (root / slots["empty"]).mkdir()
    (root / slots["empty"] / "rootfs.tar").write_bytes(b"")
    (root / slots["dir"] / "rootfs.tar").mkdir(parents=True)
    (root / slots["link"]).mkdir()
    (root / slots["link"] / "rootfs.tar").symlink_to(outside)
    (root / slots["inner"]).mkdir()
    (root / slots["inner"] / "rootfs.tar").symlink_to(root / slots["big"] / "rootfs.tar")
    (root / slots["escape"]).symlink_to(tmp_path)  # a slot that is a link out of the staging directory
    cases = {
        f"{slots['big']}/rootfs.tar": "is 11 bytes, more than rootfs_max_bytes (10)",
        f"{slots['empty']}/rootfs.tar": "is empty",
        f"{slots['dir']}/rootfs.tar": "is not a regular file",
        f"{slots['link']}/rootfs.tar": "is a symbolic link",
        f"{slots['inner']}/rootfs.tar": "is a symbolic link",
        f"{slots['escape']}/secret.tar": "resolves outside the rootfs staging directory",
        f"{slots['missing']}/rootfs.tar": "cannot be opened: No such file or directory",
    }
    for rel, needle in cases.items():
        with pytest.raises(InvalidArgument) as exc:
            rootfs.open_staged(str(root / rel), s)
        assert exc.value.message.startswith(f"{rootfs.WHERE}: ") and needle in exc.value.message, rel
    assert outside.read_bytes() == b"secret"


def test_remove_slot_unlinks_the_tar_and_rmdirs_its_slot_and_nothing_else(tmp_path: Path) -> None:
    s = staged_in(tmp_path)
    root = Path(s.rootfs_staging_dir)
    mine, other = root / new_slot(), root / new_slot()
    for slot in (mine, other):
        slot.mkdir()
        (slot / "rootfs.tar").write_bytes(b"x")
    assert rootfs.remove_slot(str(mine / "rootfs.tar"), s)
    assert not mine.exists() and (other / "rootfs.tar").read_bytes() == b"x"
    assert not rootfs.remove_slot(str(mine / "rootfs.tar"), s)  # gone already


def test_remove_slot_never_touches_a_path_of_another_shape(tmp_path: Path) -> None:
    """Once any refused create rmtree'd the first component under the staging directory:
    another tenant's slot (through a file below it), a directory that is no slot, a
    file in the staging directory itself. A path check_path refuses is left alone."""
    s = staged_in(tmp_path)
    root = Path(s.rootfs_staging_dir)
    victim = root / new_slot()
    (victim / "sub").mkdir(parents=True)
    (victim / "rootfs.tar").write_bytes(b"victim")
    (victim / "sub" / "x.tar").write_bytes(b"victim")
    (root / "victimdir").mkdir()
    (root / "victimdir" / "x.tar").write_bytes(b"victim")
    (root / "x.tar").write_bytes(b"victim")
    upper = root / f"req-{str(uuid.uuid4()).upper()}"
    upper.mkdir()
    (upper / "rootfs.tar").write_bytes(b"victim")
    before = {str(p.relative_to(root)) for p in root.rglob("*")}
    for path in (victim / "sub" / "x.tar", victim, root / "victimdir" / "x.tar", root / "x.tar",
                 upper / "rootfs.tar", victim / ".driver-request-pending", f"{root}/{victim.name}/../x.tar"):
        assert not rootfs.remove_slot(str(path), s), path
    assert {str(p.relative_to(root)) for p in root.rglob("*")} == before
    assert all(p.read_bytes() == b"victim" for p in root.rglob("*") if p.is_file())


def test_remove_slot_never_follows_a_symlink(tmp_path: Path) -> None:
    """A tar that is a symlink: the link goes, its target stays. A slot that is a
    symlink (out of the staging directory): nothing is removed through it, nor it."""
    s = staged_in(tmp_path)
    root = Path(s.rootfs_staging_dir)
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "rootfs.tar").write_bytes(b"k")
    linked = root / new_slot()
    linked.mkdir()
    (linked / "rootfs.tar").symlink_to(keep / "rootfs.tar")
    assert rootfs.remove_slot(str(linked / "rootfs.tar"), s)
    assert not os.path.lexists(linked) and (keep / "rootfs.tar").read_bytes() == b"k"
    escape = root / new_slot()
    escape.symlink_to(keep)
    assert not rootfs.remove_slot(str(escape / "rootfs.tar"), s)
    assert escape.is_symlink() and (keep / "rootfs.tar").read_bytes() == b"k"


def test_remove_slot_keeps_a_slot_with_something_else_in_it(tmp_path: Path) -> None:
    """rmdir, never rmtree: the gateway's own marker (or a directory in place of the
    tar) keeps the slot; the gateway deletes it."""
    s = staged_in(tmp_path)
    root = Path(s.rootfs_staging_dir)
    marked = root / new_slot()
    marked.mkdir()
    (marked / "rootfs.tar").write_bytes(b"x")
    (marked / ".driver-request-pending").write_bytes(b"pending\n")
    assert rootfs.remove_slot(str(marked / "rootfs.tar"), s)
    assert [p.name for p in marked.iterdir()] == [".driver-request-pending"]
    tree = root / new_slot()
    (tree / "rootfs.tar").mkdir(parents=True)
    (tree / "rootfs.tar" / "inner").write_bytes(b"i")
    assert not rootfs.remove_slot(str(tree / "rootfs.tar"), s)
    assert (tree / "rootfs.tar" / "inner").read_bytes() == b"i"


def test_prepare_staging_creates_a_private_directory_and_resolves_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    s = Settings()
    rootfs.prepare_staging(s, state)
    assert s.rootfs_staging_dir == str((state / rootfs.STAGING_DIR).resolve())
    assert os.stat(s.rootfs_staging_dir).st_mode & 0o777 == 0o700
    caps = negotiation.capabilities(s, limits=enforcement.BOTH)
    assert (caps.rootfs_tar_staging_dir, caps.rootfs_tar_max_bytes) == (s.rootfs_staging_dir, 8 * 2**30)


def test_prepare_staging_disabled_advertises_nothing(tmp_path: Path) -> None:
    s = Settings(rootfs_max_bytes=0, rootfs_staging_dir=str(tmp_path / "staging"))
    rootfs.prepare_staging(s, tmp_path)
    assert not (tmp_path / "staging").exists()
    caps = negotiation.capabilities(s, limits=enforcement.BOTH)
    assert (caps.rootfs_tar_staging_dir, caps.rootfs_tar_max_bytes) == ("", 0)


def test_prepare_staging_refuses_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ConfigError) as exc:
        rootfs.prepare_staging(Settings(rootfs_staging_dir=str(tmp_path / "file")), tmp_path)
    assert str(exc.value).startswith("invalid setting rootfs_staging_dir (--rootfs-staging-dir")


def template(cfg: dict[str, object]) -> pb.DriverSandboxTemplate:
    tpl = pb.DriverSandboxTemplate(image="registry.example/default:1")
    tpl.driver_config.update(cfg)
    return tpl


def test_rootfs_tar_path_needs_no_allow_driver_config_and_is_not_caller_config() -> None:
    cfg = driverconfig.parse(template({"rootfs_tar_path": TAR}), ON)
    assert (cfg.rootfs_tar, cfg.used) == (TAR, False)
    with pytest.raises(FailedPrecondition) as exc:  # anything else beside it still needs the setting
        driverconfig.parse(template({"rootfs_tar_path": TAR, "cdi_devices": []}), ON)
    assert "allow_driver_config" in exc.value.message


def test_a_plan_from_a_rootfs_tar_runs_the_image_imported_for_it() -> None:
    sandbox = pb.DriverSandbox(id="Sb-1", name="demo", workspace="ws", spec=pb.DriverSandboxSpec(
        launch_authentication=make_launch("Sb-1", GENERATION)))
    sandbox.spec.template.CopyFrom(template({"rootfs_tar_path": TAR}))
    plan = spec.validate(sandbox, ON)
    assert (plan.image, plan.rootfs_tar) == ("localhost/podmand-rootfs:Sb-1", TAR)
    assert spec.intent_labels(plan, "inst")[names.ROOTFS_IMAGE] == plan.image
    assert rootfs.sandbox_of(plan.image) == "Sb-1"
    assert names.ROOTFS_IMAGE not in spec.intent_labels(spec.validate(sandbox_without_tar(), ON), "inst")


def sandbox_without_tar() -> pb.DriverSandbox:
    return pb.DriverSandbox(id="sb-2", name="demo", workspace="ws", spec=pb.DriverSandboxSpec(
        template=template({}), launch_authentication=make_launch("sb-2", GENERATION)))


@pytest.mark.parametrize(("tag", "sandbox_id"), [("localhost/podmand-rootfs:sb-1", "sb-1"),
                                                 ("localhost/other:sb-1", None), ("localhost/podmand-rootfs", None)])
def test_sandbox_of(tag: str, sandbox_id: str | None) -> None:
    assert rootfs.sandbox_of(tag) == sandbox_id


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (f"/srv/staging/{SLOT}/" + "x" * 256, "each path component must be at most 255 bytes"),
        ("/srv/staging/" + "é" * 128 + "/rootfs.tar", "each path component must be at most 255 bytes"),
        (f"/srv/staging/{SLOT}/root\x00fs.tar", "must be an absolute path"),
    ],
)
def test_names_the_filesystem_cannot_hold_are_invalid_arguments(value: str, needle: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        rootfs.check_path(value, ON)
    assert needle in exc.value.message


def test_remove_slot_of_a_name_the_filesystem_cannot_hold_removes_nothing(tmp_path: Path) -> None:
    """A NUL byte (ValueError) or an over-long component (ENAMETOOLONG) is no slot of
    ours: False, not an exception that would turn a refusal into INTERNAL."""
    s = staged_in(tmp_path)
    root = Path(s.rootfs_staging_dir)
    (root / SLOT).mkdir()
    (root / SLOT / "rootfs.tar").write_bytes(b"x")
    assert not rootfs.remove_slot(f"{root}/{SLOT}/rootfs\x00.tar", s)
    assert not rootfs.remove_slot(f"{root}/{SLOT}/{'x' * 256}", s)
    assert (root / SLOT / "rootfs.tar").read_bytes() == b"x"


def test_open_staged_checks_where_the_open_descriptor_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer of the staging directory swaps the slot for a symlink out of it after
    any check by path and before the open: the open file is refused, not imported."""
    s = staged_in(tmp_path)
    root = Path(s.rootfs_staging_dir)
    (root / SLOT).mkdir()
    (root / SLOT / "rootfs.tar").write_bytes(b"staged")
    host = tmp_path / "host"
    host.mkdir()
    (host / "rootfs.tar").write_bytes(b"host secret")
    real_open = os.open

    def swap_then_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path) == str(root / SLOT / "rootfs.tar") and not (root / SLOT).is_symlink():
            os.rename(root / SLOT, root / f"{SLOT}.checked")
            (root / SLOT).symlink_to(host)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    with pytest.raises(InvalidArgument) as exc:
        staged = rootfs.open_staged(str(root / SLOT / "rootfs.tar"), s)
        staged.file.close()
    assert "resolves outside the rootfs staging directory" in exc.value.message


def test_prepare_staging_refuses_podmands_own_directories(tmp_path: Path) -> None:
    """The gateway names paths in the staging directory: it must not reach the state
    directory (tokens, keys) or the driver socket's directory; the default is podmand's own."""
    state, sockdir = tmp_path / "state", tmp_path / "run"
    state.mkdir()
    sockdir.mkdir()
    sock = f"{sockdir}/compute-driver.sock"  # as config.load leaves it
    for staging in (state, state / "sandboxes", tmp_path, sockdir, sockdir / "staging"):
        with pytest.raises(ConfigError) as exc:
            rootfs.prepare_staging(Settings(rootfs_staging_dir=str(staging), socket=sock), state)
        message = str(exc.value)
        assert message.startswith("invalid setting rootfs_staging_dir (--rootfs-staging-dir") and "overlaps" in message
    for ok in ("", str(state / rootfs.STAGING_DIR), str(tmp_path / "staging")):
        s = Settings(rootfs_staging_dir=ok, socket=sock)
        rootfs.prepare_staging(s, state)
        assert s.rootfs_staging_dir
    s = Settings(
            socket=f"unix://{tmp_path}/compute-driver.sock")  # the state directory beside the socket
    rootfs.prepare_staging(s, state)
    assert s.rootfs_staging_dir == str(state / rootfs.STAGING_DIR)


# ---------------------------------------------------------------- the driver's use of slots
# The races below (a retry after the import, a refusal beside a create under way, a
# restart mid-import) cannot be staged on demand with a real Podman: a fake libpod.


def with_staging(tmp: Path) -> Settings:
    (tmp / "staging").mkdir()
    return Settings(rootfs_staging_dir=str(tmp / "staging"), rootfs_max_bytes=1024)


@contextlib.asynccontextmanager
async def driver_on() -> AsyncIterator[tuple[Driver, FakeLibpod, Path]]:
    async with harness.driver_on(with_staging) as rig:
        yield rig.driver, rig.fake, rig.tmp / "staging"


def run(main: Callable[[], Any]) -> None:
    asyncio.run(asyncio.wait_for(main(), 60))


def rootfs_sandbox(sandbox_id: str, tar: Path, name: str = "demo") -> pb.DriverSandbox:
    who = pb.WorkloadIdentityRequest(user="sandbox", group="sandbox")  # a rootfs tar declares no USER
    box_spec = pb.DriverSandboxSpec(workload_identity=who, launch_authentication=make_launch(sandbox_id, GENERATION))
    sandbox = pb.DriverSandbox(id=sandbox_id, name=name, workspace="ws", spec=box_spec)
    sandbox.spec.template.CopyFrom(template({"rootfs_tar_path": str(tar)}))
    return sandbox


def stage(staging: Path, slot: str = "") -> Path:
    tar = staging / (slot or new_slot()) / "rootfs.tar"
    tar.parent.mkdir()
    tar.write_bytes(b"x" * 100)
    return tar


def record(driver: Driver, fake: FakeLibpod, sandbox: pb.DriverSandbox, instance: str) -> Plan:
    """The sandbox's create as accepted: its workspace volume with the intent labels."""
    plan = spec.validate(sandbox, driver.settings)
    labels = spec.intent_labels(plan, instance, str(driver.state_dir))
    fake.volumes[plan.volume_name] = {"Name": plan.volume_name, "Labels": labels}
    return plan


def test_an_identical_retry_after_the_import_gets_the_sandbox_identity() -> None:
    async def main() -> None:
        async with driver_on() as (driver, fake, staging):
            tar = stage(staging)
            sandbox = rootfs_sandbox("sb-1", tar)
            record(driver, fake, sandbox, "inst1")
            shutil.rmtree(tar.parent)  # imported: the slot is gone
            assert await driver.create(sandbox) == driver.provisioning.runtime_identity("sb-1", "inst1")

    run(main)


def test_a_refusal_leaves_the_slot_of_the_create_under_way() -> None:
    """A same-id different-spec request (AlreadyExists) naming the slot of the create
    under way leaves the tar to that create; a refused request's own slot goes."""

    async def main() -> None:
        async with driver_on() as (driver, _fake, staging):
            tar = stage(staging)
            sandbox = rootfs_sandbox("sb-1", tar)
            plan = spec.validate(sandbox, driver.settings)
            driver.provisioning.add(Pending(plan, "inst1", Condition("False", "Starting", "", snapshots.now())))
            with pytest.raises(AlreadyExists):
                await driver.create(rootfs_sandbox("sb-1", tar, name="other"))
            assert tar.exists()

            unowned = stage(staging)
            with pytest.raises(AlreadyExists):
                await driver.create(rootfs_sandbox("sb-1", unowned, name="other"))
            assert not unowned.parent.exists()  # the refused request's own slot goes at once

    run(main)


def test_a_refusal_leaves_the_slot_of_a_recorded_create_not_resumed_yet() -> None:
    """After a restart RPCs are served before every record is resumed: a refusal for
    the same sandbox naming the same slot leaves the tar to the resumed create."""

    async def main() -> None:
        async with driver_on() as (driver, fake, staging):
            tar = stage(staging)
            record(driver, fake, rootfs_sandbox("sb-1", tar), "inst1")
            with pytest.raises(AlreadyExists):
                await driver.create(rootfs_sandbox("sb-1", tar.parent / "other.tar", name="other"))
            assert tar.exists()

    run(main)


def test_a_staged_tar_is_imported_even_when_the_image_tag_exists() -> None:
    """A staged tar is imported (moving the tag); the tagged image is used as it is
    only once the slot is gone (a restart after a finished import)."""

    async def main() -> None:
        async with driver_on() as (driver, fake, staging):
            fake.route("POST", "/images/import", (200, {}, {"Id": "sha256:new"}))
            tar = stage(staging)
            plan = spec.validate(rootfs_sandbox("sb-1", tar), driver.settings)
            pending = Pending(plan, "inst1", Condition("False", "Starting", "", snapshots.now()))
            await driver.provisioning.preparation.import_rootfs(pending)
            assert fake.count("POST .*/images/import") == 1 and not tar.parent.exists()
            await driver.provisioning.preparation.import_rootfs(pending)  # after a restart: the slot is gone
            assert fake.count("POST .*/images/import") == 1

    run(main)


def test_a_refused_create_deletes_only_a_path_of_the_gateways_shape(tmp_path: Path) -> None:
    """A create naming a file below another tenant's slot, a directory that is no slot
    or a file in the staging directory itself is refused naming the field, and all of
    them stay; a well-shaped tar that is a symlink is refused, and only the link goes."""

    async def main() -> None:
        async with driver_on() as (driver, fake, staging):
            victim = stage(staging)
            (victim.parent / "sub").mkdir()
            (victim.parent / "sub" / "x.tar").write_bytes(b"victim")
            (staging / "victimdir").mkdir()
            (staging / "victimdir" / "x.tar").write_bytes(b"victim")
            (staging / "x.tar").write_bytes(b"victim")
            before = {p: p.read_bytes() for p in staging.rglob("*") if p.is_file()}
            for path in (victim.parent / "sub" / "x.tar", staging / "victimdir" / "x.tar", staging / "x.tar"):
                with pytest.raises(InvalidArgument) as exc:
                    await driver.create(rootfs_sandbox("sb-9", path))
                assert exc.value.message.startswith(f"{rootfs.WHERE}: must name a file directly in a slot")
            assert {p: p.read_bytes() for p in staging.rglob("*") if p.is_file()} == before

            target = tmp_path / "target.tar"
            target.write_bytes(b"x" * 100)
            link = staging / new_slot() / "rootfs.tar"
            link.parent.mkdir()
            link.symlink_to(target)
            with pytest.raises(InvalidArgument) as exc:
                await driver.create(rootfs_sandbox("sb-9", link))
            assert "is a symbolic link" in exc.value.message
            assert not os.path.lexists(link.parent) and target.read_bytes() == b"x" * 100
            assert fake.volumes == {}

    run(main)
