#!/usr/bin/env bash
# tests/images/pybase.sh - a slim glibc Python base image without any registry,
# for building containers/Containerfile in CI (podman build --from ...).
#
#   bash tests/images/pybase.sh        (run as root; loads it into the rootless test user's store)
#   bash tests/images/pybase.sh tar    (only the cached rootfs tar: tests/images/build.sh's
#                                       Python stand-in images start from it)
#
# Debian bookworm minbase + python3 via debootstrap (about 40 s once; the rootfs
# tar is cached in /var/cache/podmand-test), trimmed of docs and apt lists.
set -euo pipefail
TEST_USER="${PODMAND_TEST_USER:-podmand}"
IMAGE=localhost/podmand-test/python:3.11
CACHE=/var/cache/podmand-test
TAR="$CACHE/pybase.tar"
say() { printf 'pybase: %s\n' "$*" >&2; }
[ "$(id -u)" -eq 0 ] || { say "must run as root"; exit 1; }
mkdir -p "$CACHE"
if [ ! -s "$TAR" ]; then
    command -v debootstrap >/dev/null || { say "debootstrap missing: run tests/setup-podman.sh first"; exit 1; }
    root=$(mktemp -d)
    say "debootstrap bookworm (minbase + python3) into $root"
    debootstrap --variant=minbase --include=python3 bookworm "$root" >/dev/null  # debootstrap's default mirror
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* \
           "$root"/usr/share/man/* "$root"/usr/share/locale/*
    tar -C "$root" --sort=name --numeric-owner -cf "$TAR.tmp" . && mv "$TAR.tmp" "$TAR"
    chmod 0644 "$TAR"
    rm -rf "$root"
fi
[ "${1:-}" != tar ] || exit 0
home=$(getent passwd "$TEST_USER" | cut -d: -f6)
uid=$(id -u "$TEST_USER")
as_user() {  # from /: rootless podman returns to the caller's directory, maybe not ours to enter
    cd / && runuser -u "$TEST_USER" -- env -i HOME="$home" PATH=/usr/bin:/bin XDG_RUNTIME_DIR="/run/user/$uid" "$@"
}
if ! as_user podman image exists "$IMAGE"; then
    as_user podman import -q --change 'CMD=["/usr/bin/python3"]' \
        --change ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$TAR" "$IMAGE" >/dev/null
    say "imported $IMAGE"
fi
