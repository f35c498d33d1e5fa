"""Fence evidence: a digest of what ``podman inspect`` says actually confines a created container.

The gateway can be told, per runtime generation, what outer fence a sandbox
sits in. podmand reports the facts it observed (caps, user namespace, network,
mounts, seccomp, limits) as a canonical JSON document bound to the generation
by a SHA-256 digest, plus a few resource claims in readable form, as the proto
``DriverFenceEvidence``. Canonical means the digest does not change when
podman lists set-like values in another order. :func:`facts` reads those facts from an inspect.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from .._proto import compute_driver_pb2 as pb
from ..libpod import ContainerInspect, IDMappings

__all__ = ["SET_KEYS", "canonical", "digest", "evidence", "facts"]

SET_KEYS = ("effective_caps", "cap_add", "cap_drop", "networks")
"""Fact keys whose lists are sets: sorted before hashing."""


def _json_key(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _mount_key(mount: object) -> tuple[str, str]:
    dest = mount.get("destination", "") if isinstance(mount, dict) else ""
    return (str(dest), _json_key(mount))


def canonical(facts: Mapping[str, object]) -> str:
    """Facts as compact JSON with sorted keys, set-like lists sorted and mounts ordered by destination."""
    norm: dict[str, object] = dict(facts)
    for key in SET_KEYS:
        value = norm.get(key)
        if isinstance(value, list):
            norm[key] = sorted(value, key=_json_key)
    mounts = norm.get("mounts")
    if isinstance(mounts, list):
        norm["mounts"] = sorted(mounts, key=_mount_key)
    return json.dumps(norm, sort_keys=True, separators=(",", ":"))


def digest(facts: Mapping[str, object], generation: str) -> str:
    """``sha256:`` + hex SHA-256 of u64_be(len(generation)) ‖ generation ‖ canonical facts."""
    gen = generation.encode("utf-8")
    h = hashlib.sha256()
    h.update(len(gen).to_bytes(8, "big"))
    h.update(gen)
    h.update(canonical(facts).encode("utf-8"))
    return "sha256:" + h.hexdigest()


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _flag(value: object) -> str:
    return "true" if value is True else "false"


def _userns(facts: Mapping[str, object]) -> str:
    """Userns mode plus the id maps, e.g. ``private 0:1025:1024``; gid maps only when they differ."""
    uid_map, gid_map = _strings(facts.get("uid_map")), _strings(facts.get("gid_map"))
    parts = [str(facts.get("userns_mode", ""))]
    if uid_map:
        parts.append(",".join(uid_map))
    if gid_map and gid_map != uid_map:
        parts.append("gid=" + ",".join(gid_map))
    return " ".join(p for p in parts if p)


def evidence(facts: dict[str, object], generation: str) -> pb.DriverFenceEvidence:
    """The proto evidence for a container's inspected ``facts`` under ``generation``."""
    claims = {
        "podman.container_id": str(facts.get("container_id", "")),
        "podman.image_id": str(facts.get("image_id", "")),
        "podman.userns": _userns(facts),
        "podman.network_mode": str(facts.get("network_mode", "")),
        "podman.no_new_privileges": _flag(facts.get("no_new_privileges")),
        "podman.privileged": _flag(facts.get("privileged")),
    }
    return pb.DriverFenceEvidence(
        generation=generation, evidence_digest=digest(facts, generation), resource_claims=claims
    )


def facts(info: ContainerInspect) -> dict[str, object]:
    """What the created container really is, from inspect (observed, not requested)."""
    hc = info.host_config
    maps = hc.id_mappings or IDMappings()
    return {
        "container_id": info.id,
        "image_id": info.image,
        "effective_caps": sorted(info.effective_caps or []),
        "cap_add": sorted(hc.cap_add or []),
        "cap_drop": sorted(hc.cap_drop or []),
        "uid_map": list(maps.uid_map or []),
        "gid_map": list(maps.gid_map or []),
        "userns_mode": hc.userns_mode,
        "network_mode": hc.network_mode,
        "networks": sorted((info.network_settings.networks or {}).keys()),
        "mounts": [{"destination": m.destination, "type": m.type, "rw": m.rw} for m in info.mounts or []],
        "seccomp": next((o.split("=", 1)[1] for o in hc.security_opt or [] if o.startswith("seccomp=")), "default"),
        "no_new_privileges": "no-new-privileges" in (hc.security_opt or []),
        "privileged": hc.privileged,
        "memory_limit": hc.memory,
        "cpu_quota": hc.cpu_quota,
        "cpu_period": hc.cpu_period,
        "pids_limit": hc.pids_limit,
    }
