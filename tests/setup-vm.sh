#!/usr/bin/env bash
# tests/setup-vm.sh - a systemd host for podmand's tests: Debian 13 in a QEMU virtual machine,
# as podmand's users run it (systemd as PID 1, cgroup v2 with cpu, memory and pids delegated
# to the user, crun, journald as Podman's event logger, a lingering user whose systemd manager
# socket-activates podman.socket, pasta). This machine has none of that (tests/setup-podman.sh
# says why), and its /dev/kvm cannot run a stock kernel, so QEMU emulates (TCG): about 5 times
# slower than native for Podman, 8 times for Python. Run as root.
#
#   bash tests/setup-vm.sh image          make (or reuse) the image; prints nothing on stdout
#   bash tests/setup-vm.sh run [ARGS]     boot it once: tests/vm/guest.sh runs pytest ARGS in it
#                                         against this checkout and dist/podmand.pex, the results
#                                         come back into $PODMAND_VM_OUT (junit.xml, pytest.log,
#                                         the guest's journal and console); exits with pytest's
#                                         status, or 3 when the guest never ran the suite
#   bash tests/setup-vm.sh stop           stop a VM this script started (its recorded pid)
#
# Everything lives in $PODMAND_VM_DIR (default /var/lib/podmand-test/vm):
#   qemu/         QEMU 10 from a Debian 13 tree (debootstrap), run through that tree's own
#                 dynamic loader: the host's QEMU 7.2 (if any) boots slower; nothing is installed
#                 on the host
#   rootfs/       the guest's Debian 13 tree (debootstrap; about 2.5 minutes)
#   disk.raw, vmlinuz, initrd.img   the image made from it (mkfs.ext4 -d), and its kernel
#   key           what the image was made from: this script, tests/vm/ and the test extra's
#                 wheels (pyproject.toml); a change of any remakes the image
#   share/        the 9p folder the guest mounts on /host for one run (made afresh per run)
# Each boot writes to a fresh qcow2 overlay; disk.raw is never changed by a run.
#
# Why each QEMU choice (measured here: ../shared/docs/vm/README.md has the recipe):
#   -accel tcg,thread=multi -smp 1: with 2 vCPUs under multi-threaded TCG the guest kernel
#   oopses when it patches its own code (static keys, e.g. the first container with --cpus).
#   The guest's kernel and initrd are booted directly (-kernel), its root is virtio, its
#   network QEMU's user-mode one (pasta needs a routed interface; nothing comes in).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
CHECKOUT="$(dirname "$HERE")"
VM="${PODMAND_VM_DIR:-/var/lib/podmand-test/vm}"
OUT="${PODMAND_VM_OUT:-$VM/out}"
HOST_VENV="${PODMAND_TEST_VENV:-/var/lib/podmand-test/venv}"
TIMEOUT="${PODMAND_VM_TIMEOUT:-1500}"   # seconds for one boot, suite included
MEMORY="${PODMAND_VM_MEMORY:-4096}"     # MiB
GUEST_USER=podmand                      # uid 1000, lingering; the tests' PODMAND_TEST_USER
GUEST_VENV=/opt/podmand-test/venv       # the suite's virtualenv, in the image
# The guest's packages: systemd and a user session (logind, dbus-user-session), the kernel,
# Podman with crun, pasta and netavark as Debian 13 ships them, and what the tests run.
GUEST_PACKAGES=(systemd systemd-sysv udev dbus dbus-user-session libpam-systemd
                linux-image-amd64 initramfs-tools kmod
                podman crun conmon catatonit netavark aardvark-dns passt uidmap fuse-overlayfs
                python3 python3-venv ca-certificates iproute2 procps util-linux login passwd
                nftables iptables busybox-static openssl)
QEMU_PACKAGES=(qemu-system-x86 qemu-utils)

SETUP_NAME=setup-vm CHROOT_ENV=(PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
# shellcheck source=tests/setup-lib.sh
source "$HERE/setup-lib.sh"  # say, fail, timed, chroot_in
[ "$(id -u)" -eq 0 ] || fail "must run as root"
[ "$(uname -m)" = x86_64 ] || fail "the VM lane is made for x86_64 hosts (this is $(uname -m))"

# debootstrap_into DIR PACKAGES...: a Debian 13 minbase tree, made beside DIR and moved into place
# when complete (a half-made tree is never used).
debootstrap_into() {
    local dir=$1 list; shift
    command -v debootstrap >/dev/null || fail "debootstrap missing (apt-get install debootstrap)"
    list=$(IFS=,; echo "$*")
    rm -rf "$dir.new"; mkdir -p "$dir.new"
    debootstrap --variant=minbase --include="$list" trixie "$dir.new" >"$dir.log" 2>&1 \
        || { tail -n 20 "$dir.log" >&2; fail "debootstrap (log: $dir.log)"; }
    rm -rf "$dir"; mv -T "$dir.new" "$dir"
}

qemu() {  # the QEMU tree's binary NAME, run through the tree's loader: qemu NAME ARGS...
    local q=$VM/qemu name=$1; shift
    # exec: in the background (boot) the recorded pid is then QEMU's own, not a subshell's
    QEMU_MODULE_DIR=$q/usr/lib/x86_64-linux-gnu/qemu exec "$q/lib64/ld-linux-x86-64.so.2" \
        --library-path "$q/usr/lib/x86_64-linux-gnu:$q/lib/x86_64-linux-gnu" "$q/usr/bin/$name" "$@"
}

ensure_qemu() {
    [ -x "$VM/qemu/usr/bin/qemu-system-x86_64" ] && return 0
    say "debootstrap QEMU 10 (Debian 13) into $VM/qemu (under a minute)"
    debootstrap_into "$VM/qemu" "${QEMU_PACKAGES[@]}"
}

# ------------------------------------------------------------------ the image
requirements() { python3 "$HERE/requirements.py" "$CHECKOUT/pyproject.toml"; }

image_key() {
    { cat "${BASH_SOURCE[0]}" "$HERE"/vm/image/*; requirements; } | sha256sum | cut -c1-64
}

# The test extra's wheels for the guest's CPython 3.13, downloaded here by the host's pip (the
# guest has no index settings of its own), installed in the guest's tree without an index.
guest_venv() {
    local root=$1 wheels=$1/tmp/wheels
    mkdir -p "$wheels"
    mapfile -t reqs < <(requirements)
    "$HOST_VENV/bin/python" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
        --python-version 3.13 --implementation cp --platform manylinux2014_x86_64 \
        --platform manylinux_2_28_x86_64 -d "$wheels" "${reqs[@]}" >"$VM/wheels.log" 2>&1 \
        || { grep -v '^WARNING: Location' "$VM/wheels.log" >&2; fail "pip download (log: $VM/wheels.log)"; }
    chroot_in "$root" python3 -m venv "$GUEST_VENV"
    chroot_in "$root" "$GUEST_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        --no-index --find-links /tmp/wheels "${reqs[@]}"
    rm -rf "$wheels"
}

# The guest's configuration: tests/vm/image/ holds the files it gets (the runner and its unit);
# the rest is a user, linger, networking and what must not run uninvited.
configure_guest() {
    local r=$1
    echo podvm >"$r/etc/hostname"
    printf '127.0.0.1 localhost\n127.0.1.1 podvm\n' >"$r/etc/hosts"
    printf '%s\n' '/dev/vda / ext4 rw,relatime 0 1' \
        'host0 /host 9p trans=virtio,version=9p2000.L,msize=512000,cache=none,nofail,x-systemd.device-timeout=10s 0 0' \
        >"$r/etc/fstab"
    mkdir -p "$r/host"
    chroot_in "$r" passwd -d root >/dev/null
    chroot_in "$r" getent passwd "$GUEST_USER" >/dev/null || chroot_in "$r" useradd -m -u 1000 -s /bin/bash "$GUEST_USER"
    # The sandboxes' --userns=auto takes a slice of these per container: 256 sandboxes' worth, as
    # on the host (useradd's own 65536 would hold 64).
    local f
    for f in subuid subgid; do
        sed -i "/^$GUEST_USER:/d" "$r/etc/$f"
        echo "$GUEST_USER:100000:262144" >>"$r/etc/$f"
    done
    mkdir -p "$r/var/lib/systemd/linger"; touch "$r/var/lib/systemd/linger/$GUEST_USER"
    printf '[Match]\nName=en*\n[Network]\nDHCP=yes\n' >"$r/etc/systemd/network/20-wired.network"
    # network-online.target is reached, as on users' hosts: Quadlet's rootless units wait for it
    # (podman-user-wait-network-online.service, 90 s when it never comes).
    chroot_in "$r" systemctl unmask systemd-networkd-wait-online.service >/dev/null 2>&1
    chroot_in "$r" systemctl enable systemd-networkd.service systemd-networkd-wait-online.service >/dev/null 2>&1
    chroot_in "$r" systemctl disable apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
        fstrim.timer e2scrub_all.timer getty@tty1.service >/dev/null 2>&1 || true
    install -m 0755 "$HERE/vm/image/podmand-vm-lane" "$r/usr/local/sbin/podmand-vm-lane"
    install -m 0644 "$HERE/vm/image/podmand-vm-lane.service" "$r/etc/systemd/system/podmand-vm-lane.service"
    chroot_in "$r" systemctl enable podmand-vm-lane.service >/dev/null 2>&1
}

ensure_image() {
    mkdir -p "$VM"
    timed qemu ensure_qemu
    local key; key=$(image_key)
    [ "$(cat "$VM/key" 2>/dev/null)" = "$key" ] && [ -s "$VM/disk.raw" ] && return 0
    rm -f "$VM/key"
    if [ ! -x "$VM/rootfs/usr/bin/podman" ] || [ "$(cat "$VM/rootfs.packages" 2>/dev/null)" != "${GUEST_PACKAGES[*]}" ]; then
        say "debootstrap the guest (Debian 13) into $VM/rootfs (about 2.5 minutes)"
        timed rootfs debootstrap_into "$VM/rootfs" "${GUEST_PACKAGES[@]}"
        echo "${GUEST_PACKAGES[*]}" >"$VM/rootfs.packages"
    fi
    timed venv guest_venv "$VM/rootfs"
    timed config configure_guest "$VM/rootfs"
    rm -f "$VM/disk.raw.new"
    truncate -s 12G "$VM/disk.raw.new"
    timed mkfs mkfs.ext4 -q -F -L podvm -E lazy_itable_init=1,lazy_journal_init=1 -d "$VM/rootfs" "$VM/disk.raw.new"
    mv "$VM/disk.raw.new" "$VM/disk.raw"
    cp -L "$VM"/rootfs/boot/vmlinuz-* "$VM/vmlinuz"
    cp -L "$VM"/rootfs/boot/initrd.img-* "$VM/initrd.img"
    echo "$key" >"$VM/key"
}

# ------------------------------------------------------------------ a run
pid_file() { echo "$VM/qemu.pid"; }

# The share: what the guest reads (the checkout's files, the pex, the images' archive, the
# guest script and pytest's arguments) and where it writes its results (out/).
make_share() {
    local share=$VM/share
    rm -rf "$share"; mkdir -p "$share/out" "$share/cache"
    chmod 0777 "$share/out"
    (cd "$CHECKOUT" && git ls-files -co --exclude-standard -z 2>/dev/null || find . -path ./.git -prune -o -type f -print0) \
        | (cd "$CHECKOUT" && tar --exclude='__pycache__' --ignore-failed-read --null -T - -cf "$share/checkout.tar")
    [ -s "$CHECKOUT/dist/podmand.pex" ] || fail "dist/podmand.pex missing: run ./build_pex.sh first"
    cp "$CHECKOUT/dist/podmand.pex" "$share/podmand.pex"
    timed images guest_images "$share/cache/images.tar"
    cp "$HERE/vm/guest.sh" "$share/guest.sh"
    printf '%s\n' "$@" >"$share/args"
}

# The images the guest's tests run, in one archive the guest loads: the test images from the
# host's rootful store (tests/images/build.sh put them there), which share one layer (an import
# per image, as on the host, would read 160 MB each time under emulation), and the sidecar image
# of containers/Containerfile, which containers/systemd/podmand.container runs. The sidecar is
# built here as docs/deployment.md says, on tests/images/pybase.sh's Python base, in the rootful
# store under a tag of this script's own, removed again (built under emulation: minutes).
SIDECAR_TAG=localhost/podmand-vm/sidecar:lane
GUEST_IMAGES=(localhost/podmand-test/sandbox:1 localhost/podmand-test/supervisor2:1
              localhost/podmand-test/runtime:1 localhost/podmand-test/workload:1)
guest_images() {  # TAR
    local base=localhost/podmand-test/python:3.11 image
    for image in "${GUEST_IMAGES[@]}"; do
        podman image exists "$image" || fail "$image missing from the host's rootful store: run 'bash tests/images/build.sh rootful'"
    done
    bash "$HERE/images/pybase.sh" tar
    podman image exists "$base" || podman import -q --change 'CMD=["/usr/bin/python3"]' \
        --change ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        /var/cache/podmand-test/pybase.tar "$base" >/dev/null
    (cd "$CHECKOUT" && podman build -q --format docker --from "$base" -f containers/Containerfile \
        -t "$SIDECAR_TAG" . >/dev/null) || fail "podman build of containers/Containerfile"
    podman save -q -m -o "$1" "${GUEST_IMAGES[@]}" "$SIDECAR_TAG" || { podman rmi "$SIDECAR_TAG" >/dev/null; fail "podman save"; }
    podman rmi "$SIDECAR_TAG" >/dev/null
}

boot() {
    local overlay=$VM/overlay.qcow2 log=$VM/share/out/console.log
    rm -f "$overlay"
    (qemu qemu-img create -q -f qcow2 -b "$VM/disk.raw" -F raw "$overlay")
    local q=$VM/qemu
    qemu qemu-system-x86_64 -L "$q/usr/share/qemu" -L "$q/usr/share/seabios" \
        -accel tcg,thread=multi -cpu max -machine q35 -smp 1 -m "$MEMORY" \
        -kernel "$VM/vmlinuz" -initrd "$VM/initrd.img" \
        -append 'root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 panic=1' \
        -drive "file=$overlay,format=qcow2,if=virtio,cache=unsafe,discard=unmap" \
        -virtfs "local,path=$VM/share,mount_tag=host0,security_model=none" \
        -nic user,model=virtio-net-pci -display none -monitor none -serial "file:$log" -no-reboot \
        </dev/null >"$VM/qemu.stderr" 2>&1 &
    local pid=$! start=$SECONDS
    echo "$pid" >"$(pid_file)"
    say "booted the VM (QEMU pid $pid; console: $log)"
    while kill -0 "$pid" 2>/dev/null; do
        if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then
            say "the VM ran past ${TIMEOUT}s (PODMAND_VM_TIMEOUT): stopping it"
            stop_vm; break
        fi
        sleep 2
    done
    wait "$pid" 2>/dev/null || true
    rm -f "$(pid_file)" "$overlay"
    say "the VM powered off after $((SECONDS - start))s"
}

stop_vm() {  # the QEMU this script recorded, if it still runs that image
    local pid; pid=$(cat "$(pid_file)" 2>/dev/null || true)
    [ -n "$pid" ] || return 0
    if grep -qF "$VM/overlay.qcow2" "/proc/$pid/cmdline" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        local n; for n in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$pid" 2>/dev/null || true
        say "stopped QEMU pid $pid"
    fi
    rm -f "$(pid_file)"
}

run_vm() {
    ensure_image
    stop_vm
    make_share "$@"
    trap stop_vm EXIT INT TERM
    boot
    trap - EXIT INT TERM
    rm -rf "$OUT"; mkdir -p "$OUT"
    cp -r "$VM/share/out/." "$OUT/"
    local rc; rc=$(cat "$OUT/pytest.rc" 2>/dev/null || echo 3)
    [ -s "$OUT/pytest.log" ] && cat "$OUT/pytest.log"
    [ "$rc" != 3 ] || { say "the guest did not run the suite: its log follows"; tail -n 40 "$OUT/guest.log" "$OUT/console.log" 2>/dev/null >&2 || true; }
    say "results in $OUT (pytest.log, junit.xml, journal.txt, console.log)"
    return "$rc"
}

case "${1:-image}" in
    image) ensure_image ;;
    run) shift; run_vm "$@" ;;
    stop) stop_vm ;;
    *) fail "usage: $0 [image|run ARGS...|stop]" ;;
esac
