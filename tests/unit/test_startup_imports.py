"""Each command imports what it uses: ``--version``, ``health`` and ``ctl`` start without
serve's modules, the other tools, gRPC where they speak none, ``importlib.metadata``
and the settings' loader (cli/parser.py builds only the chosen command; config loads
``defaults`` alone until more is named). Each runs in a fresh interpreter (this one has
imported everything), against sockets that do not exist, and lists what it loaded."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

RUN = r"""
import contextlib, io, json, sys
from podmand.__main__ import main
with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
    try:
        status = main(sys.argv[1:])
    except SystemExit as exc:
        status = exc.code
print(json.dumps([status, out.getvalue() + err.getvalue(), sorted(sys.modules)]))
"""

SERVING = ["podmand.server", "podmand.servicer", "podmand.driver", "podmand.watch", "podmand.sandbox.spec",
           "opentelemetry"]
SETTINGS = ["podmand.config.loading", "podmand.config.schema", "podmand.config.checks"]
GRPC = ["grpc", "google.protobuf.descriptor", "podmand._proto"]


def loaded(tmp_path: Path, *argv: str) -> tuple[int, str, set[str]]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPENSHELL_PODMAN_SOCKET": str(tmp_path / "podman.sock")}
    done = subprocess.run([sys.executable, "-c", RUN, *argv], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    status, said, modules = json.loads(done.stdout.strip().splitlines()[-1])
    return status, said, set(modules)


def prefixed(modules: set[str], names: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(f"{n}.") for n in names))


@pytest.mark.parametrize(
    ("argv", "said", "present", "absent"),
    [
        (["--version"], "Podman: no API socket answered", ["podmand.host.discovery", "podmand.libpod"],
         [*SERVING, *SETTINGS, *GRPC, "importlib.metadata", "podmand.cli.ctl", "podmand.cli.doctor",
          "podmand.cli.health", "podmand.cli.completion"]),
        (["health", "--socket", "{tmp}/d.sock"], "no podmand is listening", ["grpc"],
         [*SERVING, *SETTINGS, "msgspec", "importlib.metadata", "podmand.cli.ctl", "podmand.cli.doctor",
          "podmand.libpod", "podmand.host"]),
        (["ctl", "--socket", "{tmp}/d.sock", "list"], "no podmand is listening", GRPC,
         [*SERVING, *SETTINGS, "importlib.metadata", "podmand.cli.doctor", "podmand.cli.health"]),
        (["ctl", "--socket", "{tmp}/d.sock", "get", "x"], "no podmand is listening", GRPC,
         [*SERVING, *SETTINGS, "importlib.metadata", "podmand.cli.doctor", "podmand.cli.health"]),
    ],
    ids=["version", "health", "ctl-list", "ctl-get"],
)
def test_a_command_imports_what_it_uses(
        tmp_path: Path, argv: list[str], said: str, present: list[str], absent: list[str]) -> None:
    status, output, modules = loaded(tmp_path, *(a.format(tmp=tmp_path) for a in argv))
    assert said in output and status == (0 if argv == ["--version"] else 1), output  # it ran, not just parsed
    assert set(present) <= modules
    assert prefixed(modules, absent) == []


def test_serve_loads_no_cryptography_until_tls_is_minted() -> None:
    """cryptography (the split topology's per-launch TLS, podmand/pair/tls.py) is imported
    where that material is made: serve's modules and the pair package load without it."""
    code = ("import sys, podmand.server, podmand.pair, podmand.pair.tls; print('cryptography' in sys.modules); "
            "podmand.pair.tls.mint('7f0c0a52-2f43-4c5e-9a52-4b5c7b2b9d11'); print('cryptography' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.split() == ["False", "True"]


def test_the_modules_named_exist() -> None:
    """An absent module proves nothing if its name is wrong."""
    names = {*SERVING, *SETTINGS, *GRPC, "importlib.metadata", "msgspec", "podmand.cli.ctl", "podmand.cli.doctor",
             "podmand.cli.health", "podmand.cli.completion", "podmand.libpod", "podmand.host"}
    assert sorted(n for n in names if importlib.util.find_spec(n) is None) == []


def test_serving_imports_what_only_the_tools_use_never(tmp_path: Path) -> None:
    """The other way round (so the lists above name modules that exist): serve's
    start-up, refused at its first setting, has loaded the settings' loader and no tool."""
    status, output, modules = loaded(tmp_path, "serve", "--gateway-name", "a\nb")
    assert status == 2 and "gateway_name" in output, output
    assert set(SETTINGS) <= modules
    assert prefixed(modules, ["podmand.cli.ctl", "podmand.cli.doctor", "podmand.cli.health"]) == []
