"""The paths of libpod's endpoints: how a request target is built, and the route
template it belongs to.

A target is the path with libpod's versioned prefix and the query, each name
percent-encoded as one segment (:func:`quote`). A route template is what an
observer of calls (``calls``) is told instead: the path without the version
prefix or the query, and every name (a container, image, volume or network)
replaced by ``{name}``, e.g. ``/libpod/containers/{name}/json``. It never holds a
name, an image reference, a filter or a credential, and there are a few dozen
of them, so it can name a span or a metric.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

import msgspec

API_PREFIX = "/v4.0.0/libpod"
_VERSIONED = API_PREFIX.rpartition("/")[0]  # "/v4.0.0": what the template leaves out
# The second segment of these collections is an action or a listing, not a name.
_FIXED = {"json", "create", "pull", "import", "prune", "exists"}
_COLLECTIONS = {"containers", "images", "volumes", "networks", "pods"}


def quote(name: str) -> str:
    """Percent-encode one path segment (image references contain '/' and ':')."""
    return urllib.parse.quote(name, safe="")


def target(path: str, query: Mapping[str, Any] | None = None) -> str:
    """The request target: libpod's prefix (not for ``/_ping``) and the query, where a
    list repeats its key, a bool is true/false and a dict is JSON (libpod's filters)."""
    full = path if path.startswith("/_") else API_PREFIX + path
    items: list[tuple[str, str]] = []
    for key, value in (query or {}).items():
        if value is None:
            continue
        if isinstance(value, list):
            items += [(key, str(v)) for v in value]
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, dict):
            value = msgspec.json.encode(value).decode()
        items.append((key, str(value)))
    if items:
        full += "?" + urllib.parse.urlencode(items, quote_via=urllib.parse.quote)
    return full


def template(method: str, request_target: str) -> str:
    """The route ``request_target`` belongs to: ``/libpod/containers/{name}/start``."""
    path = request_target.partition("?")[0]
    if path.startswith(_VERSIONED + "/"):
        path = path[len(_VERSIONED):]
    parts = path.split("/")  # ["", "libpod", collection, name-or-action, ...]
    if len(parts) >= 4 and parts[1] == "libpod" and parts[2] in _COLLECTIONS:
        fixed = len(parts) == 4 and method != "DELETE" and parts[3] in _FIXED
        if not fixed:
            parts[3] = "{name}"
    return "/".join(parts)
