# SPDX-License-Identifier: Apache-2.0
"""Regenerate the Python protobuf/gRPC modules in ``podmand/_proto``.

Usage::

    python proto/generate.py           # rewrite podmand/_proto/
    python proto/generate.py --check   # exit 1 if podmand/_proto/ is stale

The ``.proto`` files import each other by bare file name, so protoc emits
top-level imports such as ``import extension_pb2``. Those are rewritten to
package-relative imports so the modules work inside ``podmand._proto``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROTO_DIR.parent
DEFAULT_OUT_DIR = REPO_ROOT / "podmand" / "_proto"

# Order matters only for readability; protoc resolves dependencies itself.
PROTO_FILES = (
    "extension.proto",
    "options.proto",
    "sandbox.proto",
    "compute_driver.proto",
)

# Only these files define gRPC services.
GRPC_PROTO_FILES = ("compute_driver.proto",)

LOCAL_MODULES = frozenset(Path(name).stem + "_pb2" for name in PROTO_FILES)

INIT_CONTENT = '''"""Generated protobuf and gRPC modules. Do not edit by hand.

Regenerate with ``python proto/generate.py``.
"""
'''

_IMPORT_RE = re.compile(r"^import (?P<module>\w+) as (?P<alias>\w+)$", re.MULTILINE)


def _protoc_include_dir() -> Path:
    """Directory holding google/protobuf/*.proto bundled with grpc_tools."""
    return Path(str(resources.files("grpc_tools") / "_proto"))


def _run_protoc(args: list[str]) -> None:
    cmd = [sys.executable, "-m", "grpc_tools.protoc", *args]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"protoc failed (exit {result.returncode}): {' '.join(cmd)}\n"
            f"{result.stdout}{result.stderr}"
        )


def _relativize_imports(text: str) -> str:
    """Turn ``import foo_pb2 as x`` into ``from . import foo_pb2 as x``."""

    def replace(match: re.Match[str]) -> str:
        module = match.group("module")
        if module not in LOCAL_MODULES:
            return match.group(0)
        return f"from . import {module} as {match.group('alias')}"

    return _IMPORT_RE.sub(replace, text)


def generate(out_dir: Path) -> None:
    """Generate all modules (and ``__init__.py``) into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    include = _protoc_include_dir()
    common = [f"--proto_path={PROTO_DIR}", f"--proto_path={include}"]

    _run_protoc(
        [
            *common,
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            *(str(PROTO_DIR / name) for name in PROTO_FILES),
        ]
    )
    _run_protoc(
        [
            *common,
            f"--grpc_python_out={out_dir}",
            *(str(PROTO_DIR / name) for name in GRPC_PROTO_FILES),
        ]
    )

    for path in sorted(out_dir.iterdir()):
        if path.suffix in {".py", ".pyi"} and path.name != "__init__.py":
            original = path.read_text(encoding="utf-8")
            rewritten = _relativize_imports(original)
            if rewritten != original:
                path.write_text(rewritten, encoding="utf-8")

    (out_dir / "__init__.py").write_text(INIT_CONTENT, encoding="utf-8")


def _generated_files(directory: Path) -> set[str]:
    return {
        p.name
        for p in directory.iterdir()
        if p.is_file() and p.suffix in {".py", ".pyi"}
    }


def diff_against(expected_dir: Path, actual_dir: Path) -> list[str]:
    """Describe how ``actual_dir`` differs from freshly generated ``expected_dir``."""
    expected = _generated_files(expected_dir)
    actual = _generated_files(actual_dir) if actual_dir.is_dir() else set()
    problems = [f"missing: {name}" for name in sorted(expected - actual)]
    problems += [f"unexpected: {name}" for name in sorted(actual - expected)]
    for name in sorted(expected & actual):
        if (expected_dir / name).read_bytes() != (actual_dir / name).read_bytes():
            problems.append(f"differs: {name}")
    return problems


def check(out_dir: Path = DEFAULT_OUT_DIR) -> list[str]:
    """Regenerate into a temporary directory and compare with ``out_dir``."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(fresh)
        return diff_against(fresh, out_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if podmand/_proto/ is out of date",
    )
    args = parser.parse_args(argv)

    if args.check:
        problems = check()
        if problems:
            print(f"{DEFAULT_OUT_DIR} is out of date; run: python proto/generate.py")
            for problem in problems:
                print(f"  {problem}")
            return 1
        print(f"{DEFAULT_OUT_DIR} is up to date")
        return 0

    generate(DEFAULT_OUT_DIR)
    print(f"generated {DEFAULT_OUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
