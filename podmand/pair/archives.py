"""The pair's uploads: tar archives Podman's archive endpoint unpacks into the stopped
containers (contract §2.4), built in memory.

- the **channel** archive goes to the workload at ``/.openshell/channel``, the channel
  volume's mount point. Podman resolves that destination to the volume once, so the
  entries are relative to the volume: its root (``.``, 0755, root's), ``sandbox/`` (0711,
  the workload identity's: the runtime creates ``control.sock`` there and must be able
  to delete the bootstrap it has read) and ``bootstrap.json``, ``server.crt`` and
  ``server.key`` in it (0600, the identity's).
- the **workspace** archive goes to the workload at ``/sandbox``: only the volume's root,
  0700, the identity's.
- the **supervisor** archive goes to the supervisor at ``/``: ``.openshell/`` (0755,
  root's), ``.openshell/supervisor/`` (0700, the identity's) and the runtime descriptor,
  ``auth.json`` and the restart metadata in it (0600, the identity's): the supervisor's
  root filesystem, never a volume, so the tokens are nowhere the workload can mount.

GNU headers, numeric owners only (no user or group names for Podman to look up), mtime
0: the same launch gives the same bytes. Podman keeps these owners only when told to
(``PodmanClient.put_archive`` sends ``copyUIDGID=false``; libpod's default chowns every
entry to the container's user: §2.4's caveat, seen on rootless 4.3.1). One thing the
upload cannot hold: a volume root's own owner and mode (the ``.`` entries). Podman's
first mount of a new volume gives its root the owner and mode of the image's directory
at that path (else the container user's), after the upload: the workspace root comes
out as the image's ``/sandbox`` (0755 for the test image), which the runtime's launcher
form chowns to the identity.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass

from .. import names
from .documents import Documents, WorkloadIdentity

__all__ = [
    "Entry",
    "channel",
    "pack",
    "supervisor",
    "workspace",
]

FILE_MODE = 0o600


@dataclass(frozen=True)
class Entry:
    """One archive member: a directory (``data`` None) or a file; ``owned`` gives it the
    workload identity's uid:gid, else root's."""

    name: str
    mode: int
    owned: bool
    data: bytes | None = None


def pack(entries: list[Entry], identity: WorkloadIdentity) -> bytes:
    """The entries as a GNU tar, in order."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.type = tarfile.DIRTYPE if entry.data is None else tarfile.REGTYPE
            info.mode = entry.mode
            info.uid, info.gid = (identity.uid, identity.gid) if entry.owned else (0, 0)
            info.uname = info.gname = ""
            info.mtime = 0
            info.size = 0 if entry.data is None else len(entry.data)
            tar.addfile(info, None if entry.data is None else io.BytesIO(entry.data))
    return out.getvalue()


def _relative(path: str, root: str) -> str:
    """``path`` as an entry of an archive unpacked at ``root``."""
    return path.removeprefix(root).lstrip("/")


def channel(docs: Documents, identity: WorkloadIdentity) -> bytes:
    """The channel volume's contents, for ``names.CHANNEL_DIR``: the workload's files only."""
    root = names.CHANNEL_DIR
    return pack([
        Entry(".", 0o755, owned=False),
        Entry(_relative(names.CHANNEL_SANDBOX_DIR, root), 0o711, owned=True),
        Entry(_relative(names.BOOTSTRAP_PATH, root), FILE_MODE, owned=True, data=docs.bootstrap),
        Entry(_relative(names.SERVER_CERT_PATH, root), FILE_MODE, owned=True, data=docs.server_certificate),
        Entry(_relative(names.SERVER_KEY_PATH, root), FILE_MODE, owned=True, data=docs.server_key),
    ], identity)


def workspace(identity: WorkloadIdentity) -> bytes:
    """The workspace volume's root, for ``names.WORKSPACE_PATH``."""
    return pack([Entry(".", 0o700, owned=True)], identity)


def supervisor(docs: Documents, identity: WorkloadIdentity) -> bytes:
    """The supervisor's private files, for ``/`` of its root filesystem."""
    return pack([
        Entry(_relative(names.SUPERVISOR_DIR.rpartition("/")[0], "/"), 0o755, owned=False),
        Entry(_relative(names.SUPERVISOR_DIR, "/"), 0o700, owned=True),
        Entry(_relative(names.RUNTIME_DESCRIPTOR_PATH, "/"), FILE_MODE, owned=True, data=docs.runtime_descriptor),
        Entry(_relative(names.AUTH_BUNDLE_PATH, "/"), FILE_MODE, owned=True, data=docs.auth),
        Entry(_relative(names.RESTART_METADATA_PATH, "/"), FILE_MODE, owned=True, data=docs.restart_metadata),
    ], identity)
