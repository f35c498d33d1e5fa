"""Unit tests for podmand.rootfs: which staged paths are taken, and what a slot is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podmand import drivercfg, names, negotiation, rootfs, spec
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import ConfigError, Settings
from podmand.errors import FailedPrecondition, InvalidArgument

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
        "req-link/rootfs.tar": "resolves outside the rootfs staging directory",
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
