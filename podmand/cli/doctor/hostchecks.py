"""The decisions of ``podmand doctor``: each ``check_*`` is pure and takes the facts
doctor.py gathers (files, the Podman API), so tests can inject them.  The checks of
the Podman service itself are in doctorpodman.py."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from ...host import sharedpaths, wsl
from ...sandbox import cdi, selinux, usernamespace

Status = Literal["OK", "WARN", "FAIL"]
TUN = "/dev/net/tun"
SUN_PATH_MAX = 108  # sizeof(sockaddr_un.sun_path), NUL included


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


def check_cgroups(version: str, rootless: bool, controllers: list[str] | None, source: str,
                  manager: str = "") -> Check:
    """Rootless limits need cgroup v2 under systemd with cpu, memory and pids delegated to the
    user; GetCapabilities claims a CPU or memory limit only where Podman lists its controller."""
    if version != "v2":
        if not rootless:
            return ok("cgroups", f"cgroup {version or 'v1'}: rootful Podman enforces resource limits")
        return warn(
            "cgroups",
            f"cgroup {version or 'v1'}: memory, CPU and pids limits, and CPU and memory requests, are not "
            "enforced for rootless containers (Podman ignores them with a warning)",
            "switch the host to cgroup v2: add systemd.unified_cgroup_hierarchy=1 to the kernel command line "
            "(GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub) and reboot; or run podmand rootful",
        )
    if not rootless:
        absent = [c for c in ("cpu", "memory", "pids") if controllers is not None and c not in controllers]
        if absent:  # Podman 6.1 here: a cgroup v2 whose root has only hugetlb
            return warn(
                "cgroups",
                f"cgroup v2, but {', '.join(absent)} not available to Podman ({source} lists "
                f"{' '.join(controllers or []) or 'nothing'}): podmand asks for no such limit, and "
                "GetCapabilities claims none",
                "enable the controllers in the root cgroup's cgroup.subtree_control (systemd does on a booted host)",
            )
        return ok("cgroups", "cgroup v2, rootful Podman enforces resource limits")
    if manager == "cgroupfs":
        return warn(
            "cgroups",
            "cgroup v2 with the cgroupfs manager: rootless containers get no cgroup, so no memory, CPU or pids "
            "limit applies whatever is delegated (containers/podman#21575); GetCapabilities claims none",
            'run Podman in a systemd user session with cgroup_manager = "systemd" under [engine] in '
            "containers.conf (as root: loginctl enable-linger <user>, so the session outlives logins)",
        )
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
            f"{' '.join(controllers) or 'nothing'}): those limits are not enforced rootless, podmand "
            "asks for none of them, and GetCapabilities claims no CPU or memory limit whose controller is missing",
            delegate_fix,
        )
    return ok("cgroups", f"cgroup v2 with cpu, memory and pids delegated ({source})")


def check_gpus(dirs: list[str], inventory: cdi.Inventory, wsl2: bool = False) -> Check:
    """The CDI devices a GPU request can get (cdi.py), and spec files that could not be read.
    ``wsl2``: the host shares its GPU through /dev/dxg (host/wsl.py)."""
    where = ", ".join(dirs) or "no directories (cdi_spec_dirs is empty)"
    if wsl2 and not cdi.selectable(inventory.gpus, wsl2):
        return warn(
            "gpus",
            f"WSL2 (/dev/dxg), but no CDI spec in {where} declares {cdi.ALL_GPUS}: gpu requests are refused",
            f"as root: {wsl.SPEC_FIX} (NVIDIA Container Toolkit), in a directory of cdi_spec_dirs",
        )
    family = cdi.default_family(inventory.gpus, wsl2) if cdi.selectable(inventory.gpus, wsl2) else []
    if family:
        found = f"gpu.count is served round-robin from {', '.join(family)}"
    elif inventory.gpus:
        found = f"only {', '.join(inventory.gpus)}: a plain gpu request is refused, driver_config.cdi_devices works"
    else:
        found = "no NVIDIA GPU: gpu requests are refused unless driver_config.cdi_devices names devices"
    others = [d for d in inventory.devices if d not in inventory.gpus]
    listed = f" (other CDI devices: {', '.join(others)})" if others else ""
    finding = f"{len(inventory.devices)} CDI device(s) in {where}: {found}{listed}"
    if inventory.problems:
        return warn(
            "gpus",
            f"{finding}; unreadable spec files, skipped: {'; '.join(inventory.problems)}",
            "fix or remove those files (nvidia-ctk cdi generate writes them); Podman reads the same directories",
        )
    return ok("gpus", finding)


def check_userns_requests(
    allow_userns: bool, allow_driver_config: bool, userns: str, rootless: bool, own_uid: bool = False
) -> Check:
    """What a sandbox's driver_config.userns_mode may ask for here (usernamespace.requested);
    ``own_uid``: allow_userns_own_uid, without which keep-id (it maps podmand's uid) is refused."""
    name, base = "userns requests", userns.partition(":")[0]
    if not allow_userns:
        return ok(name, f"off: every sandbox gets userns={base}; driver_config.userns_mode is refused")
    if not allow_driver_config:
        return warn(
            name,
            "allow_userns is on but allow_driver_config is off: every driver_config, userns_mode too, is refused",
            "enable allow_driver_config (--allow-driver-config / PODMAND_ALLOW_DRIVER_CONFIG) as well, or turn "
            "allow_userns off",
        )
    refused = {m: why for m in usernamespace.MODES if (why := usernamespace.refusal(m, base, rootless))}
    if "keep-id" not in refused and not own_uid:
        refused["keep-id"] = f"keep-id maps podmand's own uid: it needs {usernamespace.OWN_UID}"
    modes = ", ".join(m for m in usernamespace.MODES if m not in refused)
    finding = f"on: a sandbox may ask for {modes}" + "".join(f"; {why}" for why in refused.values())
    if not refused and rootless:
        finding += "; while a keep-id or nomap sandbox exists, Podman refuses userns=auto ones"
    return ok(name, finding)


def check_subids(
    user: str, rootless: bool, subuids: int, subgids: int, userns: str, podman_mapped: int | None = None
) -> Check:
    """Rootless Podman maps images' uids through subuids; userns=auto carves each sandbox from them."""
    base = userns.partition(":")[0]
    size = usernamespace.auto_size(userns.partition(":")[2])
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


def check_tun(exists: bool, usable: bool, rootless: bool, sidecar: bool = False) -> Check:
    """slirp4netns and pasta open /dev/net/tun as the rootless user, where Podman runs."""
    if sidecar:
        return ok(
            "tun",
            f"skipped: podmand runs in a container without Podman; {TUN} matters on the host, where Podman "
            "runs (run 'podmand doctor' there)",
        )
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
                sharedpaths.fix(Path(path)),
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


def check_selinux(setting: str, enabled: bool, source: str) -> Check:
    """What SELinux is, and whether podmand's bind mounts carry labels (selinux.py)."""
    state = f"SELinux is {'enabled' if enabled else 'not enabled'} (from {source})"
    if setting == "off" and enabled:
        return warn(
            "selinux",
            f"{state} but selinux = off: podmand's bind mounts carry no label, so the supervisor "
            "cannot read its binary, token or TLS files on an enforcing host",
            "set selinux = auto (--selinux=auto / PODMAND_SELINUX=auto)",
        )
    if selinux.relabel(setting, enabled):
        extra = "" if enabled else ", which Podman ignores here"
        return ok("selinux", f"{state}; selinux = {setting}: podmand labels its bind mounts (Z for per-sandbox "
                             f"files, z for the shared supervisor binary){extra}")
    return ok("selinux", f"{state}; selinux = {setting}: podmand adds no labels")
