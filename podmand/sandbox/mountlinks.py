"""Where a sandbox's mounts land: every mount's destination against the symbolic links in
the sandbox's image and in the mounts above it (issue 30).

Podman (its OCI runtime) places a mount by resolving the destination inside the
container's root, following symbolic links, but mounts in the order of the destinations
as written, shallowest first. A link lets a mount written deep land shallow, after the
mounts that belong there, and cover them. Tried on Podman 4.3.1, each ran the image's own
program as PID 1, root, in place of the supervisor podmand binds at
``/opt/openshell/bin/openshell-sandbox``: a caller's volume at ``/a/b/c/d/e`` with
``/a/b/c/d/e -> /opt/openshell/bin`` in the image (Podman copied the image's files there
into the volume); the image's own ``VOLUME /a/b/c/d/e`` there; ``/opt/openshell ->
/a/b/c/d`` with ``WORKDIR /a/b/c/d/bin`` (podmand's bind landed in that directory, the
workspace volume over it); and a caller's volume at ``/x/a/b/c/d`` below another at ``/x``
that held ``a/b/c/d -> /opt/openshell/bin``.

So every destination, podmand's own (ownmounts.destinations, whatever the settings), the
workspace's, each of the caller's mount targets and each of the image's ``VOLUME``s, is
looked up in the image one component at a time, shallowest first, and a link anywhere on
it is refused; a component missing from the image ends its walk (Podman makes it, a
directory), as does one that is neither a directory nor a link. And no destination may
lie below a mount whose files are not the image's, where podmand cannot look: a volume
(the workspace, a caller's, the image's anonymous ones, which the workload may write), a
bind or an image mount; only a tmpfs, empty at every start, may hold others.

Pure: the image's ``VOLUME``s as Podman places them (:func:`image_volumes`), the
destinations (:func:`walks`), one below another (:func:`nested`), what must still be
looked at given what is known of the image (:func:`to_look`), the first link found
(:func:`found`), and the refusals; :func:`checked_walks` and :func:`check_links` compose
them for the driver's two callers (a create, its provisioning), raising :class:`Refused`,
which says whether the caller's mount or the image is to blame. The driver looks (imagefiles.py) and keeps the answers
per image ID (driver/validation.py).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from ..errors import FailedPrecondition
from . import ownmounts, workspace
from .driverconfig import DEPTH, GLOB, LOOKUPS, WHERE, Mount, ancestors

# What a path is in the image, as looked up (the stat of its last component, an lstat).
LINK = "link"  # a symbolic link
HERE = "here"  # a directory
FILE = "file"  # anything else: nothing is below it
ABSENT = "absent"  # not there; nor is anything below it
# Mounts whose files are not the image's: nothing may be mounted below them.
HOLDERS = ("workspace", "volume")
CALLER_HOLDERS = ("volume", "bind", "image")


class Walk(NamedTuple):
    """One mount destination to look up in the image."""

    path: str  # normalised
    whose: str  # "own" (podmand's), "workspace", "caller" or "volume" (the image's VOLUME)
    mount: int = -1  # the caller's mount: its index in driver_config.mounts
    kind: str = ""  # the caller's mount: its type

    @property
    def holds(self) -> bool:
        """Whether its files are not the image's (nothing may be mounted below it)."""
        return self.whose in HOLDERS or (self.whose == "caller" and self.kind in CALLER_HOLDERS)


def image_volumes(image: str, declared: Iterable[str] | None) -> list[str]:
    """The image's ``VOLUME``s where Podman places them (Go's filepath.Clean), sorted;
    FailedPrecondition naming the image for one podmand cannot look up: not absolute, ``/``,
    glob characters, deeper than :data:`DEPTH`, or more than :data:`LOOKUPS` components in
    all."""
    out: set[str] = set()
    for raw in declared or ():
        shown = repr(raw[:256])
        if not raw.startswith("/"):
            raise FailedPrecondition(f"{workspace.IMAGE_WHERE}: {image}: VOLUME {shown} is not an absolute path")
        path = "/" + posixpath.normpath(raw).lstrip("/")
        if path == "/" or GLOB.search(path) or len(ancestors(path)) > DEPTH:
            raise FailedPrecondition(
                f"{workspace.IMAGE_WHERE}: {image}: VOLUME {shown} is '/', has glob characters or is deeper than "
                f"{DEPTH} directories: podmand cannot look it up in the image"
            )
        out.add(path)
    if len({a for v in out for a in ancestors(v)}) > LOOKUPS:
        raise FailedPrecondition(
            f"{workspace.IMAGE_WHERE}: {image}: its VOLUMEs have more than {LOOKUPS} distinct directories together "
            "(podmand looks each up in the image)"
        )
    return sorted(out)


def walks(workspace_path: str, mounts: Sequence[Mount], volumes: Sequence[str] = ()) -> list[Walk]:
    """podmand's own destinations, the workspace's, the caller's mount targets and the
    image's ``VOLUME``s (but those another mount replaces), in the order a refusal names
    the first found."""
    own = [Walk(d, "own") for d in ownmounts.destinations()]
    caller = [Walk(m.target, "caller", i, m.kind) for i, m in enumerate(mounts)]
    taken = {w.path for w in (*own, *caller)} | {workspace_path}
    return [*own, Walk(workspace_path, "workspace"), *caller, *(Walk(v, "volume") for v in volumes if v not in taken)]


def _below(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def nested(todo: Sequence[Walk]) -> tuple[Walk, Walk] | None:
    """The first destination below another mount whose files are not the image's, and
    that mount; None when none is."""
    for inner in todo:
        for outer in todo:
            if outer.holds and _below(inner.path, outer.path):
                return inner, outer
    return None


def _what(walk: Walk, image: str) -> str:
    if walk.whose == "workspace":
        return f"the workspace at {walk.path!r}"
    if walk.whose == "caller":
        return f"mounts[{walk.mount}] ({walk.kind} at {walk.path!r})"
    if walk.whose == "volume":
        return f"image {image}'s VOLUME {walk.path!r}" if image else f"its VOLUME {walk.path!r}"
    return f"OpenShell's {walk.path!r}"


def nested_refusal(image: str, inner: Walk, outer: Walk) -> FailedPrecondition:
    """The refusal of ``inner`` below ``outer``: named by the caller's mount target when
    one of them is the caller's (the inner first), else by the image."""
    caller = inner if inner.whose == "caller" else outer if outer.whose == "caller" else None
    where = f"{WHERE}.mounts[{caller.mount}].target" if caller else f"{workspace.IMAGE_WHERE}: {image}"
    named = image if caller else ""  # the image is named once
    return FailedPrecondition(
        f"{where}: {_what(inner, named)} would be mounted inside {_what(outer, named)}, whose files are not the "
        "image's: a symbolic link there would move it; podmand mounts nothing below a volume, bind or image mount"
    )


def first_link(path: str, known: Mapping[str, str]) -> str | None:
    """The first component of ``path`` that is a symbolic link in the image, "" when none
    is (up to the first that is absent or a file), None while one on the way is not known
    yet."""
    for component in ancestors(path):
        state = known.get(component)
        if state is None:
            return None
        if state == LINK:
            return component
        if state in (FILE, ABSENT):
            return ""
    return ""


def to_look(paths: Iterable[str], known: Mapping[str, str]) -> list[str]:
    """The components to look up next: of each of ``paths`` not answered yet, the first
    one not known (its ancestors are known to be no links), once each."""
    out: set[str] = set()
    for path in paths:
        if first_link(path, known) is None:
            out.add(next(c for c in ancestors(path) if c not in known))
    return sorted(out)


def found(todo: Iterable[Walk], known: Mapping[str, str]) -> tuple[Walk, str] | None:
    """The first of ``todo`` that passes through a symbolic link known in the image, and
    that link; None when none known does (those not known yet say nothing)."""
    for walk in todo:
        if link := first_link(walk.path, known):
            return walk, link
    return None


def answered(todo: Iterable[Walk], known: Mapping[str, str]) -> bool:
    """Whether ``known`` says of each of ``todo`` whether it passes through a link."""
    return all(first_link(w.path, known) is not None for w in todo)


def refusal(image: str, working_dir: str, walk: Walk, link: str) -> FailedPrecondition:
    """The refusal of ``walk`` through ``link`` in ``image`` (whose ``WorkingDir`` is
    ``working_dir``), naming the field: the caller's mount target, else the image."""
    if walk.whose == "workspace":
        return workspace.link_refusal(image, working_dir, walk.path, link)
    if walk.whose == "caller":
        return FailedPrecondition(
            f"{WHERE}.mounts[{walk.mount}].target: {walk.path!r} passes through {link!r}, a symbolic link in image "
            f"{image}; podmand mounts only on the image's own directories"
        )
    what = f"its VOLUME {walk.path!r}" if walk.whose == "volume" else f"OpenShell's {walk.path!r}"
    return FailedPrecondition(
        f"{workspace.IMAGE_WHERE}: {image}: {link!r} is a symbolic link in the image, on the way to {what}; "
        "podmand mounts only on the image's own directories"
    )


class Refused(FailedPrecondition):
    """A refusal of where the sandbox's mounts land, naming its field; ``caller``: the
    caller's mount is what is refused (driver_config), else the image."""

    def __init__(self, message: str, *, caller: bool) -> None:
        super().__init__(message)
        self.caller = caller


def checked_walks(
    image: str, working_dir: str, declared: Iterable[str] | None, mounts: Sequence[Mount], control: Iterable[str]
) -> tuple[str, list[Walk]]:
    """The workspace path of ``image`` (its ``WorkingDir``; ``control``: the sandbox's own
    paths) and every destination to look up (:func:`walks`), none below a mount whose files
    are not the image's; else :class:`Refused` (the workspace and the image's ``VOLUME``s
    are the image's to answer for)."""
    try:
        path = workspace.root(image, working_dir, control, tuple(mounts))
        todo = walks(path, mounts, image_volumes(image, declared))
    except FailedPrecondition as exc:
        raise Refused(exc.message, caller=False) from None
    if inside := nested(todo):
        raise Refused(nested_refusal(image, *inside).message, caller="caller" in (inside[0].whose, inside[1].whose))
    return path, todo


def check_links(image: str, working_dir: str, todo: Iterable[Walk], known: Mapping[str, str]) -> None:
    """:class:`Refused` when one of ``todo`` passes through a symbolic link ``known`` in the image."""
    if link := found(todo, known):
        raise Refused(refusal(image, working_dir, *link).message, caller=link[0].whose == "caller")
