"""Print podmand's build, runtime and test requirements from pyproject.toml, one per line:
what a virtualenv of the suite needs where pip has no index of its own (tests/setup-podman5.sh's
trees, tests/setup-vm.sh's guest), downloaded outside and installed there without one."""

from __future__ import annotations

import sys
import tomllib


def main(path: str) -> None:
    with open(path, "rb") as f:
        project = tomllib.load(f)
    reqs = ["setuptools>=68", *project["build-system"]["requires"], *project["project"]["dependencies"],
            *project["project"]["optional-dependencies"]["test"]]
    print("\n".join(reqs))


if __name__ == "__main__":
    main(sys.argv[1])
