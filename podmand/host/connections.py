"""Podman's named connections (``podman system connection``) and what each names for podmand:
a Unix socket to probe, a podman machine's socket, or why podmand cannot use it.

Podman 5 keeps the connections ``podman system connection add`` writes in
podman-connections.json beside the user's containers.conf (``$PODMAN_CONNECTIONS_CONF``
when set), Podman 4 in containers.conf's ``[engine] service_destinations``; a name is
looked up in the JSON file first, then in containers.conf, and the default is the JSON
file's ``Default``, else ``[engine] active_service`` (containers/common's
pkg/config/connections.go, ``GetConnection``). The JSON file is trusted as containers.conf
is (podmanconfig.py).

A machine connection (``IsMachine``: made by ``podman machine init``) is an ``ssh://`` URI
into the VM; its API is forwarded to a socket on this host, which ``podman machine inspect
<name>`` reports as ``ConnectionInfo.PodmanSocket.Path`` (a rootful machine's connection is
named ``<name>-root``). Without an answer podmand takes the place Podman puts it,
``<runtime dir>/podman/<name>-api.sock`` (pkg/machine/vmconfigs/sockets.go; the runtime
directory is ``$TMPDIR`` on macOS, the user's runtime directory on Linux, /run as root).

Any other ``ssh://`` connection is refused with the ``ssh`` command that forwards it to a
Unix socket here: podmand speaks to Podman over a Unix socket only, and an SSH transport
of its own would be a second way in with its own keys and host checks to get right.
``tcp://`` is refused too (unauthenticated, unencrypted).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..config import rundir
from . import podmanconfig
from .podmanconfig import Destination, Ignored

FILE = "podman-connections.json"
INSPECT_TIMEOUT = 10.0  # seconds for `podman machine inspect`
Inspect = Callable[[str], str | None]  # a machine's name -> `podman machine inspect` output, or None


@dataclass(frozen=True)
class Candidate:
    """A socket podmand may try, and where it came from. ``refused``: why it is not tried at
    all; ``named``: the operator named it (taken as named, as OPENSHELL_PODMAN_SOCKET), else
    it was found and must be this user's or root's; ``machine``: the podman machine it leads to."""

    path: str
    source: str = ""
    refused: str = ""
    named: bool = False
    machine: str = ""


@dataclass
class Connections:
    named: dict[str, Destination] = field(default_factory=dict)
    default: str = ""
    ignored: list[Ignored] = field(default_factory=list)


def connections_file(env: Mapping[str, str]) -> str:
    return env.get("PODMAN_CONNECTIONS_CONF") or os.path.join(podmanconfig.user_config_dir(env), FILE)


def parse_file(text: str) -> tuple[dict[str, Destination], str]:
    """podman-connections.json's connections and default (ValueError when it is not that)."""
    doc = json.loads(text)
    section = doc.get("Connection") if isinstance(doc, dict) else None
    if not isinstance(section, dict):
        return {}, ""
    named = {}
    for name, value in (section.get("Connections") or {}).items():
        if isinstance(value, dict) and isinstance(value.get("URI"), str):
            identity = value.get("Identity")
            named[name] = Destination(value["URI"], identity if isinstance(identity, str) else "",
                                      value.get("IsMachine") is True)
    default = section.get("Default")
    return named, default if isinstance(default, str) else ""


def load(env: Mapping[str, str] | None = None, uid: int | None = None) -> Connections:
    """Every connection Podman's CLI would see, the JSON file's winning over containers.conf's."""
    env = os.environ if env is None else env
    uid = os.geteuid() if uid is None else uid
    engine = podmanconfig.load(env, uid)
    found = Connections(dict(engine.destinations), engine.active_service, list(engine.ignored))
    path = connections_file(env)
    text, why = podmanconfig.read_trusted(path, uid)
    if why:
        found.ignored.append(Ignored(path, why))
    if text is not None:
        try:
            named, default = parse_file(text)
        except ValueError as exc:
            found.ignored.append(Ignored(path, f"not read: not JSON ({exc})"))
        else:
            found.named.update(named)
            found.default = default or found.default
    return found


# ---------------------------------------------------------------- machines


def run_inspect(name: str) -> str | None:
    """``podman machine inspect <name>``'s output, or None (no podman, no such machine)."""
    podman = shutil.which("podman")
    if podman is None:
        return None
    try:
        out = subprocess.run([podman, "machine", "inspect", name], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=INSPECT_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def inspected_socket(output: str, name: str) -> str:
    """``ConnectionInfo.PodmanSocket.Path`` of the machine ``name`` in inspect's JSON array ('' if none)."""
    try:
        machines = json.loads(output)
    except ValueError:
        return ""
    for machine in machines if isinstance(machines, list) else []:
        if isinstance(machine, dict) and machine.get("Name") in (name, None):
            sock = ((machine.get("ConnectionInfo") or {}).get("PodmanSocket") or {}).get("Path")
            if isinstance(sock, str) and sock:
                return sock
    return ""


def machine_runtime_dir(env: Mapping[str, str], uid: int, platform: str = sys.platform) -> str:
    """Where Podman keeps a machine's host-side sockets (pkg/machine/env getRuntimeDir)."""
    if platform == "darwin":
        return os.path.join(env.get("TMPDIR") or "/tmp", "podman")
    base = "/run" if uid == 0 else rundir.resolve(env, uid).path
    return os.path.join(base, "podman")


def machine_candidate(connection: str, source: str, env: Mapping[str, str], uid: int, inspect: Inspect,
                      platform: str = sys.platform) -> Candidate:
    """The host-side socket of the machine behind a machine connection."""
    names = [connection, connection.removesuffix("-root")]
    for name in dict.fromkeys(names):
        output = inspect(name)
        sock = inspected_socket(output, name) if output else ""
        if sock:
            return Candidate(sock, f"{source}: machine {name!r}, from podman machine inspect", machine=name)
    name = names[-1]
    sock = os.path.join(machine_runtime_dir(env, uid, platform), f"{name}-api.sock")
    return Candidate(sock, f"{source}: machine {name!r} (podman machine inspect did not say)", machine=name)


# ---------------------------------------------------------------- what a URI names


def _shown(uri: str) -> str:
    """The URI without a password (never logged)."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    host = parts.hostname or ""
    user = f"{parts.username}@" if parts.username else ""
    port = f":{parts.port}" if parts.port else ""
    return parts._replace(netloc=f"{user}{host}{port}").geturl()


def ssh_forward(uri: str, identity: str, local: str) -> str:
    """The ``ssh`` command that forwards an ``ssh://`` connection's Podman socket to ``local``."""
    parts = urlsplit(uri)
    user = parts.username or ""
    remote = parts.path or ("/run/podman/podman.sock" if user == "root" else "/run/user/<uid there>/podman/podman.sock")
    argv = ["ssh", "-nNT", "-L", f"{local}:{remote}"]
    if identity:
        argv += ["-i", identity]
    if parts.port:
        argv += ["-p", str(parts.port)]
    argv.append(f"{user}@{parts.hostname}" if user else str(parts.hostname))
    return shlex.join(argv)


def for_uri(uri: str, source: str, env: Mapping[str, str], uid: int, *, identity: str = "",
            label: str = "", named: bool = False) -> Candidate:
    """What a connection URI names: a Unix socket, or why podmand cannot use it."""
    parts = urlsplit(uri.strip())
    if parts.scheme == "unix":
        if parts.netloc or not parts.path.startswith("/"):
            return Candidate(_shown(uri), source, refused="not an absolute unix:///path URI", named=named)
        return Candidate(parts.path, source, named=named)
    if parts.scheme == "ssh" and parts.hostname:
        local = os.path.join(rundir.resolve(env, uid).path, f"podmand-{label or parts.hostname}.sock")
        return Candidate(_shown(uri), source, named=named, refused=(
            "not supported: podmand reaches Podman through a Unix socket only; forward it to one with "
            f"'{ssh_forward(uri, identity, local)}' and set CONTAINER_HOST=unix://{local} (or "
            f"OPENSHELL_PODMAN_SOCKET={local})"
        ))
    why = "tcp:// is unauthenticated and unencrypted" if parts.scheme == "tcp" else f"scheme {parts.scheme!r}"
    return Candidate(_shown(uri), source, named=named, refused=(
        f"not supported ({why}): podmand reaches Podman through a Unix socket only; run "
        "'podman system service unix://<path>' where podmand runs and name that socket"
    ))


def for_connection(name: str, dest: Destination, source: str, env: Mapping[str, str], uid: int,
                   inspect: Inspect, *, named: bool = False) -> Candidate:
    if dest.is_machine:
        return machine_candidate(name, source, env, uid, inspect)
    return for_uri(dest.uri, source, env, uid, identity=dest.identity, label=name, named=named)


def where(env: Mapping[str, str]) -> str:
    """Where connections are looked up, for a "not found" line."""
    return f"{connections_file(env)} or containers.conf's [engine] service_destinations"
