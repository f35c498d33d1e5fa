"""The decisions of ``podmand doctor`` about the Podman service itself: its socket,
runtime directory, version and storage.  Pure, like doctorchecks.py."""

from __future__ import annotations

import os

from ...config import rundir
from ...host import storageguard
from ...host.discovery import Attempt
from ...libpod.versions import parse_version
from .hostchecks import Check, fail, not_checked, ok, warn

MIN_VERSION = (4, 3)
QUADLET_VERSION = (4, 4)


def check_socket(attempts: list[Attempt], will_start: str = "", why_not: str = "") -> Check:
    """OK names the socket in use (and what failed before it). With none answering: WARN when
    serve would start Podman's API itself (``will_start``: its socket), else FAIL listing every
    path tried and ``why_not`` (why serve would not start one)."""
    for i, attempt in enumerate(attempts):
        if not attempt.problem:
            tried = "; ".join(a.line() for a in attempts[:i])
            where = f" ({attempt.source})" if attempt.source else ""
            return ok("podman socket", f"{attempt.path}{where} answers" + (f" (tried first: {tried})" if tried else ""))
    tried = "; ".join(a.line() for a in attempts)
    start_it = (
        "start one with 'podman system service --time=0 unix://<path>' (or 'systemctl --user enable --now "
        "podman.socket') as the user podmand runs as, and set OPENSHELL_PODMAN_SOCKET to it; see "
        "docs/podman-api.md in podmand's repository"
    )
    if will_start:
        return warn(
            "podman socket",
            f"no Podman API socket answers (tried {tried}); serve will start Podman's API itself at "
            f"{will_start} and stop it at exit (podman_autostart); the checks below that need Podman are skipped",
            "nothing for podmand serve; for other Podman clients, or to check the rest now: " + start_it,
        )
    because = f"; {why_not}" if why_not else ""
    return fail("podman socket", f"no Podman API socket answers; tried {tried}{because}", start_it)


def check_runtime_dir(runtime: rundir.RuntimeDir, problem: str, user: str) -> Check:
    """Podman's sockets and run state live here; without logind there is no /run/user/<uid>."""
    name = "runtime dir"
    if runtime.source == "root":
        return ok(name, "/run (rootful)")
    uid = os.geteuid()
    linger = (
        f"as root: loginctl enable-linger {user} (systemd-logind then keeps /run/user/{uid} even without a "
        f"login session), and set XDG_RUNTIME_DIR=/run/user/{uid}; without systemd, create /run/user/{uid} "
        f"(mode 0700, owned by {user}) from a boot script and set XDG_RUNTIME_DIR to it"
    )
    skipped = f" ({runtime.note})" if runtime.note else ""
    if runtime.source != "fallback":
        if runtime.under_tmp:
            return warn(
                name,
                f"{runtime.path} (from {runtime.source}) is under /tmp: temp cleaners may delete Podman's "
                "sockets and run state, and it is not cleared at reboot on hosts where /tmp is on disk",
                linger,
            )
        if runtime.note.startswith("XDG_RUNTIME_DIR="):
            return warn(
                name,
                f"{runtime.note}: podmand uses {runtime.path} instead, but podman commands run in this "
                "environment use XDG_RUNTIME_DIR as it is (and fail, or look elsewhere)",
                f"unset XDG_RUNTIME_DIR, or set it to {runtime.path}",
            )
        return ok(name, f"{runtime.path} (from {runtime.source})")
    if problem:
        return fail(
            name,
            f"no usable XDG_RUNTIME_DIR or /run/user/{uid}, so Podman and podmand would use "
            f"{runtime.path}, which {problem}: podmand refuses it{skipped}",
            f"remove {runtime.path}, or {linger}",
        )
    return warn(
        name,
        f"no runtime directory from a login session{skipped}: Podman and podmand use {runtime.path} "
        "(Podman's fallback under the temp directory), which works but may be cleaned away",
        linger,
    )


def check_version(version: str, rootless: bool) -> Check:
    """podmand is built and tested against 4.3.1 (Debian 12); older lacks API podmand uses."""
    mode = "rootless" if rootless else "rootful"
    parsed = parse_version(version)
    if parsed is None:
        return warn("podman version", f"cannot parse Podman version {version!r} ({mode})", "check 'podman version'")
    if parsed[:2] < MIN_VERSION:
        return warn(
            "podman version",
            f"Podman {version} ({mode}) is older than 4.3, the oldest podmand is tested with",
            "upgrade Podman to 4.3 or newer (Debian 12 ships 4.3.1)",
        )
    note = ""
    if parsed[:2] == (4, 3):
        note = (
            "; 4.3 quirks handled by podmand: userns=auto sent with AutoUserNs, healthchecks run by podmand, "
            "exits taken from conmon's exit files as well as its lagging events"
        )
    return ok("podman version", f"Podman {version}, {mode}{note}")


def check_quadlet(version: str) -> Check:
    """Quadlet (``.container`` units) came with Podman 4.4; older Podman silently makes no unit."""
    parsed = parse_version(version)
    if parsed is not None and parsed[:2] < QUADLET_VERSION:
        return warn(
            "quadlet",
            f"Podman {version} has no Quadlet (it came in 4.4): containers/systemd/podmand.container "
            "would produce no unit, silently",
            "run the pex as a systemd user service instead: containers/systemd/podmand.service "
            "(docs/deployment.md (On a rootless desktop) in podmand's repository)",
        )
    return ok("quadlet", f"Podman {version} supports Quadlet (.container units)")


def check_storage(driver: str, graph_root: str = "") -> Check:
    """vfs copies the whole image for every container: seconds per create, gigabytes of disk."""
    where = f" ({graph_root})" if graph_root else ""
    if driver == "vfs":
        return warn(
            "storage",
            f"storage driver vfs{where}: slow, copies the image per container",
            'write ~/.config/containers/storage.conf with [storage] driver = "overlay" (as the Podman user); '
            "if the store was created with vfs it keeps vfs: run 'podman system reset' (deletes that "
            "user's images and containers) and restart the Podman service",
        )
    if not driver:
        return warn("storage", "Podman did not report its storage driver", "check 'podman info'")
    return ok("storage", f"storage driver {driver}{where}")


def check_new_store(facts: storageguard.StorageFacts, why: str) -> Check:
    """Without Podman's API: a store that does not exist yet gets its driver at first use,
    and rootless Podman 4.3 with no storage.conf picks vfs."""
    if facts.store_exists:
        return not_checked("storage", f"{why} (the store {facts.store} exists)")
    if facts.driver_source:
        return ok("storage", f"no Podman store yet ({facts.store}); {facts.driver_source} names its driver")
    return warn(
        "storage",
        f"no Podman store yet ({facts.store}) and no storage.conf names a driver: a first 'podman' command "
        "would create a slow vfs store (which keeps vfs); podmand's autostart creates it with overlay",
        "let podmand serve start Podman's API first (podman_autostart), or before any podman command write "
        '~/.config/containers/storage.conf with [storage] driver = "overlay"',
    )
