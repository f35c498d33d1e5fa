"""Unit tests for podmand.sandbox.resources: quantities, requests and the default limits."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

import pytest

from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.config import load as load_settings
from podmand.errors import ConfigError, InvalidArgument
from podmand.sandbox import resources
from podmand.sandbox.settings import CHECKS


def load(args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    return load_settings(args, environ, checks=CHECKS)


@pytest.mark.parametrize(
    ("text", "quota"),
    [("500m", 50_000), ("2", 200_000), ("0.5", 50_000), ("1.5", 150_000), ("10m", 1_000), (".25", 25_000)],
)
def test_parse_cpu(text: str, quota: int) -> None:
    """Kubernetes CPU quantities become a CFS quota per 100 ms period."""
    assert resources.parse_cpu("f", text) == quota


@pytest.mark.parametrize(("text", "needle"), [("5m", "minimum"), ("abc", "not a CPU quantity"),
                                              ("-1", "not a CPU quantity"), ("1.5m2", "not a CPU quantity"),
                                              ("\uff12", "not a CPU quantity"), ("\u0663", "not a CPU quantity")])
def test_parse_cpu_rejects(text: str, needle: str) -> None:
    """Unparseable or sub-millisecond quotas are rejected, naming the field."""
    with pytest.raises(InvalidArgument) as exc:
        resources.parse_cpu("res.cpu", text)
    assert exc.value.message.startswith("res.cpu:")
    assert needle in exc.value.message


@pytest.mark.parametrize(
    ("text", "size"),
    [("512Mi", 512 * 2**20), ("1.5Gi", int(1.5 * 2**30)), ("1G", 10**9), ("6Mi", 6 * 2**20), ("8388608", 2**23)],
)
def test_parse_memory(text: str, size: int) -> None:
    """Binary and decimal suffixes follow Kubernetes semantics."""
    assert resources.parse_memory("f", text) == size


@pytest.mark.parametrize(("text", "needle"), [("1k", "minimum"), ("x", "not a memory quantity"),
                                              ("1GB", "not a memory quantity"), ("1gi", "not a memory quantity"),
                                              ("\uff11Gi", "not a memory quantity")])
def test_parse_memory_rejects(text: str, needle: str) -> None:
    """Unknown units and sizes Podman would refuse are rejected, naming the field."""
    with pytest.raises(InvalidArgument) as exc:
        resources.parse_memory("res.mem", text)
    assert exc.value.message.startswith("res.mem:")
    assert needle in exc.value.message


@pytest.mark.parametrize(
    ("text", "shares"),
    [("1", 1024), ("250m", 256), ("100m", 102), ("1m", 2), ("0", 2), ("1.5", 1536), ("256", 262_144),
     ("1024", 262_144)],
)
def test_cpu_request_as_kubelet_shares(text: str, shares: int) -> None:
    """millicores * 1024 / 1000, rounded down, kept within [2, 262144] as the kubelet does."""
    assert resources.cpu_shares("f", text) == shares


def _res(**fields: str) -> pb.DriverResourceRequirements:
    return pb.DriverResourceRequirements(**fields)


def test_requests_equal_to_limits_are_fine_and_above_are_not() -> None:
    """Request == limit is the Guaranteed case; above it is refused naming the request and the limit."""
    got = resources.resources(_res(cpu_request="1500m", cpu_limit="1.5", memory_request="1Gi",
                                   memory_limit="1024Mi"), Settings())
    assert got == resources.Resources(150_000, 2**30, 1536, 2**30, pids_limit=2048)
    # The same quantity is never "over" its limit, however finely it is written.
    assert resources.resources(_res(cpu_request="1.000005", cpu_limit="1.000005"), Settings()).cpu_quota == 100_000
    with pytest.raises(InvalidArgument) as exc:
        resources.resources(_res(cpu_request="1501m", cpu_limit="1.5"), Settings())
    assert exc.value.message == "sandbox.spec.template.resources.cpu_request: '1501m' exceeds cpu_limit '1.5'"
    with pytest.raises(InvalidArgument) as exc:
        resources.resources(_res(memory_request="2Gi", memory_limit="1Gi"), Settings())
    assert exc.value.message == "sandbox.spec.template.resources.memory_request: '2Gi' exceeds memory_limit '1Gi'"


def test_libpod_omits_what_is_not_asked_for() -> None:
    """0 means none: no quota without a CPU limit, no shares without a request, and so on."""
    assert resources.Resources(0, 0).libpod() == {}
    assert resources.Resources(0, 0, cpu_shares=2).libpod() == {"cpu": {"shares": 2}}
    assert resources.Resources(50_000, 0, memory_reservation=2**30).libpod() == {
        "cpu": {"quota": 50_000, "period": 100_000},
        "memory": {"reservation": 2**30},
    }


@pytest.mark.parametrize("text", ["unlimited", "UNLIMITED", " 0 ", "0"])
def test_unlimited_defaults(text: str) -> None:
    settings = load(args=None, environ={"PODMAND_DEFAULT_CPU_LIMIT": text, "PODMAND_DEFAULT_MEMORY_LIMIT": text})
    assert (resources.default_cpu_quota(settings), resources.default_memory_limit(settings)) == (0, 0)


def test_default_settings_are_upstreams_two_cpus_and_four_gib() -> None:
    settings = load(args=None, environ={})
    assert (resources.default_cpu_quota(settings), resources.default_memory_limit(settings)) == (200_000, 4 * 2**30)


@pytest.mark.parametrize(
    ("env", "value", "needle"),
    [
        ("PODMAND_DEFAULT_CPU_LIMIT", "5m", "below the minimum of 10m"),
        ("PODMAND_DEFAULT_CPU_LIMIT", "none", "not a CPU quantity"),
        ("PODMAND_DEFAULT_MEMORY_LIMIT", "2Pi", "above the maximum of 1Pi"),
        ("PODMAND_DEFAULT_MEMORY_LIMIT", "4GB", "not a memory quantity"),
    ],
)
def test_bad_default_limits_stop_podmand(env: str, value: str, needle: str) -> None:
    """A default no template could give is refused at start, naming the setting."""
    with pytest.raises(ConfigError) as exc:
        load(args=None, environ={env: value})
    assert str(exc.value).startswith("invalid setting default_")
    assert needle in str(exc.value) and env in str(exc.value) and "or 'unlimited'" in str(exc.value)


def test_only_the_limits_podman_applies_are_asked_for() -> None:
    """issue 32: Podman 6.1.1 on cgroup v2 with no delegated controller passed the default pids
    limit to runc, which failed every start ("openat2 .../pids.max: no such file or
    directory"), then memory.swap.max once pids was off. A limit whose controller Podman does
    not apply is not sent; unknown controllers (None) keep every limit."""
    asked = resources.Resources(150_000, 2**30, 1536, 2**29, pids_limit=2048)
    assert resources.applicable(asked, None) == asked
    assert resources.applicable(asked, frozenset({"cpu", "memory", "pids", "hugetlb"})) == asked
    assert resources.applicable(asked, frozenset({"hugetlb"})).libpod() == {}
    assert resources.applicable(asked, frozenset({"memory", "pids"})).libpod() == {
        "memory": {"limit": 2**30, "reservation": 2**29}, "pids": {"limit": 2048}}
    assert resources.applicable(asked, frozenset({"cpu"})).libpod() == {
        "cpu": {"quota": 150_000, "period": 100_000, "shares": 1536}}
