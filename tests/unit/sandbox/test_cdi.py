"""Unit tests for podmand.sandbox.cdi: reading CDI spec files, and which GPUs a sandbox gets."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from podmand import negotiation
from podmand.cli.doctor.hostchecks import check_gpus
from podmand.config import Settings
from podmand.errors import DriverError, FailedPrecondition
from podmand.host import enforcement
from podmand.sandbox import cdi

# What NVIDIA's toolkit writes (nvidia-ctk cdi generate), shortened: block YAML, nested
# lists at the parent's indentation, top-level containerEdits after the devices.
NVIDIA_YAML = """\
---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "1"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
- name: GPU-6f1c2a7e-0000-4000-8000-000000000000
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-ctk
    args:
    - nvidia-ctk
    - hook
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.1
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.1
    options: [ro, nosuid, nodev, bind]
"""

# The same facts, hand-written: indented list, comments, quoting, a bare dash, flow edits.
HAND_YAML = """\
cdiVersion: "0.6.0"
"kind": 'nvidia.com/gpu'   # the GPUs
devices:
  # the first card
  - name: '0'
    containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}
  -
    annotations:
      name: not-this-one
    name: "2"   # nested 'name' above is not the device's
"""


def spec_json(kind: str, *names: str) -> str:
    return json.dumps({"cdiVersion": "0.5.0", "kind": kind,
                       "devices": [{"name": n, "containerEdits": {"deviceNodes": [{"path": f"/dev/x{n}"}]}}
                                   for n in names],
                       "containerEdits": {"env": ["A=1"]}})


def test_reads_nvidia_toolkit_yaml() -> None:
    assert cdi.parse_spec(NVIDIA_YAML) == [
        "nvidia.com/gpu=1",
        "nvidia.com/gpu=GPU-6f1c2a7e-0000-4000-8000-000000000000",
        "nvidia.com/gpu=all",
    ]


def test_reads_hand_written_yaml_and_json() -> None:
    assert cdi.parse_spec(HAND_YAML) == ["nvidia.com/gpu=0", "nvidia.com/gpu=2"]
    assert cdi.parse_spec(spec_json("vendor.example/accel", "a", "b")) == [
        "vendor.example/accel=a", "vendor.example/accel=b"
    ]
    assert cdi.parse_spec("kind: v.io/c\ndevices: []\n") == []


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("devices:\n- name: '0'\n", "no kind"),
        ("kind: nvidia.com\ndevices:\n- name: '0'\n", "is not <vendor>/<class>"),
        ("kind: nvidia.com/gpu\ndevices:\n- containerEdits: {}\n", "a device has no name"),
        ("kind: nvidia.com/gpu\ndevices:\n- name: gpu/0\n", "is not a CDI device name"),
        ("kind: nvidia.com/gpu\ndevices: [{name: '0'}]\n", "devices must be a block list"),
        ("kind: nvidia.com/gpu\ndevices:\n  name: '0'\n", "devices must be a block list"),
        ("kind: nvidia.com/gpu\ndevices:\n- name: &a '0'\n", "unsupported YAML value"),
        ("kind: nvidia.com/gpu\ndevices:\n- name: |\n    0\n", "unsupported YAML value"),
        ("kind: a.io/b\n---\nkind: c.io/d\n", "more than one YAML document"),
        ("kind: nvidia.com/gpu\ndevices:\n\t- name: '0'\n", "tab"),
        ("kind:nvidia.com/gpu\n", "unsupported YAML line"),
        ('{"kind": "nvidia.com/gpu", "devices": {"name": "0"}}', "not a CDI spec"),
        ("{not json", "not a CDI spec"),
    ],
)
def test_what_it_cannot_read_is_an_error_not_a_guess(text: str, needle: str) -> None:
    with pytest.raises(cdi.SpecError) as exc:
        cdi.parse_spec(text)
    assert needle in str(exc.value)


def test_scan_reads_every_directory_and_reports_bad_files(tmp_path: Path) -> None:
    """Only *.json and *.yaml count (as for Podman's CDI registry); a missing directory is
    empty; a bad file is reported by path and the others still count; repeats collapse."""
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    (etc / "nvidia.yaml").write_text(NVIDIA_YAML)
    (etc / "other.json").write_text(spec_json("vendor.example/accel", "a"))
    (etc / "ignored.yml").write_text(spec_json("nvidia.com/gpu", "7"))
    (etc / "broken.yaml").write_text("kind: [\n")
    (etc / "dir.json").mkdir()
    (run / "again.json").write_text(spec_json("nvidia.com/gpu", "1", "3"))
    inventory = cdi.scan([str(etc), str(tmp_path / "absent"), str(run)])
    assert inventory.devices == (
        "nvidia.com/gpu=1",
        "nvidia.com/gpu=3",
        "nvidia.com/gpu=GPU-6f1c2a7e-0000-4000-8000-000000000000",
        "nvidia.com/gpu=all",
        "vendor.example/accel=a",
    )
    assert inventory.gpus == inventory.devices[:4]
    assert inventory.files == 3
    assert [p.split(":")[0] for p in inventory.problems] == [str(etc / "broken.yaml"), str(etc / "dir.json")]


# ---------------------------------------------------------------- selection


def gpus(*names: str) -> list[str]:
    return [f"nvidia.com/gpu={n}" for n in names]


def test_default_family_prefers_indexed_in_numeric_order() -> None:
    assert cdi.default_family(gpus("10", "2", "all", "GPU-b", "0")) == gpus("0", "2", "10")
    assert cdi.default_family(gpus("MIG-b", "all", "GPU-a")) == gpus("GPU-a", "MIG-b")
    assert cdi.default_family([*gpus("1"), "vendor.example/accel=0"]) == gpus("1")


@pytest.mark.parametrize(
    ("devices", "needle"),
    [
        (gpus("all"), 'default GPU request resolved only to nvidia.com/gpu=all, which is not allowed on this '
                      'platform; set driver_config.cdi_devices to ["nvidia.com/gpu=all"] explicitly'),
        ([], "no NVIDIA CDI GPU devices were discovered"),
        (["vendor.example/gpu=0"], "no NVIDIA CDI GPU devices were discovered"),
    ],
)
def test_no_default_family_is_failed_precondition(devices: list[str], needle: str) -> None:
    with pytest.raises(FailedPrecondition) as exc:
        cdi.choose(devices, 1, 0)
    assert exc.value.message.startswith("sandbox.spec.resource_requirements.gpu: ")
    assert needle in exc.value.message
    assert cdi.selectable(devices) is False


def test_choose_is_round_robin_and_counts_what_is_there() -> None:
    family = gpus("0", "1", "2")
    assert cdi.choose(family, 1, 0) == gpus("0")
    assert cdi.choose(family, 2, 2) == gpus("2", "0")
    assert cdi.choose(family, 3, 4) == gpus("1", "2", "0")
    with pytest.raises(FailedPrecondition) as exc:
        cdi.choose(family, 4, 0)
    assert exc.value.message.endswith("GPU sandbox requested 4 GPUs, but only 3 selectable NVIDIA CDI GPU "
                                      "devices are available")
    with pytest.raises(FailedPrecondition) as exc:
        cdi.choose(gpus("0"), 2, 0)
    assert exc.value.message.endswith("but only 1 selectable NVIDIA CDI GPU device is available")


def test_selector_peeks_takes_and_rereads(tmp_path: Path) -> None:
    """Validation peeks (the cursor stays), create takes (it moves on by the count), and each
    call reads the spec files again, so a device added or removed counts at the next create."""
    (tmp_path / "a.json").write_text(spec_json("nvidia.com/gpu", "0", "1"))
    selector = cdi.GpuSelector((str(tmp_path),))
    assert selector.peek(1) == selector.peek(1) == gpus("0")
    assert selector.take(1) == gpus("0")
    assert selector.take(1) == gpus("1")
    assert selector.take(2) == gpus("0", "1")
    (tmp_path / "b.json").write_text(spec_json("nvidia.com/gpu", "2"))
    assert selector.take(2) == gpus("1", "2")  # cursor 4 over three devices
    (tmp_path / "a.json").unlink()
    (tmp_path / "b.json").unlink()
    with pytest.raises(DriverError) as exc:
        selector.peek(1)
    assert exc.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_capability_bits_follow_the_inventory(tmp_path: Path) -> None:
    """Both GPU bits are true exactly when a plain request can be served; the rest of the
    response, admission string included, stays byte-identical."""
    base = negotiation.capabilities(Settings(), limits=enforcement.BOTH)
    selector = cdi.GpuSelector((str(tmp_path),))
    for selectable in (False, True):
        current = negotiation.with_gpus(base, cdi.selectable(selector.inventory().gpus))
        gpu = current.resource_capabilities.gpu
        assert (gpu.count_selection_supported, gpu.default_selection_supported) == (selectable, selectable)
        assert current.resource_admission_policy == base.resource_admission_policy
        if not selectable:
            with pytest.raises(FailedPrecondition):
                selector.peek(1)
        else:
            assert selector.peek(1) == gpus("0")
        (tmp_path / "gpu.yaml").write_text("kind: nvidia.com/gpu\ndevices:\n- name: '0'\n")
    assert base.resource_capabilities.gpu.count_selection_supported is False  # not changed in place


# ---------------------------------------------------------------- doctor


def test_doctor_lists_the_devices_and_what_a_gpu_request_gets(tmp_path: Path) -> None:
    (tmp_path / "nvidia.yaml").write_text(NVIDIA_YAML)
    (tmp_path / "other.json").write_text(spec_json("vendor.example/accel", "a"))
    check = check_gpus([str(tmp_path)], cdi.scan([str(tmp_path)]))
    assert check.status == "OK"
    assert check.finding == (
        f"4 CDI device(s) in {tmp_path}: gpu.count is served round-robin from nvidia.com/gpu=1 "
        "(other CDI devices: vendor.example/accel=a)"
    )


def test_doctor_without_gpus_and_with_a_bad_file(tmp_path: Path) -> None:
    """No GPU is fine (OK, saying what a request gets); an unreadable spec is a WARN naming it."""
    none = check_gpus(["/etc/cdi", "/var/run/cdi"], cdi.scan([str(tmp_path)]))
    assert none.status == "OK"
    assert none.finding == ("0 CDI device(s) in /etc/cdi, /var/run/cdi: no NVIDIA GPU: gpu requests are refused "
                            "unless driver_config.cdi_devices names devices")
    (tmp_path / "all.yaml").write_text("kind: nvidia.com/gpu\ndevices:\n- name: all\n")
    (tmp_path / "bad.json").write_text("{")
    check = check_gpus([str(tmp_path)], cdi.scan([str(tmp_path)]))
    assert check.status == "WARN"
    assert "only nvidia.com/gpu=all: a plain gpu request is refused" in check.finding
    assert f"unreadable spec files, skipped: {tmp_path / 'bad.json'}: not a CDI spec" in check.finding


# ---------------------------------------------------------------- WSL2


def test_on_wsl2_a_default_request_gets_all(tmp_path: Path) -> None:
    """WSL2 (/dev/dxg, injected): a spec declaring only nvidia.com/gpu=all serves a default request
    with it, and the capability bits say so; indexed GPUs still come first; one GPU is all."""
    (tmp_path / "nvidia.yaml").write_text("kind: nvidia.com/gpu\ndevices:\n- name: all\n")
    plain, wsl2 = cdi.GpuSelector((str(tmp_path),)), cdi.GpuSelector((str(tmp_path),), all_by_default=True)
    assert (plain.selectable(), wsl2.selectable()) == (False, True)
    with pytest.raises(FailedPrecondition):
        plain.peek(1)
    assert wsl2.take(1) == [cdi.ALL_GPUS] and wsl2.take(1) == [cdi.ALL_GPUS]
    with pytest.raises(FailedPrecondition) as exc:
        wsl2.peek(2)
    assert "requested 2 GPUs, but only 1 selectable NVIDIA CDI GPU device is available" in exc.value.message
    assert cdi.default_family(gpus("all", "1"), all_by_default=True) == gpus("1")
    assert check_gpus([str(tmp_path)], cdi.scan([str(tmp_path)]), wsl2=True).finding.endswith(
        "gpu.count is served round-robin from nvidia.com/gpu=all")


def test_doctor_on_wsl2_without_the_spec_says_how_to_write_it(tmp_path: Path) -> None:
    (tmp_path / "other.json").write_text(spec_json("vendor.example/accel", "a"))
    check = check_gpus([str(tmp_path)], cdi.scan([str(tmp_path)]), wsl2=True)
    assert check.status == "WARN"
    assert check.finding == (f"WSL2 (/dev/dxg), but no CDI spec in {tmp_path} declares nvidia.com/gpu=all: "
                             "gpu requests are refused")
    assert "nvidia-ctk cdi generate --mode=wsl" in check.fix
    assert check_gpus([str(tmp_path)], cdi.scan([str(tmp_path)])).status == "OK"  # not WSL2: no GPU is fine


def test_wsl2_is_the_dxg_device(tmp_path: Path) -> None:
    from podmand.host import wsl

    assert wsl.wsl2(str(tmp_path / "dxg")) is False
    (tmp_path / "dxg").touch()
    assert wsl.wsl2(str(tmp_path / "dxg")) is True


def test_the_driver_serves_gpus_as_the_host_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's selector takes the host's WSL2 fact (its /dev/dxg, pointed elsewhere here)."""
    from podmand.driver import Driver
    from podmand.host import wsl
    from podmand.libpod import PodmanClient
    from tests.fakes.harness import Sink

    (tmp_path / "nvidia.yaml").write_text("kind: nvidia.com/gpu\ndevices:\n- name: all\n")
    monkeypatch.setattr(wsl, "DXG", str(tmp_path / "dxg"))

    def driver() -> Driver:
        return Driver(Settings(cdi_spec_dirs=[str(tmp_path)]), PodmanClient(str(tmp_path / "p.sock")),
                      tmp_path / "state", Sink())

    assert driver().gpus.selectable() is False
    (tmp_path / "dxg").touch()
    assert driver().gpus.selectable() is True and driver().gpus.peek(1) == [cdi.ALL_GPUS]
