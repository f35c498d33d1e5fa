"""``podmand doctor``: check what real hosts get wrong, and say how to fix each.

Facts are gathered (files, the Podman API) apart from the decisions: each
``check_*`` function is pure and takes the facts, so tests can inject them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pwd
import re
import secrets
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from . import config, hostpaths
from .discovery import Attempt, candidates, probe
from .podman import PodmanClient, PodmanError, PodmanUnavailable, quote

Status = Literal["OK", "WARN", "FAIL"]
AUTO_SIZE = 1024  # podman's default --userns=auto size
TUN = "/dev/net/tun"
SUN_PATH_MAX = 108  # sizeof(sockaddr_un.sun_path), NUL included
MIN_VERSION = (4, 3)


class Check(msgspec.Struct, frozen=True):
    name: str
    status: Status
    finding: str
    fix: str = ""


def ok(name: str, finding: str) -> Check:
    return Check(name, "OK", finding)


def warn(name: str, finding: str, fix: str) -> Check:
    return Check(name, "WARN", finding, fix)


def fail(name: str, finding: str, fix: str) -> Check:
    return Check(name, "FAIL", finding, fix)


def not_checked(name: str, why: str) -> Check:
    """A check that needs the Podman API when there is none: flagged, never silently passed."""
    return warn(name, f"not checked: {why}", "fix the 'podman socket' finding first")


# ---------------------------------------------------------------- /info, decoded here
# podman.Info carries what serve needs; doctor needs a few more fields.


class IdMap(msgspec.Struct):
    container_id: int = 0
    host_id: int = 0
    size: int = 0


class IdMappings(msgspec.Struct):
    uidmap: list[IdMap] | None = None
    gidmap: list[IdMap] | None = None


class _Security(msgspec.Struct):
    rootless: bool = False


class _Host(msgspec.Struct):
    cgroupVersion: str = ""
    cgroupControllers: list[str] | None = None
    idMappings: IdMappings | None = None
    security: _Security = msgspec.field(default_factory=_Security)


class _Store(msgspec.Struct):
    graphDriverName: str = ""
    graphRoot: str = ""


class _Version(msgspec.Struct, rename="pascal"):
    version: str = ""


class PodmanInfo(msgspec.Struct):
    host: _Host = msgspec.field(default_factory=_Host)
    store: _Store = msgspec.field(default_factory=_Store)
    version: _Version = msgspec.field(default_factory=_Version)

    @property
    def rootless(self) -> bool:
        return self.host.security.rootless

    def mapped_subids(self) -> int | None:
        """Subordinate IDs Podman maps for a rootless user (entries past container id 0); None when unknown."""
        maps = self.host.idMappings
        if not self.rootless or maps is None or maps.uidmap is None or maps.gidmap is None:
            return None
        uids = sum(m.size for m in maps.uidmap if m.container_id >= 1)
        gids = sum(m.size for m in maps.gidmap if m.container_id >= 1)
        return min(uids, gids)


# ---------------------------------------------------------------- pure decisions


def check_socket(attempts: list[Attempt]) -> Check:
    """OK names the socket in use (and what failed before it); FAIL lists every path tried."""
    for i, attempt in enumerate(attempts):
        if not attempt.problem:
            tried = "; ".join(f"{a.path}: {a.problem}" for a in attempts[:i])
            return ok("podman socket", f"{attempt.path} answers" + (f" (tried first: {tried})" if tried else ""))
    tried = "; ".join(f"{a.path}: {a.problem}" for a in attempts)
    return fail(
        "podman socket",
        f"no Podman API socket answers; tried {tried}",
        "start one with 'podman system service --time=0 unix://<path>' (or 'systemctl --user enable --now "
        "podman.socket') as the user podmand runs as, and set OPENSHELL_PODMAN_SOCKET to it",
    )


def parse_version(text: str) -> tuple[int, ...] | None:
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not match:
        return None
    return tuple(int(g or 0) for g in match.groups())


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
            "exits taken from /wait rather than lagging events"
        )
    return ok("podman version", f"Podman {version}, {mode}{note}")


def check_cgroups(version: str, rootless: bool, controllers: list[str] | None, source: str) -> Check:
    """Rootless limits need cgroup v2 with cpu, memory and pids delegated to the user."""
    if version != "v2":
        if not rootless:
            return ok("cgroups", f"cgroup {version or 'v1'}: rootful Podman enforces resource limits")
        return warn(
            "cgroups",
            f"cgroup {version or 'v1'}: memory, CPU and pids limits are not enforced for rootless containers "
            "(Podman ignores them with a warning)",
            "switch the host to cgroup v2: add systemd.unified_cgroup_hierarchy=1 to the kernel command line "
            "(GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub) and reboot; or run podmand rootful",
        )
    if not rootless:
        return ok("cgroups", "cgroup v2, rootful Podman enforces resource limits")
    delegate_fix = (
        "as root: write /etc/systemd/system/user@.service.d/delegate.conf containing "
        "'[Service]' and 'Delegate=cpu cpuset io memory pids', run 'systemctl daemon-reload', then log in again"
    )
    if controllers is None:
        return warn("cgroups", "cgroup v2, but cannot tell which controllers are delegated to this user", delegate_fix)
    missing = [c for c in ("cpu", "memory", "pids") if c not in controllers]
    if missing:
        return warn(
            "cgroups",
            f"cgroup v2, but {', '.join(missing)} not delegated to this user ({source} lists "
            f"{' '.join(controllers) or 'nothing'}): those limits are not enforced rootless",
            delegate_fix,
        )
    return ok("cgroups", f"cgroup v2 with cpu, memory and pids delegated ({source})")


def parse_subids(text: str, name: str, uid: int | None) -> int:
    """Total count of the ``name:start:count`` lines naming the user (by name or uid)."""
    keys = {name} | ({str(uid)} if uid is not None else set())
    total = 0
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[0] in keys and parts[2].isdigit():
            total += int(parts[2])
    return total


def auto_size(userns: str) -> int:
    """The IDs each userns=auto sandbox takes: ``size=`` in the setting, else podman's default."""
    base, _, params = userns.partition(":")
    if base == "auto":
        for item in params.split(","):
            key, _, value = item.partition("=")
            if key.strip() == "size" and value.strip().isdigit() and int(value) > 0:
                return int(value)
    return AUTO_SIZE


def check_subids(
    user: str, rootless: bool, subuids: int, subgids: int, userns: str, podman_mapped: int | None = None
) -> Check:
    """Rootless Podman maps images' uids through subuids; userns=auto carves each sandbox from them."""
    base = userns.partition(":")[0]
    size = auto_size(userns)
    if not rootless:
        if base != "auto":
            return ok("subuids", f"rootful Podman with userns={base}: no subordinate range needed")
        if min(subuids, subgids) == 0:
            return fail(
                "subuids",
                "rootful userns=auto needs a range for user 'containers' in /etc/subuid and /etc/subgid; "
                f"found {subuids} subuids, {subgids} subgids",
                "as root: add 'containers:2147483647:2147483648' to /etc/subuid and /etc/subgid",
            )
        return ok(
            "subuids",
            f"user 'containers': {subuids} subuids, {subgids} subgids: room for "
            f"{min(subuids, subgids) // size} userns=auto sandboxes ({size} IDs each)",
        )
    files = min(subuids, subgids)
    count = podman_mapped if podman_mapped is not None else files
    note = ""
    if podman_mapped is not None and podman_mapped != files:
        note = (
            f" (this machine's /etc/subuid and /etc/subgid give {subuids}/{subgids}: podmand may run in a "
            "container whose files are not the host's; Podman's own view is used)"
        )
    if count == 0:
        return fail(
            "subuids",
            f"user {user!r} has no subordinate uid/gid range ({subuids} in /etc/subuid, {subgids} in /etc/subgid)"
            f"{note}: rootless Podman can map only one uid, and userns=auto needs them",
            f"as root: usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user} (a range no other "
            f"user has), then as {user}: podman system migrate",
        )
    fits = count // size
    if base == "auto" and fits == 0:
        return fail(
            "subuids",
            f"user {user!r} has {count} subordinate IDs, fewer than the {size} each userns=auto sandbox takes{note}",
            f"as root: usermod --add-subuids <start>-<end> --add-subgids <start>-<end> {user} with at least "
            f"{size * 64} IDs, then as {user}: podman system migrate",
        )
    return ok(
        "subuids",
        f"user {user!r}: {subuids} subuids, {subgids} subgids: room for {fits} userns=auto sandboxes "
        f"({size} IDs each; userns={userns}){note}",
    )


def check_tun(exists: bool, usable: bool, rootless: bool) -> Check:
    """slirp4netns and pasta open /dev/net/tun as the rootless user."""
    if not rootless:
        return ok("tun", f"{TUN} not needed: rootful Podman uses bridge networks")
    if not exists:
        return fail(
            "tun",
            f"{TUN} does not exist: rootless networking (slirp4netns/pasta) needs it",
            "as root: modprobe tun (or mknod /dev/net/tun c 10 200), then chmod 0666 /dev/net/tun",
        )
    if not usable:
        return fail(
            "tun",
            f"{TUN} is not readable and writable by this user: rootless networking (slirp4netns/pasta) fails "
            "with 'open(\"/dev/net/tun\"): Permission denied'",
            "as root: chmod 0666 /dev/net/tun (devtmpfs forgets it at reboot: repeat it from a boot script "
            "or udev rule), or load the tun module if it is missing",
        )
    return ok("tun", f"{TUN} is readable and writable")


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


@dataclass(frozen=True)
class ImageFact:
    role: str  # "supervisor" or "sandbox"
    ref: str
    present: bool
    error: str = ""  # the API error when presence could not be checked


def check_images(images: list[ImageFact]) -> Check:
    """podmand pulls missing images on first use; a missing one means a slow or failing first create."""
    missing = [i for i in images if not i.present]
    if not missing:
        return ok("images", "; ".join(f"{i.role} image {i.ref} present" for i in images))
    hints = []
    for i in missing:
        if i.ref.startswith("localhost/"):
            hints.append(f"{i.ref} cannot be pulled: build or load it into this Podman store (podman load / build)")
        else:
            hints.append(f"podman pull {i.ref}")
    found = "; ".join(
        f"{i.role} image {i.ref} " + (f"not checked: {i.error}" if i.error else "missing") for i in missing
    )
    return warn("images", f"{found} (podmand pulls on first use)", "as the Podman user: " + "; ".join(hints))


@dataclass(frozen=True)
class StateDirFact:
    path: str
    problem: str = ""  # why this user cannot use the directory ("" when writable)
    created: bool = False
    podman: bool = True  # a Podman API answered, so visibility could be checked
    image: str = ""  # image of the probe container ("" when no usable image is local)
    create_error: str | None = None  # None: the probe container was created
    hidden: bool = False  # the create error says Podman cannot find the probe file at its path


def check_state_dir(fact: StateDirFact) -> Check:
    """Token files are bind-mounted by path: the Podman service must see the same directory."""
    name, path = "state dir", fact.path
    if fact.problem:
        return fail(
            name,
            f"{path}: {fact.problem}",
            "make the directory writable by the user podmand runs as, or set PODMAND_STATE_DIR (--state-dir) "
            "to one that is",
        )
    created = " (created)" if fact.created else ""
    if not fact.podman:
        return not_checked(name, f"{path} is writable{created}, but no Podman API answered to see it")
    if not fact.image:
        return warn(
            name,
            f"{path} is writable{created}; not checked that Podman sees it: no local image for the probe container",
            "pull or load the sandbox or supervisor image (see 'images'), then run doctor again",
        )
    if fact.create_error is not None:
        if fact.hidden:
            return fail(
                name,
                f"Podman cannot see {path}: creating a container bind-mounting a file in it failed: "
                f"{fact.create_error}",
                hostpaths.fix(Path(path)),
            )
        return warn(
            name,
            f"{path} is writable{created}; the probe container could not be created: {fact.create_error}",
            "check the Podman service's log; then run doctor again",
        )
    return ok(name, f"{path} is writable{created} and Podman sees it at the same path")


@dataclass(frozen=True)
class DriverSocketFact:
    path: str
    parent_problem: str = ""  # "" when the parent exists and is ours, or can be created
    occupant: Literal["none", "stale", "listening", "not a socket", "not ours"] = "none"


def check_driver_socket(fact: DriverSocketFact) -> Check:
    """serve refuses a socket path it cannot own; sun_path caps it at 107 bytes."""
    name, path = "driver socket", fact.path
    length = len(os.fsencode(path))
    choose = "set OPENSHELL_COMPUTE_DRIVER_SOCKET (--socket) to a path in a directory of this user's"
    if length >= SUN_PATH_MAX:
        return fail(name, f"{path} is {length} bytes; a Unix socket path must be under {SUN_PATH_MAX}", choose)
    if fact.parent_problem:
        return fail(name, f"{path}: {fact.parent_problem}", choose)
    if fact.occupant == "listening":
        return warn(
            name,
            f"something already serves on {path} (a running podmand?); a second serve would refuse to start",
            "stop the other server, or give this one another OPENSHELL_COMPUTE_DRIVER_SOCKET",
        )
    if fact.occupant in ("not a socket", "not ours"):
        return fail(
            name, f"{path} exists and is {fact.occupant}: serve refuses to replace it", f"remove it, or {choose}"
        )
    stale = " (a stale socket there will be replaced)" if fact.occupant == "stale" else ""
    return ok(name, f"{path} is usable{stale}")


# ---------------------------------------------------------------- gathering facts


def read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def cgroup_facts(info: PodmanInfo | None, uid: int) -> tuple[str, list[str] | None, str]:
    """(version, delegated controllers or None, where they were read)."""
    if info is not None and info.host.cgroupVersion:
        version = info.host.cgroupVersion
    else:
        version = "v2" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "v1"
    path = f"/sys/fs/cgroup/user.slice/user-{uid}.slice/user@{uid}.service/cgroup.controllers"
    if os.path.exists(path):
        return version, read_text(path).split(), path
    if info is not None and info.host.cgroupControllers:
        return version, list(info.host.cgroupControllers), "Podman's /info"
    return version, None, ""


def tun_facts() -> tuple[bool, bool]:
    try:
        st = os.stat(TUN)
    except OSError:
        return False, False
    return stat.S_ISCHR(st.st_mode), os.access(TUN, os.R_OK | os.W_OK)


def driver_socket_facts(path: str) -> DriverSocketFact:
    """What serve's prepare_socket would find, without creating or removing anything."""
    parent = Path(path).parent
    problem = ""
    if parent.is_symlink():
        problem = f"its directory {parent} is a symlink (serve refuses it)"
    elif parent.exists():
        st = parent.stat()
        if not stat.S_ISDIR(st.st_mode):
            problem = f"{parent} is not a directory"
        elif st.st_uid != os.geteuid():
            problem = f"its directory {parent} is owned by uid {st.st_uid}, not this user ({os.geteuid()})"
    else:
        ancestor = parent
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not os.access(ancestor, os.W_OK | os.X_OK):
            problem = f"its directory {parent} does not exist and cannot be created ({ancestor} is not writable)"
    occupant: Literal["none", "stale", "listening", "not a socket", "not ours"] = "none"
    try:
        st = os.lstat(path)
    except OSError:
        return DriverSocketFact(path, problem, occupant)
    if not stat.S_ISSOCK(st.st_mode):
        occupant = "not a socket"
    elif st.st_uid != os.geteuid():
        occupant = "not ours"
    else:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(path)
                occupant = "listening"
            except OSError:
                occupant = "stale"
    return DriverSocketFact(path, problem, occupant)


async def image_facts(client: PodmanClient, roles: list[tuple[str, str]]) -> list[ImageFact]:
    out = []
    for role, ref in roles:
        try:
            resp = await client.request("GET", f"/images/{quote(ref)}/exists")
        except PodmanUnavailable as exc:
            out.append(ImageFact(role, ref, False, str(exc)))
            continue
        error = "" if resp.status in (204, 404) else f"HTTP {resp.status}: {resp.error_message()}"
        out.append(ImageFact(role, ref, resp.status == 204, error))
    return out


async def state_dir_facts(client: PodmanClient | None, path: str, image: str) -> StateDirFact:
    """Is the directory usable by this user, and does Podman see it at the same path (hostpaths.probe)?"""
    state = Path(path)
    created = not state.exists()
    try:
        state.mkdir(mode=0o711, parents=True, exist_ok=True)
    except OSError as exc:
        return StateDirFact(path, problem=f"cannot be created: {exc.strerror or exc}")
    if not state.is_dir():
        return StateDirFact(path, problem="is not a directory")
    token = secrets.token_hex(6)
    probe_file = state / f".doctor-probe-{token}"
    try:
        os.close(os.open(probe_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        return StateDirFact(path, problem=f"not writable by this user: {exc.strerror or exc}", created=created)
    probe_file.unlink(missing_ok=True)
    if client is None:
        return StateDirFact(path, created=created, podman=False)
    seen = await hostpaths.probe(client, state, image)
    if not seen.image:
        return StateDirFact(path, created=created)
    return StateDirFact(path, created=created, image=seen.image, create_error=seen.error, hidden=seen.hidden)


async def diagnose(settings: config.Settings) -> list[Check]:
    """Every check, in order; nothing here raises for a broken host."""
    attempts = [Attempt(p, await probe(p)) for p in candidates(settings.podman_socket)]
    checks = [check_socket(attempts)]
    answering = next((a.path for a in attempts if not a.problem), "")
    client = PodmanClient(answering, timeout=30.0) if answering else None
    info: PodmanInfo | None = None
    why = "no Podman API socket answers"
    uid = os.geteuid()
    state_path = settings.state_dir or config.default_state_dir()
    try:
        if client is not None:
            try:
                info = msgspec.json.decode((await client.call("GET", "/info")).body, type=PodmanInfo)
            except (PodmanError, PodmanUnavailable, msgspec.DecodeError) as exc:
                why = f"Podman's /info failed: {exc}"
        rootless = info.rootless if info is not None else uid != 0
        checks.append(check_version(info.version.version, rootless) if info else not_checked("podman version", why))
        cg_version, controllers, source = cgroup_facts(info, uid)
        checks.append(check_cgroups(cg_version, rootless, controllers, source))
        if rootless:
            user = user_name(uid)
            subuids = parse_subids(read_text("/etc/subuid"), user, uid)
            subgids = parse_subids(read_text("/etc/subgid"), user, uid)
        else:
            user = "containers"
            subuids = parse_subids(read_text("/etc/subuid"), user, None)
            subgids = parse_subids(read_text("/etc/subgid"), user, None)
        mapped = info.mapped_subids() if info else None
        checks.append(check_subids(user, rootless, subuids, subgids, settings.userns, mapped))
        tun_exists, tun_usable = tun_facts()
        checks.append(check_tun(tun_exists, tun_usable, rootless))
        checks.append(
            check_storage(info.store.graphDriverName, info.store.graphRoot) if info else not_checked("storage", why)
        )
        probe_image = ""
        if client is not None and info is not None:
            roles = [("supervisor", settings.supervisor_image), ("sandbox", settings.sandbox_image)]
            if settings.sandbox_image == settings.supervisor_image:
                roles = roles[:1]
            images = await image_facts(client, roles)
            checks.append(check_images(images))
            probe_image = next((i.ref for i in images if i.present), "")
        else:
            checks.append(not_checked("images", why))
        usable = client if info is not None else None
        checks.append(check_state_dir(await state_dir_facts(usable, state_path, probe_image)))
    finally:
        if client is not None:
            await client.close()
    sock = settings.socket.removeprefix("unix://") or config.default_socket()
    checks.append(check_driver_socket(driver_socket_facts(sock)))
    return checks


# ---------------------------------------------------------------- output and CLI


def render(checks: list[Check]) -> str:
    lines = []
    for c in checks:
        lines.append(f"{c.status:<4}  {c.name}: {c.finding}")
        if c.status != "OK" and c.fix:
            lines.append(f"      fix: {c.fix}")
    return "\n".join(lines) + "\n"


def render_json(checks: list[Check]) -> str:
    return msgspec.json.encode(checks).decode() + "\n"


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.status == "FAIL" for c in checks) else 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="check this host for what podmand needs, and say how to fix what is missing",
        description="Check the Podman socket, version, cgroups, subordinate IDs, /dev/net/tun, storage driver, "
        "images, state directory and driver socket. Takes serve's settings. Exit 1 when a check FAILs.",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list of {name, status, finding, fix}")
    config.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    as_json = bool(args.__dict__.pop("json", False))
    try:
        settings = config.load(args)
    except config.ConfigError as exc:
        print(f"podmand doctor: {exc}", file=sys.stderr)
        return 2
    checks = asyncio.run(diagnose(settings))
    sys.stdout.write(render_json(checks) if as_json else render(checks))
    return exit_code(checks)
