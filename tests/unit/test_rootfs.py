"""Unit tests for podmand.rootfs: which staged paths are taken, and what a slot is."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from podmand import drivercfg, names, negotiation, rootfs, snapshots, spec
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import ConfigError, Settings
from podmand.driver import Driver
from podmand.driver.pending import Pending
from podmand.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from podmand.snapshots import Condition
from tests.fakes import harness
from tests.fakes.libpod import FakeLibpod

ROOT = "/srv/staging"
ON = Settings(rootfs_staging_dir=ROOT, rootfs_max_bytes=1024)


def staged_in(tmp_path: Path, max_bytes: int = 1024) -> Settings:
    root = tmp_path / "staging"
    root.mkdir(exist_ok=True)
    return Settings(rootfs_staging_dir=str(root), rootfs_max_bytes=max_bytes)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("req-1/rootfs.tar", "must be an absolute path"),
        (7, "must be an absolute path"),
        ("/srv/staging/req-1/../../etc/shadow", "must be normalised"),
        ("/srv/staging/./req-1/rootfs.tar", "must be normalised"),
        ("/srv/staging//req-1/rootfs.tar", "must be normalised"),
        ("/srv/staging/req-1/", "must be normalised"),
        ("/srv/staging/req\n1/rootfs.tar", "must be an absolute path"),
        ("/srv/staging", "must be inside the rootfs staging directory /srv/staging"),
        ("/srv/staging-evil/rootfs.tar", "must be inside the rootfs staging directory"),
        ("/etc/shadow", "must be inside the rootfs staging directory"),
    ],
)
def test_paths_refused_before_the_filesystem_is_asked(value: object, needle: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        rootfs.check_path(value, ON)
    assert exc.value.message.startswith(f"{rootfs.WHERE}: ") and needle in exc.value.message


def test_a_path_inside_the_staging_directory_is_taken() -> None:
    assert rootfs.check_path("/srv/staging/req-1/rootfs.tar", ON) == "/srv/staging/req-1/rootfs.tar"
    assert rootfs.check_path("/srv/staging/rootfs.tar", ON) == "/srv/staging/rootfs.tar"


@pytest.mark.parametrize("settings", [Settings(rootfs_max_bytes=0, rootfs_staging_dir=ROOT), Settings()])
def test_disabled_or_unprepared_is_a_failed_precondition(settings: Settings) -> None:
    with pytest.raises(FailedPrecondition) as exc:
        rootfs.check_path("/srv/staging/req-1/rootfs.tar", settings)
    assert "rootfs tar sources are not supported" in exc.value.message


@pytest.mark.parametrize(
    ("path", "slot"),
    [
        ("/srv/staging/req-1/rootfs.tar", "/srv/staging/req-1"),
        ("/srv/staging/req-1/deeper/rootfs.tar", "/srv/staging/req-1"),
        ("/srv/staging/rootfs.tar", "/srv/staging/rootfs.tar"),
        ("/srv/staging-evil/req-1/rootfs.tar", None),
        ("/srv/staging", None),
        ("/srv/staging/../x", None),
        ("/tmp/rootfs.tar", None),
    ],
)
def test_slot_is_the_staging_directory_entry_holding_the_tar(path: str, slot: str | None) -> None:
    found = rootfs.slot(path, ON)
    assert (str(found) if found else None) == slot


def test_open_staged_takes_a_regular_file_within_the_limit(tmp_path: Path) -> None:
    s = staged_in(tmp_path)
    tar = Path(s.rootfs_staging_dir) / "req-1" / "rootfs.tar"
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
    (root / "req-big").mkdir()
    (root / "req-big" / "rootfs.tar").write_bytes(b"x" * 11)
    (root / "req-empty").mkdir()
    (root / "req-empty" / "rootfs.tar").write_bytes(b"")
    (root / "req-dir" / "rootfs.tar").mkdir(parents=True)
    (root / "req-link").mkdir()
    (root / "req-link" / "rootfs.tar").symlink_to(outside)
    (root / "req-inner-link").mkdir()
    (root / "req-inner-link" / "rootfs.tar").symlink_to(root / "req-big" / "rootfs.tar")
    (root / "req-escape").symlink_to(tmp_path)  # a slot that is a link out of the staging directory
    cases = {
        "req-big/rootfs.tar": "is 11 bytes, more than rootfs_max_bytes (10)",
        "req-empty/rootfs.tar": "is empty",
        "req-dir/rootfs.tar": "is not a regular file",
        "req-link/rootfs.tar": "is a symbolic link",
        "req-inner-link/rootfs.tar": "is a symbolic link",
        "req-escape/secret.tar": "resolves outside the rootfs staging directory",
        "req-missing/rootfs.tar": "cannot be opened: No such file or directory",
    }
    for rel, needle in cases.items():
        with pytest.raises(InvalidArgument) as exc:
            rootfs.open_staged(str(root / rel), s)
        assert exc.value.message.startswith(f"{rootfs.WHERE}: ") and needle in exc.value.message, rel
    assert outside.read_bytes() == b"secret"


def test_remove_slot_deletes_the_request_directory_and_nothing_outside(tmp_path: Path) -> None:
    s = staged_in(tmp_path)
    root = Path(s.rootfs_staging_dir)
    (root / "req-1").mkdir()
    (root / "req-1" / "rootfs.tar").write_bytes(b"x")
    (root / "req-2").mkdir()
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "file").write_bytes(b"k")
    (root / "req-link").symlink_to(keep)
    assert rootfs.remove_slot(str(root / "req-1" / "rootfs.tar"), s)
    assert not (root / "req-1").exists() and (root / "req-2").exists()
    assert rootfs.remove_slot(str(root / "req-link" / "file"), s)  # the link goes, not what it points at
    assert not (root / "req-link").exists() and (keep / "file").read_bytes() == b"k"
    assert not rootfs.remove_slot(str(keep / "file"), s)
    assert not rootfs.remove_slot(str(root / "req-1" / "rootfs.tar"), s)  # gone already
    assert (keep / "file").exists()


def test_prepare_staging_creates_a_private_directory_and_resolves_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    s = Settings()
    rootfs.prepare_staging(s, state)
    assert s.rootfs_staging_dir == str((state / rootfs.STAGING_DIR).resolve())
    assert os.stat(s.rootfs_staging_dir).st_mode & 0o777 == 0o700
    caps = negotiation.capabilities(s, limits_enforced=True)
    assert (caps.rootfs_tar_staging_dir, caps.rootfs_tar_max_bytes) == (s.rootfs_staging_dir, 8 * 2**30)


def test_prepare_staging_disabled_advertises_nothing(tmp_path: Path) -> None:
    s = Settings(rootfs_max_bytes=0, rootfs_staging_dir=str(tmp_path / "staging"))
    rootfs.prepare_staging(s, tmp_path)
    assert not (tmp_path / "staging").exists()
    caps = negotiation.capabilities(s, limits_enforced=True)
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
    cfg = drivercfg.parse(template({"rootfs_tar_path": "/srv/staging/req-1/rootfs.tar"}), ON)
    assert (cfg.rootfs_tar, cfg.used) == ("/srv/staging/req-1/rootfs.tar", False)
    with pytest.raises(FailedPrecondition) as exc:  # anything else beside it still needs the setting
        drivercfg.parse(template({"rootfs_tar_path": "/srv/staging/req-1/rootfs.tar", "cdi_devices": []}), ON)
    assert "allow_driver_config" in exc.value.message


def test_a_plan_from_a_rootfs_tar_runs_the_image_imported_for_it() -> None:
    sandbox = pb.DriverSandbox(id="Sb-1", name="demo", workspace="ws", spec=pb.DriverSandboxSpec())
    sandbox.spec.template.CopyFrom(template({"rootfs_tar_path": "/srv/staging/req-1/rootfs.tar"}))
    plan = spec.validate(sandbox, ON)
    assert (plan.image, plan.rootfs_tar) == ("localhost/podmand-rootfs:Sb-1", "/srv/staging/req-1/rootfs.tar")
    assert spec.intent_labels(plan, "inst")[names.ROOTFS_IMAGE] == plan.image
    assert rootfs.sandbox_of(plan.image) == "Sb-1"
    assert names.ROOTFS_IMAGE not in spec.intent_labels(spec.validate(sandbox_without_tar(), ON), "inst")


def sandbox_without_tar() -> pb.DriverSandbox:
    return pb.DriverSandbox(id="sb-2", name="demo", workspace="ws", spec=pb.DriverSandboxSpec(template=template({})))


@pytest.mark.parametrize(("tag", "sandbox_id"), [("localhost/podmand-rootfs:sb-1", "sb-1"),
                                                 ("localhost/other:sb-1", None), ("localhost/podmand-rootfs", None)])
def test_sandbox_of(tag: str, sandbox_id: str | None) -> None:
    assert rootfs.sandbox_of(tag) == sandbox_id


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("/srv/staging/req-1/" + "x" * 256, "each path component must be at most 255 bytes"),
        ("/srv/staging/" + "é" * 128 + "/rootfs.tar", "each path component must be at most 255 bytes"),
        ("/srv/staging/req-1/root\x00fs.tar", "must be an absolute path"),
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
    (root / "req-1").mkdir()
    assert not rootfs.remove_slot(f"{root}/req\x001/rootfs.tar", s)
    assert not rootfs.remove_slot(f"{root}/{'x' * 256}/rootfs.tar", s)
    assert (root / "req-1").is_dir()


def test_open_staged_checks_where_the_open_descriptor_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer of the staging directory swaps the slot for a symlink out of it after
    any check by path and before the open: the open file is refused, not imported."""
    s = staged_in(tmp_path)
    root = Path(s.rootfs_staging_dir)
    (root / "req-1").mkdir()
    (root / "req-1" / "rootfs.tar").write_bytes(b"staged")
    host = tmp_path / "host"
    host.mkdir()
    (host / "rootfs.tar").write_bytes(b"host secret")
    real_open = os.open

    def swap_then_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path) == str(root / "req-1" / "rootfs.tar") and not (root / "req-1").is_symlink():
            os.rename(root / "req-1", root / "req-1.checked")
            (root / "req-1").symlink_to(host)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    with pytest.raises(InvalidArgument) as exc:
        staged = rootfs.open_staged(str(root / "req-1" / "rootfs.tar"), s)
        staged.file.close()
    assert "resolves outside the rootfs staging directory" in exc.value.message


def test_prepare_staging_refuses_podmands_own_directories(tmp_path: Path) -> None:
    """The gateway names paths in the staging directory: it must not reach the state
    directory (tokens, keys) or the driver socket's directory; the default is podmand's own."""
    state, sockdir = tmp_path / "state", tmp_path / "run"
    state.mkdir()
    sockdir.mkdir()
    sock = f"unix://{sockdir}/compute-driver.sock"
    for staging in (state, state / "sandboxes", tmp_path, sockdir, sockdir / "staging"):
        with pytest.raises(ConfigError) as exc:
            rootfs.prepare_staging(Settings(rootfs_staging_dir=str(staging), socket=sock), state)
        message = str(exc.value)
        assert message.startswith("invalid setting rootfs_staging_dir (--rootfs-staging-dir") and "overlaps" in message
    for ok in ("", str(state / rootfs.STAGING_DIR), str(tmp_path / "staging")):
        s = Settings(rootfs_staging_dir=ok, socket=sock)
        rootfs.prepare_staging(s, state)
        assert s.rootfs_staging_dir
    s = Settings(socket=f"unix://{tmp_path}/compute-driver.sock")  # the state directory beside the socket
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
    box_spec = pb.DriverSandboxSpec(workload_identity=who)
    sandbox = pb.DriverSandbox(id=sandbox_id, name=name, workspace="ws", spec=box_spec)
    sandbox.spec.template.CopyFrom(template({"rootfs_tar_path": str(tar)}))
    return sandbox


def stage(staging: Path, slot: str = "req-1") -> Path:
    tar = staging / slot / "rootfs.tar"
    tar.parent.mkdir()
    tar.write_bytes(b"x" * 100)
    return tar


def record(driver: Driver, fake: FakeLibpod, sandbox: pb.DriverSandbox, instance: str) -> spec.Plan:
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
            tar = stage(staging, "req-1")
            sandbox = rootfs_sandbox("sb-1", tar)
            plan = spec.validate(sandbox, driver.settings)
            driver.provisioning.add(Pending(plan, "inst1", Condition("False", "Starting", "", snapshots.now())))
            with pytest.raises(AlreadyExists):
                await driver.create(rootfs_sandbox("sb-1", tar, name="other"))
            assert tar.exists()

            unowned = stage(staging, "req-2")
            with pytest.raises(AlreadyExists):
                await driver.create(rootfs_sandbox("sb-1", unowned, name="other"))
            assert not unowned.parent.exists()  # the refused request's own slot goes at once

    run(main)


def test_a_refusal_leaves_the_slot_of_a_recorded_create_not_resumed_yet() -> None:
    """After a restart RPCs are served before every record is resumed: a refusal for
    the same sandbox naming the same slot leaves the tar to the resumed create."""

    async def main() -> None:
        async with driver_on() as (driver, fake, staging):
            tar = stage(staging, "req-1")
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
            await driver.provisioning.import_rootfs(pending)
            assert fake.count("POST .*/images/import") == 1 and not tar.parent.exists()
            await driver.provisioning.import_rootfs(pending)  # after a restart: the slot is gone
            assert fake.count("POST .*/images/import") == 1

    run(main)
