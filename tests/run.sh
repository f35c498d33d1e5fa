#!/usr/bin/env bash
# The project's test command (run as root): install the Python test packages,
# prepare real Podman (rootless user, API sockets, test images), build the pex,
# then run the whole suite against it. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
bash tests/setup-podman.sh all
eval "$(bash tests/setup-podman.sh env)"
./build_pex.sh
exec python3 -m pytest "$@"
