#!/usr/bin/env bash
# The project's test command (run as root): make the test virtualenv, prepare real Podman
# (rootless user, API sockets, test images), build the pex for every architecture, then run
# the host's set of tests against it (tests/lanes.sh: every test but the e2e files other lanes
# run; about 12 minutes here), held to 90 % branch coverage. Arguments go to pytest instead.
#
#   tests/run.sh --venv    only make the virtualenv and print its path (.ci/run checks with it)
#   tests/run.sh --podman 5.4 [ARGS]   against Podman 5.4.2 instead of the host's 4.3.1: the
#                          Debian 13 tree of tests/setup-podman5.sh, with pytest, its virtualenv
#                          (CPython 3.13) and the pex (built here, outside) all inside the tree's
#                          mount namespace. Default ARGS: tests/e2e tests/ship, the tests that
#                          talk to Podman or ship the pex; as with any ARGS, coverage is
#                          printed but not held to 90 % (only the host's default set is).
#   tests/run.sh --podman 5.8 [ARGS]   the same against Debian sid's Podman 5.8.6
#                          (PODMAND_SUITE=sid: its own tree, virtualenv on CPython 3.14)
#   tests/run.sh --podman 6.1 [ARGS]   the same against Podman 6.1.1 from Debian experimental
#                          (PODMAND_SUITE=experimental: sid's tree with experimental's Podman
#                          stack, cgroup v2 in its own mount namespace; CPython 3.14)
#   tests/run.sh --podman 4.3 [ARGS]   the default: the host's Podman
#                          (and tests/setup-python314.sh's CPython 3.14 tree, for the ship tests)
#   tests/run.sh --host vm [ARGS]      in a systemd host: tests/setup-vm.sh's Debian 13 virtual
#                          machine (systemd, cgroup v2, crun, journald, the user's socket-
#                          activated podman.socket, Podman 5.4.2), emulated, so about eight times
#                          slower. Default ARGS: tests/lanes.sh's VM_LANE. No coverage.
#
# The virtualenv (PODMAND_TEST_VENV, default /var/lib/podmand-test/venv) is made from
# python3 on PATH (under sudo: the system's) and gets '.[test]'; nothing is installed into
# that Python itself (PEP 668). Where venv cannot make one (Debian and Ubuntu without
# python3.X-venv), apt-get installs it. A re-run reinstalls only when pyproject.toml, the
# checkout or the interpreter changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${PODMAND_TEST_VENV:-/var/lib/podmand-test/venv}"
say() { printf 'run.sh: %s\n' "$*" >&2; }

ensure_venv_module() {
    "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null && return 0
    local pkg
    pkg="python$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
    command -v apt-get >/dev/null || { say "$PYTHON cannot make a virtualenv (no ensurepip); install $pkg"; exit 1; }
    say "installing $pkg: $PYTHON has no ensurepip"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
}

make_venv() {
    local base want
    base=$("$PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version.split()[0])')
    want="$base $(pwd -P) $(sha256sum pyproject.toml | cut -d' ' -f1)"
    [ "$(cat "$VENV/.podmand-installed" 2>/dev/null)" = "$want" ] && return 0
    if [ "$(cat "$VENV/.podmand-base" 2>/dev/null)" != "$base" ] || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
        ensure_venv_module
        say "making $VENV from $base"
        rm -rf "$VENV"
        mkdir -p "$(dirname "$VENV")"
        "$PYTHON" -m venv "$VENV"
        echo "$base" >"$VENV/.podmand-base"
    fi
    say "installing '.[test]' into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]' >&2  # stdout: --venv's answer
    echo "$want" >"$VENV/.podmand-installed"
}

# shellcheck source=tests/lanes.sh
source tests/lanes.sh
check_lanes

PODMAN=4.3
case "${1:-}" in
    --podman) PODMAN="${2:-}"; shift 2 || { say "--podman needs a version: 4.3, 5.4, 5.8 or 6.1"; exit 2; } ;;
    --host) [ "${2:-}" = vm ] || { say "--host: the one other host is 'vm' (tests/setup-vm.sh)"; exit 2; }
            shift 2; PODMAN=vm ;;
    --in-tree) shift; PODMAN=in-tree ;;  # setup-podman5.sh's tree, set up and built already (below)
esac
# Each newer Podman is a Debian suite's, in a tree of tests/setup-podman5.sh (PODMAND_SUITE).
case "$PODMAN" in
    4.3|in-tree|vm) SUITE="" ;;
    5.4) SUITE=trixie ;;
    5.8) SUITE=sid ;;
    6.1) SUITE=experimental ;;
    *) say "--podman $PODMAN: the versions at hand are 4.3 (the host's), 5.4, 5.8 and 6.1 (tests/setup-podman5.sh)"; exit 2 ;;
esac
if [ "$PODMAN" != in-tree ]; then
    make_venv
    if [ "${1:-}" = --venv ]; then echo "$VENV"; exit 0; fi
fi
if [ "$PODMAN" = vm ]; then
    # The host's Podman builds the sidecar image the guest's Quadlet unit runs; the test images'
    # tars are the host's cache; the pex is built here (PODMAND_PEX_BUILT=1: .ci/run built it).
    bash tests/setup-podman.sh all
    bash tests/images/build.sh cache
    [ -n "${PODMAND_PEX_BUILT:-}" ] || PYTHON="$VENV/bin/python" ./build_pex.sh
    [ "$#" -gt 0 ] || set -- "${VM_LANE[@]}"
    exec bash tests/setup-vm.sh run "$@"
fi
if [ -n "$SUITE" ]; then
    export PODMAND_SUITE="$SUITE"
    bash tests/setup-podman5.sh all
    # PODMAND_PEX_BUILT=1: dist/ holds this checkout's pex already (.ci/run: the 4.3.1 run built it)
    [ -n "${PODMAND_PEX_BUILT:-}" ] || PYTHON="$VENV/bin/python" ./build_pex.sh --all
    [ "$#" -gt 0 ] || set -- tests/e2e tests/ship
    # The same script runs the suite inside the tree, with the tree's virtualenv.
    exec bash tests/setup-podman5.sh run env PODMAND_TEST_VENV=/var/lib/podmand-test/venv \
        bash tests/run.sh --in-tree "$@"
fi
if [ "$PODMAN" = 4.3 ]; then
    bash tests/setup-podman.sh all
    # Debian sid's CPython 3.14 in a tree, for tests/ship/test_python314.py (once: about 30 s)
    bash tests/setup-python314.sh >/dev/null
    eval "$(bash tests/setup-podman.sh env)"
    PYTHON="$VENV/bin/python" ./build_pex.sh --all
else
    eval "$(bash tests/setup-podman.sh env)"
fi
# Branch coverage of podmand/ over the host's set, printed at the end: pytest runs under
# coverage, which hands its settings to every process it starts (COVERAGE_PROCESS_CONFIG).
# Each podmand, the pex included, measures itself; the pex finds coverage through
# PEX_EXTRA_SYS_PATH in a copy of its own, readable by the rootless and throwaway users, who
# write their data into the same sticky directory (a process ended by SIGKILL writes none).
COVERAGE_DIR="${PODMAND_COVERAGE_DIR:-/tmp/podmand-coverage}"
rm -rf "$COVERAGE_DIR"
mkdir -m 1777 "$COVERAGE_DIR"
mkdir -m 0755 "$COVERAGE_DIR/site"
cp -R "$("$VENV/bin/python" -c 'import coverage, os; print(os.path.dirname(coverage.__file__))')" "$COVERAGE_DIR/site/"
chmod -R a+rX "$COVERAGE_DIR/site"
export COVERAGE_FILE="$COVERAGE_DIR/data" PEX_EXTRA_SYS_PATH="$COVERAGE_DIR/site"
# The host's default set (tests/lanes.sh) must keep podmand/ at 90 % branch coverage or more;
# a run of other tests (arguments given, or in a tree) just prints its figure.
fail_under=0
if [ "$#" = 0 ] && [ "$PODMAN" = 4.3 ]; then mapfile -t default < <(host_set); set -- "${default[@]}"; fail_under=90; fi
# A temporary directory of this run's own: the e2e tests open it to the rootless user, and
# any other pytest run on the host resets the shared /tmp/pytest-of-<user> to 0700
# (pytest empties this one at the start of each run).
status=0
"$VENV/bin/python" -m coverage run -m pytest --basetemp="${PODMAND_TEST_TMP:-/tmp/podmand-tests}" "$@" || status=$?
# The report fails the run only when the tests passed (their exit status comes first).
if ! { "$VENV/bin/python" -m coverage combine --quiet &&
       "$VENV/bin/python" -m coverage report --fail-under="$fail_under"; }; then
    [ "$status" != 0 ] || status=1
fi
exit "$status"
