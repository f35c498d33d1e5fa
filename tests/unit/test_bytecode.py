"""bytecode.py: the .pyc files a cold start of the pex left out are written once serving."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from podmand import bytecode


def flags(dont_write_bytecode: int) -> types.SimpleNamespace:
    """sys.flags as they are, but for -B (PYTHONDONTWRITEBYTECODE)."""
    names = [n for n in dir(sys.flags) if not n.startswith(("_", "n_")) and n not in ("count", "index")]
    fields = {n: getattr(sys.flags, n) for n in names}
    return types.SimpleNamespace(**fields | {"dont_write_bytecode": dont_write_bytecode})


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path with one fresh module, removed from sys.modules after; Python's
    own flags as pexboot.sh runs it (no -B, whatever runs these tests)."""
    monkeypatch.setattr(sys, "flags", flags(0))
    (tmp_path / "podmand_pyc_probe.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    sys.modules.pop("podmand_pyc_probe", None)


def test_a_deferred_start_writes_the_imported_modules_pycs_and_writing_is_on_again(
        module_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # what pexboot.sh does on a cold serve
    module = importlib.import_module("podmand_pyc_probe")
    cached = Path(importlib.util.cache_from_source(str(module_dir / "podmand_pyc_probe.py")))
    assert not cached.exists()
    assert bytecode.deferred()
    thread = bytecode.write_deferred()
    assert thread is not None
    thread.join(30)
    assert not thread.is_alive()
    assert cached.exists() and module.VALUE == 42
    assert sys.dont_write_bytecode is False
    # The file is what the import system takes: loading it does not rewrite it.
    written = cached.stat().st_mtime_ns
    sys.modules.pop("podmand_pyc_probe")
    assert importlib.import_module("podmand_pyc_probe").VALUE == 42
    assert cached.stat().st_mtime_ns == written


def test_nothing_is_written_when_writing_was_not_deferred(module_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert not bytecode.deferred()
    assert bytecode.write_deferred() is None


def test_python_run_with_minus_b_is_left_alone(module_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "flags", flags(1))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    importlib.import_module("podmand_pyc_probe")
    assert not bytecode.deferred()
    assert bytecode.write_deferred() is None
    assert sys.dont_write_bytecode is True
    assert not (module_dir / "__pycache__").exists()


def test_a_source_that_cannot_be_compiled_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("def (:\n")
    (tmp_path / "good.py").write_text("X = 1\n")
    sources = [(str(tmp_path / name), str(tmp_path / "__pycache__" / f"{name}c")) for name in ("bad.py", "good.py")]
    bytecode.write(sources)
    assert not (tmp_path / "__pycache__" / "bad.pyc").exists()
    assert (tmp_path / "__pycache__" / "good.pyc").exists()
