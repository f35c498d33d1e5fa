"""Each package's public surface is its ``__all__``: every name there resolves, and
every import from another package names only what is there (as httpx's own test
checks its exports)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests.unit.test_layers import PACKAGE, modules, plant_file

MODULES = modules(PACKAGE)
PACKAGES = sorted(n for n, p in MODULES.items() if p.name == "__init__.py" and n != "podmand")


def outside_imports(found: dict[str, Path] = MODULES) -> dict[str, set[tuple[str, str]]]:
    """package -> (importer, name) for each import of it from outside it."""
    out: dict[str, set[tuple[str, str]]] = {p: set() for p in PACKAGES}
    for importer, path in found.items():
        here = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = node.module or ""
            if node.level:
                parts = here.split(".")
                module = ".".join([*parts[: len(parts) - node.level + 1], module]).strip(".")
            for alias in node.names:
                if module in out:  # from podmand.pkg import name (a module or a re-export)
                    package, name = module, alias.name
                elif module in found and module.rpartition(".")[0] in out:  # from podmand.pkg.mod import x
                    package, _, name = module.rpartition(".")
                else:
                    continue
                if importer != package and not importer.startswith(package + "."):
                    out[package].add((importer, name))
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_all_names_resolve(package: str) -> None:
    module = importlib.import_module(package)
    exported = module.__all__
    assert exported, f"{package} exports nothing"
    for name in exported:
        if not hasattr(module, name):
            importlib.import_module(f"{package}.{name}")  # a public submodule


@pytest.mark.parametrize("package", PACKAGES)
def test_other_packages_use_only_the_exports(package: str) -> None:
    exported = set(importlib.import_module(package).__all__)
    strays = sorted(f"{importer} imports {name}" for importer, name in outside_imports()[package]
                    if name not in exported)
    assert strays == []


def test_a_private_module_used_from_outside_is_caught(tmp_path: Path) -> None:
    """sandbox.resources is the sandbox package's own (spec composes it): were
    driver.core to import it, the check above would name the import."""
    assert "resources" not in importlib.import_module("podmand.sandbox").__all__
    copy = plant_file(tmp_path, "podmand.driver.core", "from ..sandbox import resources  # noqa")
    assert ("podmand.driver.core", "resources") in outside_imports(modules(copy))["podmand.sandbox"]
