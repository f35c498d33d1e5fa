"""Where a sandbox's workspace lives: the path its volume is mounted at and the
supervisor's ``--workdir``, chosen from the image's ``WorkingDir``, and the workdirs
refused, with the reason.

Upstream's Podman driver (NVIDIA/OpenShell PR #2715) and its Docker driver (at
2f7fb65) make the image's working directory the workspace: an image built with
``WORKDIR /app`` finds its files and its persistent volume there. An empty
``WorkingDir``, ``/`` and ``/sandbox`` keep the managed ``/sandbox``. A workdir must be
a normalised absolute path, clear both ways of the kernel's ``/proc``, ``/sys`` and
``/dev`` (the volume would replace them under the root supervisor), of the system's
executable and library roots (the supervisor's helpers run from them), of OpenShell's
control paths (the supervisor binary, its secrets, the SSH socket) and of the caller's
mounts (one at the workdir or above it would hide the volume). Pure: the driver reads
``WorkingDir`` from the pinned image and calls :func:`root`.

The path is checked as a string here, and against the image's own files by the driver
with every other mount's destination (mountlinks.py): Podman resolves a mount's
destination inside the image's root, following its symbolic links, but orders the mounts
by the unresolved path's depth, so a link on the workspace's path
(``/a/b/c/d/e -> /opt/openshell/bin``) would put the volume over the binds podmand made
before it. A link anywhere on the path is refused (:func:`link_refusal`); so are more
than :data:`DEPTH` components and glob characters, which Podman's stat would expand.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .. import names
from ..errors import FailedPrecondition
from .driverconfig import DEPTH, GLOB, WHERE, Mount

IMAGE_WHERE = "sandbox.spec.template.image"
DEFAULT = names.WORKSPACE_PATH
KERNEL_ROOTS = ("/proc", "/sys", "/dev")
SYSTEM_ROOTS = (
    "/bin", "/sbin", "/lib", "/lib64", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/local/bin",
    "/usr/local/sbin",
)
CONTROL_ROOTS = tuple(r for r in names.RESERVED_ROOTS if r not in (*KERNEL_ROOTS, DEFAULT))
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _overlap(a: str, b: str) -> bool:
    return _under(a, b) or _under(b, a)


def normalized(working_dir: str) -> str:
    """The workspace path ``working_dir`` asks for, or raise FailedPrecondition with why
    it cannot be one; the overlaps are :func:`refusal`'s."""
    shown = repr(working_dir[:256])
    if working_dir != working_dir.strip() or _CONTROL.search(working_dir):
        raise FailedPrecondition(f"WorkingDir {shown} has surrounding whitespace or control characters")
    if not working_dir.startswith("/"):
        raise FailedPrecondition(f"WorkingDir {shown} is not an absolute path")
    parts = working_dir.rstrip("/").split("/")[1:]
    if any(p in ("", ".", "..") for p in parts) or len(working_dir) > 4096:
        raise FailedPrecondition(f"WorkingDir {shown} is not a normalised path (empty, '.' or '..' segments)")
    if GLOB.search(working_dir):
        raise FailedPrecondition(f"WorkingDir {shown} has glob characters (*, ?, [ or \\), which podmand cannot "
                                 "look up in the image")
    if len(parts) > DEPTH:
        raise FailedPrecondition(f"WorkingDir {shown} is deeper than {DEPTH} directories")
    return "/" + "/".join(parts)


def refusal(path: str, control_paths: Iterable[str] = ()) -> str | None:
    """Why the normalised ``path`` cannot be the workspace, or None."""
    for what, roots in (
        ("the kernel's", KERNEL_ROOTS),
        ("the system root", SYSTEM_ROOTS),
        ("OpenShell's control path", (*CONTROL_ROOTS, *control_paths)),
    ):
        for reserved in roots:
            if _overlap(path, reserved):
                return f"WorkingDir {path!r} conflicts with {what} {reserved!r}"
    return None


def root(
    image: str, working_dir: str, control_paths: Iterable[str] = (), mounts: tuple[Mount, ...] = ()
) -> str:
    """The workspace path for ``image``, whose ``WorkingDir`` is ``working_dir``;
    FailedPrecondition naming the image's WorkingDir (or the caller's mount) when refused.
    ``control_paths``: the sandbox's own (the SSH socket); ``mounts``: the caller's."""
    if working_dir in ("", "/"):
        return DEFAULT
    try:
        path = normalized(working_dir)
        if why := refusal(path, control_paths):
            raise FailedPrecondition(why)
    except FailedPrecondition as exc:
        raise FailedPrecondition(f"{IMAGE_WHERE}: {image}: {exc.message}") from None
    if path == DEFAULT:
        return DEFAULT
    for i, mount in enumerate(mounts):
        if _under(path, mount.target):
            raise FailedPrecondition(
                f"{WHERE}.mounts[{i}].target: {mount.target!r} would hide the workspace at the image's "
                f"WorkingDir {path!r}"
            )
    return path


def link_refusal(image: str, working_dir: str, path: str, link: str) -> FailedPrecondition:
    """The refusal of ``image`` whose workspace ``path`` (from its ``working_dir``) passes
    through ``link``, a symbolic link in the image: named by the image and both paths."""
    where = f"WorkingDir {path!r}" if working_dir not in ("", "/") else f"the workspace {path!r} (no WorkingDir)"
    return FailedPrecondition(
        f"{IMAGE_WHERE}: {image}: {where} passes through {link!r}, a symbolic link in the image; podmand mounts "
        "the workspace only on the image's own directories"
    )
