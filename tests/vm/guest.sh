#!/bin/bash
# tests/vm/guest.sh - runs as root in tests/setup-vm.sh's guest, once per boot (the image's
# podmand-vm-lane starts it from the share, /host). It unpacks the checkout, loads the test
# images into the lingering user's store, enables that user's socket-activated podman.socket
# (and the system's, for the few tests that read the rootful store), and runs pytest with the
# share's arguments against the share's pex. pytest runs as root, as on the host (the tests
# start each podmand as the user with runuser, and the systemd tests through the user's own
# manager); its log, junit.xml and exit status land in /host/out.
set -u
OUT=/host/out
SRC=/srv/podmand
U=podmand
uid=$(id -u "$U")
say() { printf 'guest: [%6ss] %s\n' "$(cut -d' ' -f1 /proc/uptime)" "$*"; }
as_user() {  # CMD...: as the test user, in its systemd session's environment
    (cd / && runuser -u "$U" -- env -i HOME="/home/$U" USER="$U" LOGNAME="$U" PATH=/usr/bin:/bin \
        XDG_RUNTIME_DIR="/run/user/$uid" DBUS_SESSION_BUS_ADDRESS="unix:path=/run/user/$uid/bus" "$@")
}
say "checkout"
rm -rf "$SRC"; mkdir -p "$SRC"; tar -C "$SRC" -xf /host/checkout.tar || exit 1
say "podman.socket: the system's and $U's (socket activation: no podman runs until asked)"
systemctl enable --now podman.socket || exit 1
as_user systemctl --user enable --now podman.socket || exit 1
as_user systemctl --user is-active podman.service || true
say "test images and the sidecar image into $U's store (one archive: tests/setup-vm.sh)"
as_user podman load -q -i /host/cache/images.tar || exit 1
as_user podman tag localhost/podmand-vm/sidecar:lane localhost/podmand:latest || exit 1
as_user podman rmi localhost/podmand-vm/sidecar:lane >/dev/null || exit 1
mapfile -t args </host/args
say "pytest ${args[*]}"
cd "$SRC" || exit 1
env PODMAND_TEST_USER="$U" PODMAN_ROOTLESS_SOCK="/run/user/$uid/podman/podman.sock" \
    PODMAN_ROOTFUL_SOCK=/run/podman/podman.sock PODMAND_PEX=/host/podmand.pex PODMAND_VM_LANE=1 PODMAND_TEST_DEADLINE_SCALE=4 \
    /opt/podmand-test/venv/bin/python -m pytest -p no:cacheprovider --basetemp=/tmp/podmand-tests \
    --junitxml="$OUT/junit.xml" --durations=30 "${args[@]}" >"$OUT/pytest.log" 2>&1
rc=$?
echo "$rc" >"$OUT/pytest.rc"
say "pytest ended with $rc"
