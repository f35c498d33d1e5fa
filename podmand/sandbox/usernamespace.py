"""A sandbox's user namespace: the mode a request gets, and how libpod is told.

Rootless Podman maps each sandbox into a range of the user's subordinate ids;
the mode comes from the ``userns`` setting unless a template asks for the host's
namespace, which an operator must allow.
"""

from __future__ import annotations

from typing import Any

from .._proto import compute_driver_pb2 as pb
from ..config import Settings
from ..errors import FailedPrecondition

# Every userns=auto sandbox gets this many ids unless `auto:size=N` says otherwise.
# Left to itself Podman sizes the range from the image's highest uid (65534 for
# images with `nobody`), which leaves room for a handful of sandboxes, and 4.3.1
# may then place it across two of the user's subordinate ranges, where the
# kernel refuses the map (runc: "can't get final child's PID from pipe").
# 1024 divides the usual 65536-id ranges, so a slot never straddles two.
AUTO_USERNS_SIZE = 1024


def mode(tpl: pb.DriverSandboxTemplate, settings: Settings) -> str:
    """The user-namespace mode; a caller may ask for less isolation (the host's
    namespace: root with podmand's capabilities) only when an operator allows it."""
    if not tpl.HasField("user_namespaces"):
        return settings.userns
    if not tpl.user_namespaces:
        if not settings.allow_host_userns:
            raise FailedPrecondition(
                "sandbox.spec.template.user_namespaces: false would run the sandbox in the host user namespace; "
                "an operator must enable allow_host_userns (--allow-host-userns / PODMAND_ALLOW_HOST_USERNS)"
            )
        return "host"
    return settings.userns if settings.userns_base != "host" else "auto"


def libpod(mode: str, settings: Settings) -> dict[str, Any]:
    """userns + idmappings: Podman 4.3.1 ignores nsmode=auto without AutoUserNs;
    ``private`` maps the ``uidmap``/``gidmap`` settings."""
    base, _, params = mode.partition(":")
    if base == "host":
        return {"userns": {"nsmode": "host"}}
    out: dict[str, Any] = {"userns": {"nsmode": base, **({"value": params} if params else {})}}
    if base == "auto":
        out["idmappings"] = {
            "HostUIDMapping": False,
            "HostGIDMapping": False,
            "AutoUserNs": True,
            "AutoUserNsOpts": {"Size": auto_size(params)},
        }
    if mode == "private":
        out["idmappings"] = {
            "HostUIDMapping": False,
            "HostGIDMapping": False,
            "UIDMap": _idmap(settings.uidmap),
            "GIDMap": _idmap(settings.gidmap),
        }
    return out


def auto_size(params: str) -> int:
    """The id count of ``auto[:opts]``: ``size=N``, else AUTO_USERNS_SIZE."""
    for item in params.split(","):
        key, _, value = item.partition("=")
        if key == "size" and value.isdigit():
            return int(value)
    return AUTO_USERNS_SIZE


def mapped_prefix(entries: list[str]) -> int:
    """How many ids from 0 up a ``container:host:size`` map covers without a gap."""
    end = 0
    for c, _h, size in sorted(tuple(int(x) for x in e.split(":")) for e in entries):
        if c > end:
            break
        end = max(end, c + size)
    return end


def _idmap(entries: list[str]) -> list[dict[str, int]]:
    out = []
    for entry in entries:
        c, h, s = (int(x) for x in entry.split(":"))
        out.append({"container_id": c, "host_id": h, "size": s})
    return out
