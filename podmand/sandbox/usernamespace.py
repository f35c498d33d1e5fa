"""A sandbox's user namespace: the mode a request gets, and how libpod is told.

Rootless Podman maps each sandbox into a range of the user's subordinate ids;
the mode comes from the ``userns`` setting unless a template asks for the host's
namespace, which an operator must allow, or its ``driver_config.userns_mode`` asks
for keep-id, auto or nomap (upstream PR #2141), which an operator must allow too
(``allow_userns``). No request may name the host's namespace or another's there.

keep-id and nomap map every subordinate id the user has, and Podman counts a
container's ids as taken while it exists (containers/storage ``getAutoUserNS``): a
userns=auto container is then refused ("could not find enough available IDs" on
4.3.1, "not enough unused IDs in user namespace" on 5.4.2, both checked here), and
one made before shares its host ids with the keep-id one. So a sandbox may not ask
for keep-id or nomap beside the operator's auto, nor for auto beside keep-id or nomap.

A sandbox whose namespace maps podmand's own uid (host and keep-id; a private map of
host id 0) has a root that owns every file of podmand's mounted into it: remounted
read-write, the shared supervisor binary could be changed for every other sandbox
(issue 30). Such a mode needs the operator's ``allow_userns_own_uid``, and such a
sandbox gets a supervisor binary of its own (supervisor.py). An ``auto:size=N`` asks
for at most ``userns_max_size`` ids (by default the operator's own per-sandbox size),
so one sandbox cannot take the ids the next one needs.
"""

from __future__ import annotations

from typing import Any

from .._proto import compute_driver_pb2 as pb
from ..config import Settings, describe, invalid
from ..errors import FailedPrecondition, InvalidArgument
from ..libpod.versions import Features

# Every userns=auto sandbox gets this many ids unless `auto:size=N` says otherwise.
# Left to itself Podman sizes the range from the image's highest uid (65534 for
# images with `nobody`), which leaves room for a handful of sandboxes, and 4.3.1
# may then place it across two of the user's subordinate ranges, where the
# kernel refuses the map (runc: "can't get final child's PID from pipe").
# 1024 divides the usual 65536-id ranges, so a slot never straddles two.
AUTO_USERNS_SIZE = 1024
WHERE = "sandbox.spec.template.driver_config.userns_mode"
REQUESTABLE = "keep-id[:uid=N,gid=N], auto[:size=N] or nomap"
MODES = ("keep-id", "auto", "nomap")  # what a sandbox may ask for
SHARED = ("keep-id", "nomap")  # modes that map every subordinate id (rootless only)
MAX_AUTO_SIZE = 2**32 - 2
OWN_UID = "allow_userns_own_uid"  # the operator's opt-in to modes that map podmand's uid


def maps_own_uid(mode: str, settings: Settings) -> bool:
    """Whether a sandbox of ``mode`` maps podmand's own uid. host and keep-id do (rootless:
    the user itself; rootful: root, podmand's uid); private does when a ``uidmap`` entry
    covers host id 0, which is podmand's uid both ways (rootless Podman's intermediate
    namespace maps the user there)."""
    base = mode.partition(":")[0]
    if base == "private":
        return any(entry.split(":")[1] == "0" for entry in settings.uidmap)
    return base in ("host", "keep-id")


def own_uid_refusal(mode: str, settings: Settings) -> str | None:
    """Why ``mode`` may not run under ``settings`` (it maps podmand's uid, not allowed), or None."""
    if settings.allow_userns_own_uid or not maps_own_uid(mode, settings):
        return None
    return (
        f"userns {mode.partition(':')[0]} maps podmand's own uid into the sandbox, whose root could then change "
        f"podmand's files mounted there; an operator must enable {describe(OWN_UID)}"
    )


def max_auto_size(settings: Settings) -> int:
    """The most ids ``auto:size=N`` may ask for: ``userns_max_size``, else the operator's own size."""
    if settings.userns_max_size:
        return settings.userns_max_size
    base, _, params = settings.userns.partition(":")
    return auto_size(params) if base == "auto" else AUTO_USERNS_SIZE


def check_settings(settings: Settings) -> None:
    """The operator's own mode, and allow_host_userns, map podmand's uid only when allowed."""
    if why := own_uid_refusal(settings.userns, settings):
        raise invalid("userns", why)
    if settings.allow_host_userns and not settings.allow_userns_own_uid:
        raise invalid(
            "allow_host_userns",
            f"the host user namespace maps podmand's own uid into the sandbox; enable {describe(OWN_UID)} too",
        )


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


def requested(value: Any, settings: Settings, podman: Features) -> str:
    """The mode ``driver_config.userns_mode`` asks for, canonical ('' when unset or blank),
    or an error naming the field: the host's or another namespace never; the rest only with
    ``allow_userns``, and not mixed with the operator's mode (the module docstring)."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{WHERE}: must be a string: {REQUESTABLE}")
    text = value.strip()
    if not text:
        return ""
    base, sep, params = text.partition(":")
    if base in ("host", "ns"):
        whose = "the host's user namespace" if base == "host" else "another process's user namespace"
        raise InvalidArgument(f"{WHERE}: {base!r} is never allowed: it would run the sandbox in {whose}")
    if not settings.allow_userns:
        raise FailedPrecondition(
            f"{WHERE}: a sandbox's own user namespace mode is disabled; an operator must enable allow_userns "
            "(--allow-userns / PODMAND_ALLOW_USERNS)"
        )
    if base not in MODES:
        raise InvalidArgument(f"{WHERE}: {text[:64]!r} is not a mode a sandbox may ask for: {REQUESTABLE}")
    if (sep and not params) or (base == "nomap" and params):
        raise InvalidArgument(f"{WHERE}: {text[:64]!r} is malformed: {REQUESTABLE}")
    options = _options(params, ("uid", "gid") if base == "keep-id" else ("size",)) if params else {}
    if base == "auto" and "size" in options and not 1 <= options["size"] <= MAX_AUTO_SIZE:
        raise InvalidArgument(f"{WHERE}: auto size must be 1 to {MAX_AUTO_SIZE}")
    if base == "auto" and options.get("size", 0) > (most := max_auto_size(settings)):
        raise FailedPrecondition(
            f"{WHERE}: auto size {options['size']} is more than the {most} ids a sandbox may ask for; "
            f"an operator may raise {describe('userns_max_size')}"
        )
    if why := refusal(base, settings.userns_base, podman.rootless) or own_uid_refusal(base, settings):
        raise FailedPrecondition(f"{WHERE}: {why}")
    return base + (":" + ",".join(f"{k}={v}" for k, v in options.items()) if options else "")


def refusal(base: str, operator: str, rootless: bool | None) -> str | None:
    """Why a sandbox may not ask for mode ``base`` beside the operator's ``userns`` base
    and a Podman that is ``rootless`` (None: unknown); None when it may."""
    if (base in SHARED and operator == "auto") or (base == "auto" and operator in SHARED):
        return (
            f"{base} cannot run beside this podmand's userns={operator}: keep-id and nomap take every "
            "subordinate id, so Podman refuses userns=auto containers while one exists"
        )
    if base in SHARED and rootless is False:
        return f"{base} needs rootless Podman; this one runs as root"
    return None


def _options(params: str, keys: tuple[str, ...]) -> dict[str, int]:
    """``k=N,...`` with each key of ``keys`` at most once and N a u32."""
    out: dict[str, int] = {}
    for item in params.split(","):
        key, eq, number = item.strip().partition("=")
        if key not in keys or not eq or key in out:
            allowed = " and ".join(f"{k}=N" for k in keys)
            raise InvalidArgument(f"{WHERE}: option {item.strip()[:32]!r}: only {allowed}, each once")
        if not number.isascii() or not number.isdigit() or int(number) > 2**32 - 1:
            raise InvalidArgument(f"{WHERE}: {key} must be a non-negative integer, not {number[:32]!r}")
        out[key] = int(number)
    return out


def libpod(mode: str, settings: Settings) -> dict[str, Any]:
    """userns + idmappings: Podman 4.3.1 ignores nsmode=auto without AutoUserNs;
    ``private`` maps the ``uidmap``/``gidmap`` settings."""
    base, _, params = mode.partition(":")
    if base == "host":
        return {"userns": {"nsmode": "host"}}
    nsmode = "no-map" if base == "nomap" else base  # the CLI's nomap is the SpecGenerator's no-map (both 4.3, 5.x)
    out: dict[str, Any] = {"userns": {"nsmode": nsmode, **({"value": params} if params else {})}}
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


def id_limit(mode: str, settings: Settings, podman: Features) -> int | None:
    """Container ids ``< limit`` are mapped in a sandbox of ``mode`` (None: not known).
    auto: its size; private: the settings' maps; keep-id, nomap and rootless host: the
    user's ``podman`` subordinate ids, which keep-id and host map from 0 with the user's own
    id beside them (keep-id at uid=N, so a larger N leaves a gap) and nomap without it."""
    base, _, params = mode.partition(":")
    if base == "auto":
        return auto_size(params)
    if base == "private":
        return min(mapped_prefix(settings.uidmap), mapped_prefix(settings.gidmap))
    subids = podman.subordinate_ids
    if subids is None or base not in ("keep-id", "nomap", "host"):
        return None
    if base == "nomap":
        return subids
    pairs = (o.partition("=") for o in params.split(","))
    chosen = [int(v) for k, _, v in pairs if k in ("uid", "gid") and v.isdigit()]
    return min([subids + 1, *(subids for n in chosen if n > subids)])


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
