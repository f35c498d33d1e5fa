"""Unit tests for SELinux: detection, the setting, the labels in the pair's specs, doctor's finding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.cli.doctor.hostchecks import check_selinux
from podmand.config import Settings
from podmand.libpod import Info
from podmand.pair import specs
from podmand.sandbox import selinux, spec
from podmand.sandbox.identity import Resolved
from podmand.sandbox.plan import Provision

SECRETS = "/state/sandboxes/abc123"
SUPERVISOR = "/state/supervisor/openshell-sandbox"


def build(settings: Settings, *, relabel: bool, mounts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The pair's mounts together: the workload's and the supervisor's."""
    sandbox = pb.DriverSandbox(id="abc123", name="demo", workspace="ws", spec=pb.DriverSandboxSpec())
    if mounts:
        sandbox.spec.template.driver_config.update({"mounts": mounts})
    plan = spec.validate(sandbox, settings, recorded=True)
    prov = Provision(image_id="sha256:feed", image_user="", image_env=(), network="",
                     supervisor_path=SUPERVISOR, secrets_dir=SECRETS, instance="i",
                     identity=Resolved(uid=1000, gid=1000, supplementary=(), source="image", digest="sha256:feed"),
                     selinux=relabel)
    work = specs.workload_spec(plan, settings, prov, rootless=False)
    sup = specs.supervisor_spec(plan, settings, prov, supervisor_image_id="sha256:5e1f")
    return {"mounts": [*work["mounts"], *sup["mounts"]]}


def binds(built: dict[str, Any]) -> dict[str, list[str]]:
    return {m["destination"]: m["options"] for m in built["mounts"] if m["type"] == "bind"}


def test_detect_prefers_podman_then_selinuxfs(tmp_path: Path) -> None:
    fs = tmp_path / "selinux"
    assert selinux.detect(True, str(fs)) == (True, "Podman's /info")
    assert selinux.detect(False, str(tmp_path)) == (False, "Podman's /info")  # Podman's word wins
    assert selinux.detect(None, str(fs)) == (False, str(fs))
    fs.mkdir()
    assert selinux.detect(None, str(fs)) == (True, str(fs))


def test_podman_info_carries_selinux() -> None:
    body = b'{"host":{"security":{"rootless":true,"selinuxEnabled":true}}}'
    assert msgspec.json.decode(body, type=Info).host.security.selinuxEnabled is True
    assert msgspec.json.decode(b'{"host":{"security":{}}}', type=Info).host.security.selinuxEnabled is None


@pytest.mark.parametrize(("setting", "enabled", "relabel"), [
    ("auto", True, True), ("auto", False, False), ("on", False, True), ("on", True, True),
    ("off", True, False), ("off", False, False),
])
def test_relabel(setting: str, enabled: bool, relabel: bool) -> None:
    assert selinux.relabel(setting, enabled) is relabel


def test_own_binds_are_labelled_private_and_shared() -> None:
    """Per-sandbox files (the workload's resolv.conf, the supervisor's TLS copies) get Z; the
    runtime binary, shared by every sandbox, gets z."""
    settings = Settings(tls_ca="/tls/ca.crt", tls_cert="/tls/tls.crt", tls_key="/tls/tls.key")
    own = binds(build(settings, relabel=True))
    assert own[names.RUNTIME_BIN] == ["rbind", "ro", "z"]
    assert own[names.RESOLV_CONF] == ["bind", "ro", "U", "Z"]
    for f in ("ca.crt", "tls.crt", "tls.key"):
        assert own[f"{names.TLS_DIR}/{f}"] == ["bind", "ro", "U", "Z"]


def test_no_labels_without_selinux() -> None:
    own = binds(build(Settings(tls_ca="/c", tls_cert="/t", tls_key="/k"), relabel=False))
    assert not any({"z", "Z"} & set(options) for options in own.values()), own


@pytest.mark.parametrize("relabel", [True, False])
def test_caller_binds_carry_only_their_own_label(relabel: bool) -> None:
    """podmand never relabels a caller's host path on its own: only selinux_label does."""
    settings = Settings(allow_driver_config=True, enable_bind_mounts=True, admission_enabled=False)
    built = build(settings, relabel=relabel, mounts=[
        {"type": "bind", "source": "/srv/plain", "target": "/plain"},
        {"type": "bind", "source": "/srv/mine", "target": "/mine", "selinux_label": "private"},
    ])
    assert binds(built)["/plain"] == ["rbind", "ro"]
    assert binds(built)["/mine"] == ["rbind", "ro", "Z"]


def test_doctor_finding() -> None:
    on_host = check_selinux("auto", True, "Podman's /info")
    assert on_host.status == "OK" and "enabled (from Podman's /info)" in on_host.finding
    assert "Z for per-sandbox files, z for the shared supervisor binary" in on_host.finding
    off_on_host = check_selinux("off", True, "Podman's /info")
    assert off_on_host.status == "WARN" and "--selinux=auto" in off_on_host.fix
    forced = check_selinux("on", False, "/sys/fs/selinux")
    assert forced.status == "OK" and "Podman ignores here" in forced.finding
    plain = check_selinux("auto", False, "Podman's /info")
    assert plain.status == "OK" and "not enabled" in plain.finding and "adds no labels" in plain.finding
