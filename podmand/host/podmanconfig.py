"""containers.conf as Podman's own CLI reads it, for the two ``[engine]`` keys discovery needs:
``active_service`` (the default connection) and ``service_destinations`` (the connections
Podman 4 keeps there), plus where the user's Podman configuration lives.

The files are merged in the order containers/common's ``systemConfigs`` gives at Podman 5.4
(vendor/github.com/containers/common/pkg/config/new.go): ``$CONTAINERS_CONF`` alone when set,
else /usr/share/containers/containers.conf, /etc/containers/containers.conf, its ``.d``
drop-ins, the user's ``$XDG_CONFIG_HOME/containers/containers.conf`` (else
``~/.config/...``) and its drop-ins (each directory's ``*.conf`` in name order), then
``$CONTAINERS_CONF_OVERRIDE``. A later file's ``active_service`` wins; ``service_destinations``
merge by name, a later entry replacing an earlier one whole (BurntSushi/toml decoding into
the map). Podman 4.3 reads the user's files only when rootless; podmand reads them always.

A file is read only when it is trusted: a regular file owned by this user or root that
neither group nor others may write. Another user who could write it could point podmand's
default connection at a socket of theirs and be sent its registry credentials. A file that
is not trusted, or is not TOML, is passed over and said why (``Ignored``), never guessed at.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_BYTES = 1 << 20
SHARE = "/usr/share/containers/containers.conf"
ETC = "/etc/containers/containers.conf"


@dataclass(frozen=True)
class Destination:
    """One ``[engine.service_destinations.<name>]`` entry (or a podman-connections.json one)."""

    uri: str
    identity: str = ""
    is_machine: bool = False


@dataclass(frozen=True)
class Ignored:
    path: str
    why: str


@dataclass
class Engine:
    active_service: str = ""
    destinations: dict[str, Destination] = field(default_factory=dict)
    ignored: list[Ignored] = field(default_factory=list)


def user_config_dir(env: Mapping[str, str]) -> str:
    """``$XDG_CONFIG_HOME/containers``, else ``$HOME/.config/containers`` (userConfigPath)."""
    if env.get("XDG_CONFIG_HOME"):
        return os.path.join(env["XDG_CONFIG_HOME"], "containers")
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".config", "containers")


def _drop_ins(directory: str) -> list[str]:
    try:
        names = sorted(e.name for e in os.scandir(directory) if e.name.endswith(".conf") and not e.is_dir())
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names]


def config_files(env: Mapping[str, str]) -> list[str]:
    """Every containers.conf Podman would merge, lowest precedence first (missing ones too)."""
    if env.get("CONTAINERS_CONF"):
        files = [env["CONTAINERS_CONF"]]
    else:
        user = os.path.join(user_config_dir(env), "containers.conf")
        files = [SHARE, ETC, *_drop_ins(ETC + ".d"), user, *_drop_ins(user + ".d")]
    if env.get("CONTAINERS_CONF_OVERRIDE"):
        files.append(env["CONTAINERS_CONF_OVERRIDE"])
    return files


def trust_problem(st: os.stat_result, uid: int) -> str:
    """'' when a configuration file with this status may steer podmand, else why not."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid not in (uid, 0):
        return f"owned by uid {st.st_uid}, not this user (uid {uid}) or root"
    if st.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    if st.st_size > MAX_BYTES:
        return f"larger than {MAX_BYTES} bytes"
    return ""


def read_trusted(path: str, uid: int) -> tuple[str | None, str]:
    """(text, '') of a trusted file; (None, '') when there is none; (None, why) when it is not read.
    The checks are made on the open file, so what is checked is what is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"cannot be opened: {exc.strerror or exc}"
    with os.fdopen(fd, "rb") as fh:
        problem = trust_problem(os.fstat(fd), uid)
        if problem:
            return None, f"not read: {problem}"
        data = fh.read(MAX_BYTES + 1)
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, "not read: not UTF-8"


def _destination(value: object) -> Destination | None:
    if not isinstance(value, dict) or not isinstance(value.get("uri"), str):
        return None
    identity, machine = value.get("identity", ""), value.get("is_machine", False)
    return Destination(value["uri"], identity if isinstance(identity, str) else "", machine is True)


def merge(engine: Engine, doc: Mapping[str, object]) -> None:
    """One file's ``[engine]`` over what the files before it said."""
    table = doc.get("engine")
    if not isinstance(table, dict):
        return
    active = table.get("active_service")
    if isinstance(active, str):
        engine.active_service = active
    destinations = table.get("service_destinations")
    if isinstance(destinations, dict):
        for name, value in destinations.items():
            dest = _destination(value)
            if dest is not None:
                engine.destinations[name] = dest


def load(env: Mapping[str, str] | None = None, uid: int | None = None) -> Engine:
    """The merged ``[engine]`` connection keys of every trusted containers.conf."""
    env = os.environ if env is None else env
    uid = os.geteuid() if uid is None else uid
    engine = Engine()
    for path in config_files(env):
        text, why = read_trusted(path, uid)
        if text is None:
            if why:
                engine.ignored.append(Ignored(path, why))
            continue
        try:
            merge(engine, tomllib.loads(text))
        except tomllib.TOMLDecodeError as exc:
            engine.ignored.append(Ignored(path, f"not read: not TOML ({exc})"))
    return engine
