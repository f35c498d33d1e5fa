#!/usr/bin/env bash
# The project's test command (run as root): prepare real Podman (rootless user,
# API sockets, test images), build the pex, then run the whole suite against it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup-podman.sh all
eval "$(bash tests/setup-podman.sh env)"
./build_pex.sh
exec python3 -m pytest "$@"
