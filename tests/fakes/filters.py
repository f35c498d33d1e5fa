"""Podman's list filters (the ``filters`` query of ``/containers/json`` and ``/volumes/json``),
as each version reads them, for the fake libpod (``FakeLibpod.podman6_filters`` switches).

What changed in 6.0, read from the source (containers/podman, tags v5.8.3 and v6.0.0-rc1):

- ``/volumes/json``: each filter key is one test; 5.8 keeps a volume that passes *any*
  of them (``libpod/runtime_volume.go:91-93`` at v5.8.3, as at v4.3.1 :96-98), 6.0 one
  that passes *all* (the same lines at v6.0.0-rc1).
- ``label!`` with several values: 5.8 drops what matches *all* of them (the negation of
  ``MatchLabelFilters``: ``pkg/domain/filters/containers.go:33-35``,
  ``pkg/domain/filters/volumes.go:36-38`` at v5.8.3), 6.0 what matches *any* of them
  (``MatchNegatedLabelFilters``, the same lines at v6.0.0-rc1).

Unchanged on every version: ``/containers/json`` keeps a container that passes every key
(``libpod/runtime_ctr.go:1285`` at v5.8.3, :1273 at v6.0.0-rc1, :1098 at v4.3.1); one
``label`` key's values must all match (``MatchLabelFilters``: ``k`` is present, ``k=v``
equal; vendored go.podman.io/common ``pkg/filters/filters.go:105-119``); ``name`` keeps a
name any of its regular expressions finds (``util.StringMatchRegexSlice``; a container's
with ``/`` removed from each).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any


def requested(query: Mapping[str, str]) -> dict[str, list[str]]:
    """The filters of a list request's query (libpod's JSON map of key to values)."""
    found: dict[str, list[str]] = json.loads(query.get("filters") or "{}")
    return found


def _label(value: str, labels: Mapping[str, str]) -> bool:
    key, eq, want = value.partition("=")
    return key in labels and (not eq or not want or labels[key] == want)


def labels_match(values: list[str], labels: Mapping[str, str]) -> bool:
    """``MatchLabelFilters``: every value matches."""
    return all(_label(v, labels) for v in values)


def labels_excluded(values: list[str], labels: Mapping[str, str], *, podman6: bool) -> bool:
    """Whether ``label!`` with ``values`` drops an object with ``labels``."""
    if podman6:
        return any(_label(v, labels) for v in values)  # MatchNegatedLabelFilters
    return labels_match(values, labels)  # !MatchLabelFilters


def _names(patterns: list[str], name: str, strip: bool) -> bool:
    return any(re.search(p.replace("/", "") if strip else p, name) for p in patterns)


def _tests(filters: Mapping[str, list[str]], name: str, labels: Mapping[str, str], *, podman6: bool,
           container: bool) -> list[bool]:
    known: dict[str, Callable[[list[str]], bool]] = {
        "label": lambda vs: labels_match(vs, labels),
        "label!": lambda vs: not labels_excluded(vs, labels, podman6=podman6),
        "name": lambda vs: _names(vs, name.removeprefix("/"), container),
    }
    out = []
    for key, values in filters.items():
        if key not in known:
            raise ValueError(f"{key!r} is a filter the fake libpod does not play")
        out.append(known[key](values))
    return out


def container_kept(filters: Mapping[str, list[str]], name: str, labels: Mapping[str, str], *, podman6: bool) -> bool:
    """Whether ``/containers/json`` lists this container: every key passes, on every version."""
    return all(_tests(filters, name, labels, podman6=podman6, container=True))


def volume_kept(filters: Mapping[str, list[str]], volume: Mapping[str, Any], *, podman6: bool) -> bool:
    """Whether ``/volumes/json`` lists this volume: every key passes on 6.0, any on 5.8."""
    tests = _tests(filters, volume.get("Name", ""), volume.get("Labels") or {}, podman6=podman6, container=False)
    if not tests:
        return True
    return all(tests) if podman6 else any(tests)
