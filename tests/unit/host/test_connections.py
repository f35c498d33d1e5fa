"""Podman's connections: the JSON file before containers.conf, what each URI names for
podmand, and a machine's host-side socket (podman machine inspect is injected: no machine
runs here)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from podmand.config import rundir
from podmand.host import connections
from podmand.host.connections import Candidate
from podmand.host.podmanconfig import Destination


def env_in(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "HOME": str(tmp_path / "home"),
            "XDG_RUNTIME_DIR": str(tmp_path / "run"), "CONTAINERS_CONF": str(tmp_path / "cfg" / "c.conf")}


def test_json_file_wins_over_containers_conf(tmp_path: Path) -> None:
    env = env_in(tmp_path)
    (tmp_path / "cfg" / "containers").mkdir(parents=True)
    Path(env["CONTAINERS_CONF"]).write_text(
        '[engine]\nactive_service = "old"\n'
        '[engine.service_destinations.old]\nuri = "unix:///run/old.sock"\n'
        '[engine.service_destinations.both]\nuri = "unix:///run/conf.sock"\n'
    )
    assert connections.connections_file(env) == str(tmp_path / "cfg" / "containers" / "podman-connections.json")
    found = connections.load(env, os.geteuid())
    assert (found.default, sorted(found.named)) == ("old", ["both", "old"])

    Path(connections.connections_file(env)).write_text(json.dumps({"Connection": {
        "Default": "new",
        "Connections": {"new": {"URI": "unix:///run/new.sock"}, "both": {"URI": "unix:///run/json.sock"},
                        "m": {"URI": "ssh://core@127.0.0.1:5555/run/user/501/podman/podman.sock",
                              "Identity": "/k", "IsMachine": True}},
    }, "Farm": {}}))
    found = connections.load(env, os.geteuid())
    assert found.default == "new"
    assert found.named["both"] == Destination("unix:///run/json.sock")
    assert found.named["old"] == Destination("unix:///run/old.sock")
    assert found.named["m"].is_machine and found.named["m"].identity == "/k"
    assert connections.load({**env, "PODMAN_CONNECTIONS_CONF": str(tmp_path / "none.json")}).default == "old"


def test_a_bad_json_file_is_listed_not_guessed(tmp_path: Path) -> None:
    env = env_in(tmp_path)
    path = tmp_path / "conns.json"
    path.write_text("{not json")
    [ignored] = connections.load({**env, "PODMAN_CONNECTIONS_CONF": str(path)}, os.geteuid()).ignored
    assert ignored.path == str(path) and ignored.why.startswith("not read: not JSON")


def test_what_a_uri_names(tmp_path: Path) -> None:
    env, uid = env_in(tmp_path), 4242
    assert connections.for_uri("unix:///run/p.sock", "CONTAINER_HOST", env, uid) == Candidate("/run/p.sock",
                                                                                               "CONTAINER_HOST")
    assert connections.for_uri("unix://run/p.sock", "x", env, uid).refused == "not an absolute unix:///path URI"
    ssh = connections.for_uri("ssh://alice:secret@build.example:2222/run/user/1000/podman/podman.sock", "x", env,
                              uid, identity="/home/a/.ssh/id", label="build")
    runtime = rundir.resolve(env, uid).path  # the user's runtime directory (here its fallback)
    local = f"{runtime}/podmand-build.sock"
    assert ssh.path == "ssh://alice@build.example:2222/run/user/1000/podman/podman.sock"  # no password, ever
    assert "secret" not in ssh.refused
    assert ssh.refused == (
        "not supported: podmand reaches Podman through a Unix socket only; forward it to one with "
        f"'ssh -nNT -L {local}:/run/user/1000/podman/podman.sock -i /home/a/.ssh/id -p 2222 alice@build.example' "
        f"and set CONTAINER_HOST=unix://{local} (or OPENSHELL_PODMAN_SOCKET={local})"
    )
    root = connections.for_uri("ssh://root@h", "x", env, uid)
    assert f"'ssh -nNT -L {runtime}/podmand-h.sock:/run/podman/podman.sock root@h'" in root.refused
    tcp = connections.for_uri("tcp://10.0.0.1:8080", "x", env, uid)
    assert tcp.refused.startswith("not supported (tcp:// is unauthenticated and unencrypted)")


def test_machine_socket_from_inspect_else_its_api_sock(tmp_path: Path) -> None:
    env, asked = env_in(tmp_path), []
    inspect_out = json.dumps([{"Name": "podman-machine-default", "ConnectionInfo": {
        "PodmanSocket": {"Path": "/var/folders/x/T/podman/podman-machine-default-api.sock"}, "PodmanPipe": None}}])

    def inspect(name: str) -> str | None:
        asked.append(name)
        return inspect_out if name == "podman-machine-default" else None

    got = connections.machine_candidate("podman-machine-default-root", "default connection", env, 501, inspect)
    assert asked == ["podman-machine-default-root", "podman-machine-default"]  # a rootful one's is <name>-root
    assert got == Candidate("/var/folders/x/T/podman/podman-machine-default-api.sock",
                            "default connection: machine 'podman-machine-default', from podman machine inspect",
                            machine="podman-machine-default")
    gone = connections.machine_candidate("dev", "connection 'dev'", {**env, "TMPDIR": "/private/tmp/u"}, 501,
                                         lambda name: None, platform="darwin")
    assert (gone.path, gone.machine) == ("/private/tmp/u/podman/dev-api.sock", "dev")
    assert "podman machine inspect did not say" in gone.source
    linux = connections.machine_candidate("dev", "c", env, 501, lambda name: None, platform="linux")
    assert linux.path == f"{rundir.resolve(env, 501).path}/podman/dev-api.sock"
    assert connections.machine_candidate("dev", "c", env, 0, lambda n: None, platform="linux").path == (
        "/run/podman/dev-api.sock")
    assert connections.inspected_socket("[]", "x") == "" and connections.inspected_socket("nope", "x") == ""
