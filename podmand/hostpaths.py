"""Podman must see podmand's state directory at the same path.

Token files are bind-mounted into sandboxes from the state directory, and the
bind-mount source is resolved by the Podman service, not by podmand.  When
podmand runs in a container (the gateway sidecar) with the host's Podman
socket, a state directory mounted at another path, or not at all, would only
fail later, sandbox by sandbox.  This checks it once, up front.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

from . import names
from .imagefiles import READER_PREFIX
from .podman import PodmanClient, PodmanError, PodmanUnavailable


async def state_dir_problem(podman: PodmanClient, state_dir: Path) -> str | None:
    """None when Podman resolves ``state_dir`` to the same directory; else what to fix.

    A uniquely named probe file is created there and bind-mounted into a
    container that is created, never started, and removed: Podman refuses the
    create when it cannot find that file at that path."""
    images = await podman.list_images()
    if not images:
        return None  # nothing to create a probe container from; the first sandbox will tell
    token = uuid.uuid4().hex[:12]
    probe = state_dir / f".visible-{token}"
    probe.write_bytes(b"podmand visibility probe\n")
    name = f"{READER_PREFIX}visible-{token}"
    spec = {
        "name": name,
        "image": images[0],
        "entrypoint": ["/nonexistent"],
        "labels": {names.OWNER: names.OWNER_VALUE},
        "mounts": [{"destination": "/probe", "type": "bind", "source": str(probe), "options": ["bind", "ro"]}],
    }
    try:
        await podman.create_container(spec)
    except PodmanError as exc:
        return (
            f"Podman cannot see podmand's state directory {state_dir} at that path ({exc.message}). "
            "Sandboxes bind-mount their token files from it, and Podman resolves those paths on its own host. "
            f"If podmand runs in a container, mount the host directory at the identical path "
            f"(e.g. -v {state_dir}:{state_dir}) and set PODMAND_STATE_DIR={state_dir}."
        )
    finally:
        probe.unlink(missing_ok=True)
        with contextlib.suppress(PodmanError, PodmanUnavailable):
            await podman.remove_container(name, 0)
    return None
