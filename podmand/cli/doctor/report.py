"""``podmand doctor``: check what real hosts get wrong, and say how to fix each.

Facts are gathered here (files, the Podman API) apart from the decisions, which are
pure functions in doctorchecks.py, so tests can inject the facts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pwd
import resource
import secrets
import shutil
import socket
import stat
import sys
from pathlib import Path
from typing import Any, Literal

import msgspec

from ... import config
from ...config import rundir
from ...errors import ConfigError
from ...host import autostart, capacity, discovery, hostgateway, limits, sharedpaths, storageguard, wsl
from ...host.capacity import parse_subids
from ...host.discovery import podman_socket_in
from ...libpod import Info, PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable, versions
from ...sandbox import cdi, selinux
from ...sandbox import settings as sandbox_settings
from . import eventchecks, netchecks, tracechecks
from .capacitychecks import CapacityFacts, check_capacity
from .hostchecks import (
    TUN,
    Check,
    DriverSocketFact,
    ImageFact,
    StateDirFact,
    check_cgroups,
    check_driver_socket,
    check_gpus,
    check_images,
    check_selinux,
    check_state_dir,
    check_subids,
    check_tun,
    check_userns_requests,
    not_checked,
)
from .servicechecks import check_new_store, check_quadlet, check_runtime_dir, check_socket, check_storage, check_version
from .versionchecks import version_checks

CONTAINER_MARKERS = ("/run/.containerenv", "/.dockerenv")  # Podman's, Docker's


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


def mapped_subids(info: Info) -> int | None:
    """Subordinate IDs Podman maps for a rootless user (entries past container id 0); None when unknown."""
    return versions.of(info).subordinate_ids


def capacity_facts(settings: config.Settings, rootless: bool, subids: int) -> CapacityFacts:
    """The figures bounding how many sandboxes run at once; a key is charged to root only
    when a rootful sandbox shares the host's user namespace."""
    root = not rootless and settings.userns_base == "host"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return CapacityFacts(
        userns=settings.userns,
        subids=subids,
        keys=capacity.key_quota(root),
        keys_of="root" if root else "non-root users",
        nofile=(soft, hard, limits.nofile_target(soft, hard, limits.nr_open())),
        exit_watch=settings.exit_watch,
    )


def cgroup_facts(info: Info | None, uid: int) -> tuple[str, list[str] | None, str]:
    """(version, delegated controllers or None, where they were read). Podman's own list
    first: GetCapabilities follows it (enforcement.py)."""
    if info is not None and info.host.cgroupVersion:
        version = info.host.cgroupVersion
    else:
        version = "v2" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "v1"
    if info is not None and info.host.cgroupControllers is not None:
        return version, list(info.host.cgroupControllers), "Podman's /info"
    path = f"/sys/fs/cgroup/user.slice/user-{uid}.slice/user@{uid}.service/cgroup.controllers"
    if os.path.exists(path):
        return version, read_text(path).split(), path
    return version, None, ""


def in_sidecar() -> bool:
    """In a container (Podman's or Docker's marker) with no podman installed: Podman runs
    elsewhere (the host), reached through a mounted socket. A container that has podman
    may well run Podman itself (a CI container), and then its /dev/net/tun matters."""
    return any(os.path.exists(marker) for marker in CONTAINER_MARKERS) and shutil.which("podman") is None


def runtime_dir_facts() -> tuple[rundir.RuntimeDir, str]:
    """Where Podman's runtime directory is, and what is wrong with a fallback one that exists."""
    runtime = rundir.resolve()
    if runtime.source != "fallback":
        return runtime, ""
    try:
        st = os.lstat(runtime.path)
    except FileNotFoundError:
        return runtime, ""
    except OSError as exc:
        return runtime, f"cannot be read ({exc.strerror})"
    return runtime, rundir.fallback_problem(st, os.geteuid())


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
            out.append(ImageFact(role, ref, await client.image_exists(ref)))
        except PodmanError as exc:
            out.append(ImageFact(role, ref, False, f"HTTP {exc.status}: {exc.message}"))
        except PodmanUnavailable as exc:
            out.append(ImageFact(role, ref, False, str(exc)))
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
    seen = await sharedpaths.probe(client, state, image)
    if not seen.image:
        return StateDirFact(path, created=created)
    return StateDirFact(path, created=created, image=seen.image, create_error=seen.error, hidden=seen.hidden)


async def diagnose(settings: config.Settings) -> list[Check]:
    """Every check, in order; nothing here raises for a broken host."""
    attempts = await discovery.attempts(discovery.plan(settings.podman_socket))  # serve's list, in its order
    uid = os.geteuid()
    runtime, runtime_problem = runtime_dir_facts()
    why_not = autostart.why_not_start(settings, shutil.which("podman"))
    will_start = "" if why_not or runtime_problem else podman_socket_in(runtime)
    checks = [check_socket(attempts, will_start, why_not), check_runtime_dir(runtime, runtime_problem, user_name(uid))]
    answering = next((a for a in attempts if not a.problem), None)
    client = PodmanClient(answering.path, log_size_max=settings.log_size_max) if answering else None
    settings = hostgateway.for_machine(settings, answering.machine if answering else "")  # as serve would
    info: Info | None = None
    why = "no Podman API socket answers"
    state_path = settings.state_dir
    try:
        if client is not None:
            try:
                info = await client.info()
            except (PodmanError, PodmanUnavailable, PodmanUnreadable) as exc:
                why = f"Podman's /info failed: {exc}"
        rootless = info.host.security.rootless if info is not None else uid != 0
        checks.append(check_version(info.version.version, rootless) if info else not_checked("podman version", why))
        checks.append(check_quadlet(info.version.version) if info else not_checked("quadlet", why))
        cg_version, controllers, source = cgroup_facts(info, uid)
        manager = info.host.cgroupManager if info is not None else ""
        checks.append(check_cgroups(cg_version, rootless, controllers, source, manager))
        if info is not None:
            checks.extend(version_checks(info))
        checks.append(check_gpus(settings.cdi_spec_dirs, cdi.scan(settings.cdi_spec_dirs), wsl.wsl2()))
        if rootless:
            user = user_name(uid)
            subuids = parse_subids(read_text("/etc/subuid"), user, uid)
            subgids = parse_subids(read_text("/etc/subgid"), user, uid)
        else:
            user = "containers"
            subuids = parse_subids(read_text("/etc/subuid"), user, None)
            subgids = parse_subids(read_text("/etc/subgid"), user, None)
        mapped = mapped_subids(info) if info else None
        checks.append(check_subids(user, rootless, subuids, subgids, settings.userns, mapped))
        checks.append(check_userns_requests(settings.allow_userns, settings.allow_driver_config, settings.userns,
                                            rootless, settings.allow_userns_own_uid))
        subids = mapped if mapped is not None else min(subuids, subgids)
        checks.extend(check_capacity(capacity_facts(settings, rootless, subids)))
        tun_exists, tun_usable = tun_facts()
        checks.append(check_tun(tun_exists, tun_usable, rootless, in_sidecar()))
        if info is not None:
            checks.append(check_storage(info.store.graphDriverName, info.store.graphRoot))
        elif rootless:
            checks.append(check_new_store(storageguard.storage_facts(), why))
        else:
            checks.append(not_checked("storage", why))
        podman_says = info.host.security.selinuxEnabled if info is not None else None
        checks.append(check_selinux(settings.selinux, *selinux.detect(podman_says)))
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
        checks.extend(await netchecks.checks(settings))
        usable = client if info is not None else None
        checks.append(check_state_dir(await state_dir_facts(usable, state_path, probe_image)))
        path = answering.path if answering else ""
        checks.extend(await eventchecks.checks(usable, info, path, settings, state_path, why, in_sidecar()))
    finally:
        if client is not None:
            await client.close()
    sock = settings.socket
    checks.append(check_driver_socket(driver_socket_facts(sock)))
    checks.append(await tracechecks.traces(settings.otlp_endpoint, settings.gateway_name))
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
        description="Check the Podman socket, runtime directory, version, Quadlet support, cgroups, the known "
        "bugs of this Podman release, its event logger and OCI runtime, whether sandboxes reach the gateway and the "
        "corporate proxy, "
        "subordinate IDs, the host's sandbox capacity, GPUs (CDI), /dev/net/tun, storage driver, SELinux, "
        "images, state directory, driver socket and the OTLP collector traces go to. "
        "Takes serve's settings. Exit 1 when a check FAILs.",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list of {name, status, finding, fix}")
    config.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    as_json = bool(args.__dict__.pop("json", False))
    try:
        settings = config.load(args, checks=sandbox_settings.CHECKS)
    except ConfigError as exc:
        print(f"podmand doctor: {exc}", file=sys.stderr)
        return 2
    checks = asyncio.run(diagnose(settings))
    sys.stdout.write(render_json(checks) if as_json else render(checks))
    return exit_code(checks)
