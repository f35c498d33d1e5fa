# tests/setup-lib.sh - what the setup scripts share, sourced by setup-podman.sh, setup-podman5.sh
# and setup-vm.sh: their messages and timings, and a command run in a debootstrapped tree. Each
# sets SETUP_NAME (its messages' prefix) before sourcing it, and CHROOT_ENV if it uses chroot_in.
# shellcheck shell=bash

say()  { printf '%s: %s\n' "$SETUP_NAME" "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
timed() {  # timed LABEL CMD...: run CMD, report how long it took
    local label=$1 start end; shift
    start=$(date +%s%N); "$@"; end=$(date +%s%N)
    say "$(printf '%-9s %6d ms' "$label" $(( (end - start) / 1000000 )))"
}

# chroot_in ROOT CMD...: CMD chrooted into ROOT with only CHROOT_ENV's variables and a /proc
# (maintainer scripts fail without one), mounted in a private mount namespace that ends with
# CMD: nothing is mounted on the host.
chroot_in() {
    local root=$1; shift
    # shellcheck disable=SC2016
    unshare --mount --propagation private sh -c 'mount -t proc proc "$1/proc" && exec chroot "$@"' \
        sh "$root" env -i "${CHROOT_ENV[@]}" DEBIAN_FRONTEND=noninteractive "$@"
}
