"""The package's layers, read from the source (the AST: no import runs).

Each package imports only the layers before it (docs/architecture.md draws them):

    leaves (errors, names, logs, locks, tracing, bytecode)
      < libpod < config < security < sandbox < pair < host < driver < watch
      < the edge (decoding, negotiation, rpcspans, servicer, server)   cli beside it
      < __main__

``cli`` may import everything below ``driver`` and the edge's ``negotiation`` (the
contract's constants), never ``driver``, ``watch``, ``servicer`` or ``server``. Any
import counts: at the top of a module, inside a function, under TYPE_CHECKING.
And no two modules may import each other, however long the way round.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterator
from pathlib import Path

import podmand

PACKAGE = Path(podmand.__file__).parent
LEAVES = {"podmand", "podmand.errors", "podmand.names", "podmand.logs", "podmand.locks", "podmand.tracing",
          "podmand.bytecode"}
EDGE = {"podmand.decoding", "podmand.negotiation", "podmand.rpcspans", "podmand.servicer", "podmand.server"}
ORDER = ["leaves", "libpod", "config", "security", "sandbox", "pair", "host", "driver", "watch", "edge", "main"]
CLI_MAY_ALSO = {"podmand.negotiation"}


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        if "_proto" in path.relative_to(root).parts:
            continue
        parts = ["podmand", *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """Every podmand module ``name`` imports (a name imported from a package that is
    one of its modules counts as that module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known and target.startswith("podmand."):
                target = target.rpartition(".")[0]
            if target in known and target != name and not target.startswith("podmand._proto"):
                yield target


def graph(root: Path) -> dict[str, set[str]]:
    found = modules(root)
    return {name: set(imports(name, path, set(found))) for name, path in found.items()}


def layer(name: str) -> str:
    if name in LEAVES:
        return "leaves"
    if name in EDGE:
        return "edge"
    if name == "podmand.__main__":
        return "main"
    return name.split(".")[1]


def may_import(importer: str, imported: str) -> bool:
    a, b = layer(importer), layer(imported)
    if a == b:
        return a != "leaves"  # the leaves import no podmand module at all
    if a == "cli":
        return imported in CLI_MAY_ALSO or (b != "cli" and ORDER.index(b) < ORDER.index("driver"))
    if b == "cli":
        return a == "main"
    return ORDER.index(b) < ORDER.index(a)


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} imports {b}" for a, targets in edges.items() for b in targets if not may_import(a, b))


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_module_belongs_to_a_layer() -> None:
    """No hand-written module sits at the top level but the leaves, the edge and __main__."""
    strays = sorted(n for n in graph(PACKAGE) if layer(n) not in ORDER and layer(n) != "cli")
    assert strays == []


def test_no_import_goes_against_the_layers() -> None:
    assert layer_violations(graph(PACKAGE)) == []


def test_no_import_cycles() -> None:
    assert cycles(graph(PACKAGE)) == []


def test_no_module_over_400_lines_and_no_class_over_300() -> None:
    """Modules own one thing each; past these sizes they own two (issue 21's bounds)."""
    long_modules = {n: len(p.read_text().splitlines()) for n, p in modules(PACKAGE).items()}
    assert {n: lines for n, lines in long_modules.items() if lines > 400} == {}
    classes = {
        f"{n}.{node.name}": node.end_lineno - node.lineno + 1
        for n, p in modules(PACKAGE).items()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ClassDef)
    }
    assert {c: lines for c, lines in classes.items() if lines > 300} == {}


def plant_file(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of the package whose ``module`` has ``line`` planted in a function."""
    copy = tmp_path / "podmand"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "_proto"))
    target = copy.joinpath(*module.split(".")[1:]).with_suffix(".py")
    target.write_text(target.read_text() + f"\n\ndef _planted() -> None:\n    {line}\n")
    return copy


def plant(tmp_path: Path, module: str, line: str) -> dict[str, set[str]]:
    return graph(plant_file(tmp_path, module, line))


def test_a_planted_cycle_is_caught(tmp_path: Path) -> None:
    """spec already imports usernamespace; usernamespace importing spec back (inside a
    function, where a lazy import would hide it) is a cycle."""
    pair = {"podmand.sandbox.spec", "podmand.sandbox.usernamespace"}
    edges = plant(tmp_path, "podmand.sandbox.usernamespace", "from . import spec  # noqa")
    assert any(pair <= set(c) for c in cycles(edges))


def test_a_planted_upward_import_is_caught(tmp_path: Path) -> None:
    edges = plant(tmp_path, "podmand.config.schema", "from ..driver import core  # noqa")
    assert "podmand.config.schema imports podmand.driver.core" in layer_violations(edges)
    edges = plant(tmp_path / "sandbox", "podmand.sandbox.spec", "from ..pair import tls  # noqa")
    assert "podmand.sandbox.spec imports podmand.pair.tls" in layer_violations(edges)
    edges = plant(tmp_path / "pair", "podmand.pair.tls", "from ..host import wsl  # noqa")
    assert "podmand.pair.tls imports podmand.host.wsl" in layer_violations(edges)
    edges = plant(tmp_path / "cli", "podmand.cli.ctl.view", "from ...watch import hub  # noqa")
    assert "podmand.cli.ctl.view imports podmand.watch.hub" in layer_violations(edges)
