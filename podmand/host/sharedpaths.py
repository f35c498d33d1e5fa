"""Podman must see podmand's state directory at the same path.

Token files are bind-mounted into sandboxes from the state directory, and the
bind-mount source is resolved by the Podman service, not by podmand.  When
podmand runs in a container (the gateway sidecar) with the host's Podman
socket, a state directory mounted at another path, or not at all, would only
fail later, sandbox by sandbox.  ``serve`` checks it once, up front, and
``doctor`` reports it.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from pathlib import Path

from .. import names
from ..libpod import PodmanClient, PodmanError, PodmanUnavailable
from ..sandbox.imagefiles import READER_PREFIX


@dataclass(frozen=True)
class Visibility:
    image: str  # the probe container's image; "" when no local image could be used
    error: str | None = None  # Podman's answer when the probe container could not be created
    hidden: bool = False  # that answer says Podman cannot find the probe file at its path


LIST_ATTEMPTS = 3


async def any_image(podman: PodmanClient) -> str:
    """A local image's ID; "" when there is none, or when Podman keeps failing to list
    them. Podman (4.3.1 seen) answers the listing 500 "image not known" when another client
    removes an image while it lists: asked again, as the store has changed by then. The
    probe is no reason to fail a start-up: without an image it proves nothing either way."""
    for attempt in range(1, LIST_ATTEMPTS + 1):
        try:
            images = await podman.list_images()
        except PodmanError:
            if attempt == LIST_ATTEMPTS:
                return ""
            continue
        return images[0] if images else ""
    return ""  # pragma: no cover


async def probe(podman: PodmanClient, state_dir: Path, image: str = "") -> Visibility:
    """Create a uniquely named file in ``state_dir`` and a never-started container
    bind-mounting it (from ``image``, else any local image); remove both."""
    if not image:
        image = await any_image(podman)
        if not image:
            return Visibility(image="")
    token = uuid.uuid4().hex[:12]
    probe_file = state_dir / f".visible-{token}"
    probe_file.write_bytes(b"podmand visibility probe\n")
    name = f"{READER_PREFIX}visible-{token}"
    spec = {
        "name": name,
        "image": image,
        "entrypoint": ["/nonexistent"],
        "labels": names.own_labels(),
        "netns": {"nsmode": "none"},
        "mounts": [{"destination": "/probe", "type": "bind", "source": str(probe_file), "options": ["bind", "ro"]}],
    }
    try:
        await podman.create_container(spec)
    except PodmanError as exc:
        return Visibility(image, exc.message, hidden=str(probe_file) in exc.message)
    finally:
        probe_file.unlink(missing_ok=True)
        with contextlib.suppress(PodmanError, PodmanUnavailable):
            await podman.remove_container(name, 0)
    return Visibility(image)


def fix(state_dir: Path) -> str:
    return (
        f"if podmand runs in a container, mount the host directory at the identical path "
        f"(e.g. -v {state_dir}:{state_dir}) and set PODMAND_STATE_DIR={state_dir}"
    )


async def state_dir_problem(podman: PodmanClient, state_dir: Path) -> str | None:
    """None unless Podman demonstrably cannot see ``state_dir``; then what to fix."""
    seen = await probe(podman, state_dir)
    if not seen.hidden:
        return None
    return (
        f"Podman cannot see podmand's state directory {state_dir} at that path ({seen.error}). "
        "Sandboxes bind-mount their token files from it, and Podman resolves those paths on its own host: "
        + fix(state_dir)
        + "."
    )
