"""What podmand refuses of an image before a sandbox runs from it.

A caller chooses its image, and an image reaches further than its files: Podman
copies its labels onto every container made from it, and a local image may be
another sandbox's private import. So an image is refused when its labels use the
prefixes OpenShell and podmand read (``names.RESERVED_LABEL_PREFIXES``: such a
container could pose as another tenant's sandbox) or exceed the bounds template
labels have (they travel in every Podman event), and when it is an imported rootfs
(``localhost/podmand-rootfs:<sandbox id>``) of any sandbox but the one running it.
The checks are pure: the caller says which field named the image and raises.
"""

from __future__ import annotations

from .. import names
from ..errors import InvalidArgument
from ..libpod import ImageInspect
from . import requestchecks
from .rootfs import REPOSITORY as ROOTFS_REPOSITORY  # one image per sandbox, tagged with its id

_PRIVATE = "podmand's store of imported rootfs tars: each is usable only by the sandbox that imported it"


def _repository(ref: str) -> str:
    """The repository a reference names, without tag or digest; a short name as Podman
    resolves a local image (``localhost/<name>``)."""
    repo = ref.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
    return repo if "/" in repo else f"localhost/{repo}"


def names_private_rootfs(ref: str) -> bool:
    """Whether a reference, as written, names the imported-rootfs repository."""
    return _repository(ref) == ROOTFS_REPOSITORY


def reference_refusal(ref: str) -> str | None:
    """Why a caller may not name ``ref`` (template.image, an image mount), or None."""
    return f"{ref!r} names {_PRIVATE}" if names_private_rootfs(ref) else None


def rootfs_refusal(image: ImageInspect, own: str = "") -> str | None:
    """Why the image may not run (or be mounted) here, or None: it bears an imported
    rootfs's tag and not ``own``, the sandbox's own import (reached by ID, an ID prefix,
    or the same content imported twice is the same image, with both tags)."""
    tags = [t for t in image.repo_tags or () if _repository(t) == ROOTFS_REPOSITORY]
    if tags and own not in tags:
        return f"image {image.id or '?'} is {tags[0]} in {_PRIVATE}"
    return None


def label_refusal(image: ImageInspect) -> str | None:
    """Why the image's labels may not be copied onto a sandbox's container, or None."""
    labels = image.config.labels or {}
    key = names.reserved_label(labels)
    if key is not None:
        prefixes = " and ".join(repr(p) for p in names.RESERVED_LABEL_PREFIXES)
        return (f"its label {requestchecks.shown(key)} uses a prefix reserved for OpenShell and podmand "
                f"({prefixes}); rebuild the image without it")
    try:
        requestchecks.bounded_labels("its labels", labels)
    except InvalidArgument as exc:
        return exc.message
    return None
