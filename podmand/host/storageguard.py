"""The Podman store a first start would make, and whether the service is asked for overlay
instead. Its own module because these are pure reads of the user's environment and
files, which doctor reports on too, with no process started.

A first use of rootless Podman 4.3 with no storage.conf anywhere silently makes a
slow ``vfs`` store; when the store does not exist yet and nothing names a driver,
the service podmand starts is given ``--storage-driver=overlay`` instead.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SYSTEM_STORAGE_CONFS = ("/etc/containers/storage.conf", "/usr/share/containers/storage.conf")
OVERLAY_FLAG = "--storage-driver=overlay"


@dataclass(frozen=True)
class StorageFacts:
    store: str  # the user's default graph root
    store_exists: bool
    driver_source: str  # what names a storage driver ("" when nothing does)


def storage_confs(environ: Mapping[str, str], home: str) -> list[str]:
    """The storage.conf files rootless Podman reads, most specific first."""
    if environ.get("CONTAINERS_STORAGE_CONF"):
        return [environ["CONTAINERS_STORAGE_CONF"]]
    config_home = environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return [os.path.join(config_home, "containers", "storage.conf"), *SYSTEM_STORAGE_CONFS]


def names_driver(text: str) -> bool:
    """Whether a storage.conf sets ``[storage] driver``; one that cannot be read counts (podmand
    leaves a configuration it does not understand to Podman)."""
    try:
        storage = tomllib.loads(text).get("storage", {})
    except tomllib.TOMLDecodeError:
        return True
    return isinstance(storage, dict) and bool(storage.get("driver"))


def default_store(environ: Mapping[str, str], home: str, uid: int) -> str:
    if uid == 0:  # rootful Podman's graph root
        return "/var/lib/containers/storage"
    data_home = environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    return os.path.join(data_home, "containers", "storage")


def storage_facts(environ: Mapping[str, str] | None = None, uid: int | None = None) -> StorageFacts:
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    store = default_store(env, home, os.geteuid() if uid is None else uid)
    source = "STORAGE_DRIVER" if env.get("STORAGE_DRIVER") else ""
    for path in storage_confs(env, home):
        if source:
            break
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if names_driver(text):
            source = path
    return StorageFacts(store, os.path.exists(store), source)


def storage_flags(facts: StorageFacts) -> list[str]:
    """``--storage-driver=overlay`` only for a store that does not exist yet and no configured driver."""
    return [] if facts.store_exists or facts.driver_source else [OVERLAY_FLAG]
