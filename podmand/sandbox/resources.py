"""CPU and memory: Kubernetes quantities, the limits and requests a sandbox gets.

Limits become a CFS quota and a memory limit; requests become CPU shares (cgroup v2
``cpu.weight``, which the runtime derives from them) and a memory reservation, as
the kubelet maps them. An unset limit takes the operator's default, which may be
``unlimited``. Pure functions, except that nothing here is: the operator's
settings are checked by :func:`check_settings` at start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .. import config
from .._proto import compute_driver_pb2 as pb
from ..errors import InvalidArgument

_CPU_RE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(m?)", re.ASCII)  # ASCII: "２" is no quantity
_MEM_RE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|k|K|M|G|T|P|E)?", re.ASCII)
_MEM_UNITS = {
    "": 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
MAX_QUANTITY = 64  # characters of a resource quantity
CPU_PERIOD = 100_000
MIN_CPU_QUOTA = 1_000  # the kernel refuses a CFS quota below 1 ms
MAX_CPUS = 1024  # host-independent bound: a quota Podman and the kernel accept
MIN_MEMORY = 6 * 2**20  # Podman refuses a limit or reservation below 6 MiB
MAX_MEMORY = 2**50  # 1 PiB: far below int64, far above any host
# The kubelet's CPU request -> shares mapping (cgroup v1 cpu.shares; v2 cpu.weight is derived from it).
MIN_SHARES = 2
MAX_SHARES = 262_144
UNLIMITED = ("unlimited", "0")  # operator defaults only: no quota / no memory limit
BASE = "sandbox.spec.template.resources"


@dataclass(frozen=True)
class Resources:
    """What Podman is asked for; 0 means none (no quota, no limit, no weight, no reservation)."""

    cpu_quota: int
    memory_limit: int
    cpu_shares: int = 0
    memory_reservation: int = 0
    pids_limit: int = 0

    def libpod(self) -> dict[str, Any]:
        """The cpu and memory parts of libpod's ``resource_limits``."""
        out: dict[str, Any] = {}
        cpu: dict[str, int] = {}
        if self.cpu_quota:
            cpu.update(quota=self.cpu_quota, period=CPU_PERIOD)
        if self.cpu_shares:
            cpu["shares"] = self.cpu_shares
        memory: dict[str, int] = {}
        if self.memory_limit:
            memory["limit"] = self.memory_limit
        if self.memory_reservation:
            memory["reservation"] = self.memory_reservation
        if cpu:
            out["cpu"] = cpu
        if memory:
            out["memory"] = memory
        if self.pids_limit:
            out["pids"] = {"limit": self.pids_limit}
        return out


def _shown(value: str) -> str:
    return repr(value) if len(value) <= MAX_QUANTITY else f"({len(value)} characters)"


def _cores(where: str, text: str) -> Decimal:
    match = _CPU_RE.fullmatch(text.strip()) if len(text) <= MAX_QUANTITY else None
    if not match:
        raise InvalidArgument(f"{where}: {_shown(text)} is not a CPU quantity (e.g. 500m, 2, 1.5)")
    cores = Decimal(match.group(1)) / (1000 if match.group(2) else 1)
    if cores > MAX_CPUS:
        raise InvalidArgument(f"{where}: {text!r} is above the maximum of {MAX_CPUS} CPUs")
    return cores


def parse_cpu(where: str, text: str) -> int:
    """A Kubernetes CPU quantity as a CFS quota in microseconds per 100 ms."""
    quota = int(_cores(where, text) * CPU_PERIOD)
    if quota < MIN_CPU_QUOTA:
        raise InvalidArgument(f"{where}: {text!r} is below the minimum of 10m")
    return quota


def cpu_shares(where: str, text: str) -> int:
    """A CPU request as the kubelet's shares: millicores * 1024 / 1000, within [2, 262144]."""
    millicores = int(_cores(where, text) * 1000)
    return min(max(millicores * 1024 // 1000, MIN_SHARES), MAX_SHARES)


def parse_memory(where: str, text: str) -> int:
    """A Kubernetes memory quantity in bytes."""
    match = _MEM_RE.fullmatch(text.strip()) if len(text) <= MAX_QUANTITY else None
    if not match:
        raise InvalidArgument(f"{where}: {_shown(text)} is not a memory quantity (e.g. 512Mi, 4Gi, 1.5G)")
    value = int(Decimal(match.group(1)) * _MEM_UNITS[match.group(2) or ""])
    if value < MIN_MEMORY:
        raise InvalidArgument(f"{where}: {text!r} is below the minimum of 6Mi")
    if value > MAX_MEMORY:
        raise InvalidArgument(f"{where}: {text!r} is above the maximum of 1Pi")
    return value


def is_unlimited(text: str) -> bool:
    return text.strip().lower() in UNLIMITED


def default_cpu_quota(settings: config.Settings) -> int:
    """The quota of a sandbox without cpu_limit (0: none)."""
    text = settings.default_cpu_limit
    return 0 if is_unlimited(text) else parse_cpu("default_cpu_limit", text)


def default_memory_limit(settings: config.Settings) -> int:
    """The memory limit of a sandbox without memory_limit (0: none)."""
    text = settings.default_memory_limit
    return 0 if is_unlimited(text) else parse_memory("default_memory_limit", text)


def _over(field: str, request: str, limit_field: str, limit: str, explicit: bool) -> InvalidArgument:
    if explicit:
        return InvalidArgument(f"{BASE}.{field}: {request!r} exceeds {limit_field} {limit!r}")
    return InvalidArgument(
        f"{BASE}.{field}: {request!r} exceeds the default {limit_field} {limit!r} (the operator's "
        f"default_{limit_field}); set {limit_field} as well"
    )


def resources(res: pb.DriverResourceRequirements, settings: config.Settings) -> Resources:
    """Limits and requests of one template; a request above its limit (given, or the default)
    is INVALID_ARGUMENT naming the request, as Kubernetes refuses it."""
    cpu = parse_cpu(f"{BASE}.cpu_limit", res.cpu_limit) if res.cpu_limit else default_cpu_quota(settings)
    mem = parse_memory(f"{BASE}.memory_limit", res.memory_limit) if res.memory_limit else default_memory_limit(settings)
    shares = reservation = 0
    if res.cpu_request:
        shares = cpu_shares(f"{BASE}.cpu_request", res.cpu_request)
        # Truncated as the limit's quota is, so a request equal to its limit is never "over".
        if cpu and int(_cores(f"{BASE}.cpu_request", res.cpu_request) * CPU_PERIOD) > cpu:
            limit = res.cpu_limit or settings.default_cpu_limit
            raise _over("cpu_request", res.cpu_request, "cpu_limit", limit, bool(res.cpu_limit))
    if res.memory_request:
        reservation = parse_memory(f"{BASE}.memory_request", res.memory_request)
        if mem and reservation > mem:
            limit = res.memory_limit or settings.default_memory_limit
            raise _over("memory_request", res.memory_request, "memory_limit", limit, bool(res.memory_limit))
    return Resources(cpu, mem, shares, reservation, settings.pids_limit)


def applicable(limits: Resources, controllers: frozenset[str] | None) -> Resources:
    """``limits`` less those whose cgroup controller Podman does not apply (``controllers``,
    libpod.versions.Features.limited; None: not known, all kept): Podman would pass them to
    the runtime, which fails the start where the controller is missing (cgroup v2 without
    delegation, Podman 6.x), or drop them itself with a warning (cgroup v1 rootless)."""
    if controllers is None:
        return limits
    cpu = "cpu" in controllers
    memory = "memory" in controllers
    return Resources(
        limits.cpu_quota if cpu else 0,
        limits.memory_limit if memory else 0,
        limits.cpu_shares if cpu else 0,
        limits.memory_reservation if memory else 0,
        limits.pids_limit if "pids" in controllers else 0,
    )


def check_settings(settings: config.Settings) -> None:
    """The default limits: a quantity a template could give, or ``unlimited``/``0``."""
    for field, parse in (("default_cpu_limit", parse_cpu), ("default_memory_limit", parse_memory)):
        text = getattr(settings, field)
        if is_unlimited(text):
            continue
        try:
            parse(field, text)
        except InvalidArgument as exc:
            why = exc.message.removeprefix(f"{field}: ")
            raise config.invalid(field, f"{why}; or 'unlimited'") from None
