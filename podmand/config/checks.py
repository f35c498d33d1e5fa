"""Checks of loaded settings that a type alone cannot express: ranges, formats,
settings that only make sense together, and each feature's own validator.

``loading.load`` runs :func:`validate`, then each feature's own check of its
settings (``sandbox.settings.CHECKS``: they live beside the code that reads them).
It may canonicalise a value in place (``userns``). Errors come from
``options.invalid``: they name the setting, its flag and its variable.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re

from .. import tracing
from ..errors import ConfigError
from .options import DECLARED, describe, expected_value, invalid, mismatch, out_of_range, range_words
from .schema import Settings

USERNS_MODES = ("auto", "host", "keep-id", "nomap", "private")
LOG_LEVELS = ("debug", "info", "warning", "error")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_RESERVED_ADMISSION_KEYS = {"openshell.ai/managed-by", "openshell.ai/gateway-id", "openshell.ai/sandbox-workspace"}


def _check_idmap(field: str, entries: list[str]) -> None:
    for entry in entries:
        parts = entry.split(":")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise invalid(field, f"entry {entry!r} must be 'container_id:host_id:size'")
        if int(parts[2]) == 0:
            raise invalid(field, f"entry {entry!r}: size must be greater than 0")


def validate(s: Settings) -> None:
    """Raise ConfigError for the first bad setting; ``userns`` is canonicalised in place."""
    for field, (_, setting) in DECLARED.items():  # the ranges the schema declares
        if setting.minimum is None and setting.maximum is None:
            continue
        value = getattr(s, field)
        if isinstance(value, float) and not math.isfinite(value):
            raise invalid(field, mismatch(expected_value(field), value))
        if out_of_range(field, value):
            raise invalid(field, f"must be {range_words(field)}")
    if s.host_gateway_ip:
        try:
            ipaddress.ip_address(s.host_gateway_ip)
        except ValueError as exc:
            raise invalid("host_gateway_ip", f"{s.host_gateway_ip!r} is not an IP address") from exc
    tls = {"tls_ca": s.tls_ca, "tls_cert": s.tls_cert, "tls_key": s.tls_key}
    if any(tls.values()) and not all(tls.values()):
        missing = ", ".join(describe(k) for k, v in tls.items() if not v)
        raise ConfigError(f"partial TLS configuration: all three TLS paths must be set together; missing {missing}")
    for key, path in tls.items():
        if path and not os.path.isfile(path):
            raise invalid(key, f"{path} is not a readable file")
    if url_scheme(s.grpc_endpoint) == "https" and not s.tls_enabled:
        raise invalid(
            "grpc_endpoint",
            "an https:// gateway endpoint needs TLS material: set tls_ca, tls_cert and tls_key "
            "(--podman-tls-ca/-cert/-key / OPENSHELL_PODMAN_TLS_CA/_CERT/_KEY); without them the "
            "supervisor exits with 'OPENSHELL_TLS_CA is required'",
        )
    if s.otlp_endpoint and (problem := tracing.endpoint_problem(s.otlp_endpoint)):
        raise invalid("otlp_endpoint", problem)
    if not s.gateway_name.isprintable():
        raise invalid("gateway_name", f"{s.gateway_name!r} holds a control character")
    if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", s.network_name):
        raise invalid("network_name", "must match [a-zA-Z0-9][a-zA-Z0-9_.-]*")
    if not s.ssh_socket_path.startswith("/"):
        raise invalid("ssh_socket_path", "must be an absolute path")
    if s.log_level.lower() not in (*LOG_LEVELS, "warn"):
        raise invalid("log_level", mismatch(f"one of: {', '.join(LOG_LEVELS)}", s.log_level))
    base, _, params = s.userns.partition(":")
    if base.lower() == "no-map":
        base = "nomap"
    if base.lower() not in USERNS_MODES:
        raise invalid("userns", f"unsupported userns mode {base!r}; supported modes: {', '.join(USERNS_MODES)}")
    if params and base.lower() not in ("auto", "keep-id"):
        raise invalid("userns", f"userns mode {base!r} does not accept parameters")
    s.userns = base.lower() + (":" + params if params else "")
    if s.userns == "private" and not (s.uidmap and s.gidmap):
        raise invalid("userns", "userns mode 'private' requires at least one uidmap and one gidmap entry")
    if (s.uidmap or s.gidmap) and s.userns != "private":
        raise invalid("uidmap", "uidmap/gidmap are only valid with userns = private")
    _check_idmap("uidmap", s.uidmap)
    _check_idmap("gidmap", s.gidmap)
    if s.listen_tcp:
        host, _, port = s.listen_tcp.rpartition(":")
        host = host.strip("[]")
        try:
            loopback = ipaddress.ip_address(host).is_loopback if host != "localhost" else True
        except ValueError:
            loopback = False
        if not loopback or not port.isdigit() or not 0 < int(port) < 65536:
            raise invalid(
                "listen_tcp", "must be a loopback host:port such as 127.0.0.1:50061 (TCP has no authentication)"
            )
    if s.admission_enabled and (
        not s.admission_labels or all(v == "${workspace}" for v in s.admission_labels.values())
    ):
        raise invalid("admission_labels", "enabled admission needs at least one fixed required label")
    for key, value in s.admission_labels.items():
        if key in _RESERVED_ADMISSION_KEYS or not _LABEL_KEY.match(key):
            raise invalid("admission_labels", f"invalid label key {key!r}")
        if value != "${workspace}" and not _LABEL_VALUE.match(value):
            raise invalid("admission_labels", f"invalid label value {value!r} for {key!r}")


def url_scheme(url: str) -> str:
    """The lower-case scheme of ``url``, '' without one."""
    scheme, sep, _ = url.partition("://")
    return scheme.strip().lower() if sep else ""
