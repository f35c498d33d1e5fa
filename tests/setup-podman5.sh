#!/usr/bin/env bash
# tests/setup-podman5.sh - a newer Podman for the integration tests, from one Debian suite, in
# a directory tree of its own beside the host's Podman (4.3.1 on Debian 12), so the same e2e
# tests run against the Podmans users have today and the ones they will have next:
#
#   PODMAND_SUITE=trixie (the default)  Debian 13's Podman 5.4.2, CPython 3.13
#   PODMAND_SUITE=sid                   Debian sid's Podman 5.8.6, CPython 3.14 and 3.13
#   PODMAND_SUITE=experimental          Podman 6.1.1: sid with the Podman stack from experimental
#
# Each suite has its own tree (/var/lib/podmand-test/<suite>), namespace holder, services,
# store, bridge and id ranges, so the trees and the host run side by side without sharing
# anything but the kernel, the network namespace and the pids.
#
# Run as root. Safe to run again: each step looks first and only does what is missing, so a
# re-run is a quick no-op (the one slow step, debootstrap, runs once per machine and suite).
#
#   bash tests/setup-podman5.sh [all]       tree, namespace, checkout, user, services, images, venv
#   bash tests/setup-podman5.sh run CMD...  run CMD as root inside the tree, in this checkout
#   bash tests/setup-podman5.sh restart-rootless   (the tests: Podman restarting under podmand)
#   bash tests/setup-podman5.sh env         export lines for the suite, as setup-podman.sh env
#   bash tests/setup-podman5.sh stop        stop what this script started, by recorded pid
#
# Knobs (environment): PODMAND_SUITE (above), PODMAND_TREE (default
# /var/lib/podmand-test/<suite>), PODMAND_TEST_USER (podmand), PODMAND_TEST_VENV (the host's
# test virtualenv, whose pip downloads the wheels).
#
# How it works, and why each piece:
#   - debootstrap a Debian tree with podman and what the tests call (runuser, useradd,
#     openssl, htpasswd, docker-registry, git, python3 ...). experimental is not a whole
#     suite: the tree is sid's, and podman, its runtimes and network tools are then installed
#     from experimental (apt-get -t experimental) before the tree is moved into place.
#     sid's Release file may have expired on the mirror (sid moves daily, mirrors lag): the
#     sid and experimental trees tell apt not to check Valid-Until (an apt.conf.d file).
#   - One process, the namespace holder, gets a mount namespace of its own, mounts /proc,
#     /sys and fresh tmpfs /run, /tmp and /dev (with its own device nodes: a test that
#     chmods /dev/net/tun in there must not take it from the host's rootless Podman, nor
#     the other way round) into the tree and pivot_roots into it, then sleeps. Everything else enters that namespace (nsenter -m) and sees only the tree.
#     pivot_root, not chroot: the kernel refuses user namespaces to a chrooted process
#     (unshare(CLONE_NEWUSER) is EPERM), and rootless Podman lives on them. Only the mount
#     namespace is new: same network (loopback services reach both), same pids, same users.
#   - Podman 6 refuses cgroup v1 ("Cgroups v1 not supported"), and this host's layout is v1
#     hybrid. In the experimental tree's namespace, and only there, the holder mounts a
#     cgroup2 filesystem over /sys/fs/cgroup (the host's mounts are untouched: the tree's
#     /sys is a slave of the host's, nothing propagates back). Podman then sees cgroup v2
#     with no controller it can use (they are bound to the host's v1 hierarchies): no
#     memory, cpu or pids limit can apply there, which is what /info says.
#   - The checkout is bind-mounted into the tree at its own path, and so is the image cache
#     (/var/cache/podmand-test): podmand bind-mounts its state directory into sandboxes by
#     path, so pytest, the pex and Podman must all see one filesystem, and the suite runs
#     from the checkout as on the host. A later mount is moved into the running namespace
#     (open_tree + setns + move_mount), so another checkout needs no restart.
#   - Inside, tests/setup-podman.sh's own steps configure the tree as it configures the host
#     (same drop-in: runc, since crun 1.21 refuses this host's hybrid cgroup layout; cgroupfs;
#     the file event logger, as there is no journald; no default ulimits) and start the
#     rootful and rootless API services, recorded by pid. The rootless user has the host's
#     uid; its subordinate ids, and those of users the tests create in the tree, lie in a
#     range neither the host nor another suite's tree uses (the pid namespace is shared: a
#     test that kills a user's processes by uid must never reach another Podman's), and new
#     users get uids from a block of the suite's own. The user is made with no subordinate
#     range (sid's useradd picks one overlapping the host's); setup-podman.sh user then
#     gives it one from the suite's block.
#   - The rootful default network gets its own bridge and subnet per suite: the host's
#     Podman owns podman0 and 10.88.0.0/16 in the same network namespace.
#   - The test images are the host's cached tars (tests/images/build.sh cache), imported.
#   - The suite's virtualenv lives inside the tree, on the Python the pex boots on there:
#     python3 (3.13) on trixie; python3.13 on sid and experimental, whose python3 is 3.14
#     (every test wheel exists for cp314, but the pex has none yet, so it boots on the
#     python3.13 installed beside it, and run.sh lends the virtualenv's coverage to the pex:
#     both must be one Python). Its wheels are
#     downloaded outside by the host's pip, with the host's index and certificate settings
#     (pip download --python-version 3.X ...), and installed inside with --no-index. The
#     tree's own CA store gets the host's local CAs (/usr/local/share/ca-certificates) too:
#     without them nothing in the tree verifies this network's TLS (the README's build from
#     the system Python, which a test runs).
# Podman 5 warns on every call that cgroup v1 is deprecated; commands run through this
# script get PODMAN_IGNORE_CGROUPSV1_WARNING=1 (podmand and the services it starts do not).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
CHECKOUT="$(dirname "$HERE")"
SUITE="${PODMAND_SUITE:-trixie}"
TREE="${PODMAND_TREE:-/var/lib/podmand-test/$SUITE}"
TEST_USER="${PODMAND_TEST_USER:-podmand}"
HOST_VENV="${PODMAND_TEST_VENV:-/var/lib/podmand-test/venv}"
STATE="$TREE.ns"                                                  # on the host: the holder's record
CACHE=/var/cache/podmand-test
TREE_VENV=/var/lib/podmand-test/venv                              # inside the tree
WHEELS=/var/cache/podmand-test-wheels                             # inside the tree
# Per suite: the Debian suite debootstrap makes, the bridge and subnet of the rootful default
# network, the uids of new users and the subordinate ids (blocks no other Podman here uses;
# each tree's placeholder line holds everything below its block), and the cgroup version the
# namespace shows. Adding a suite is one line here.
case "$SUITE" in
    #                   debootstrap bridge   subnet uids        subordinate ids       cgroup
    trixie)       spec="trixie      podman5  10.95  50000:59999 1000000000:2000000000 v1" ;;
    sid)          spec="sid         podman58 10.96  60000:62999 2000000000:2069999999 v1" ;;
    experimental) spec="sid         podman61 10.97  63000:65499 2070000000:2139999999 v2" ;;
    *) printf 'setup-podman5: FAILED: PODMAND_SUITE=%s: trixie, sid or experimental\n' "$SUITE" >&2; exit 2 ;;
esac
read -r BASE_SUITE BRIDGE SUBNET UIDS SUBIDS CGROUP <<<"$spec"
# Where everything run in a cgroup v2 tree lives: that hierarchy is the host's (its "unified"
# one), and a rootful Podman 6 that finds itself in the root cgroup moves every process there,
# the host's included, into a new "init" child. In a cgroup of its own it moves nothing.
V2_CGROUP=""
[ "$CGROUP" = v1 ] || V2_CGROUP="podmand-test-$SUITE"
# The tree's packages. runc: crun refuses this host's cgroup layout (crun comes along as
# podman's first choice and stays unused). passt: rootless networking in Podman 5.
# iptables + nftables: netavark's firewall drivers. The rest are what the tests run:
# runuser/setpriv (util-linux), useradd (passwd), openssl, htpasswd (apache2-utils), git
# (tests/checkout.py), busybox-static, debootstrap (tests/images/pybase.sh's fallback).
PACKAGES=(podman runc crun netavark aardvark-dns passt uidmap conmon catatonit iptables nftables
          fuse-overlayfs python3 python3-venv ca-certificates procps curl iproute2 busybox-static
          git openssl apache2-utils util-linux passwd)
EXTRA_PACKAGES=(docker-registry debootstrap)   # installed after debootstrap, with apt-get
# What experimental brings on top of sid: Podman 6 and the runtimes and network tools it goes with.
EXPERIMENTAL_PACKAGES=(podman runc crun netavark aardvark-dns passt conmon)
# sid's python3 is 3.14; the pex (cp311-cp313 wheels) boots on python3.13 beside it, and the
# suite's virtualenv is made from that python3.13 too: run.sh hands the virtualenv's coverage
# to every pex it starts, and a coverage built for 3.14 has no C tracer for a pex on 3.13
# (it warns on stderr, which the ctl tests read, and measures with the slow Python tracer).
# Once the pex carries cp314 wheels and boots on python3, VENV_PYTHON=python3 again.
VENV_PYTHON=python3
if [ "$BASE_SUITE" != trixie ]; then EXTRA_PACKAGES+=(python3.13 python3.13-venv); VENV_PYTHON=python3.13; fi
ENV_INSIDE=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
            PODMAN_IGNORE_CGROUPSV1_WARNING=1 PODMAND_TEST_USER="$TEST_USER")

SETUP_NAME=setup-podman5 CHROOT_ENV=("${ENV_INSIDE[@]}")
# shellcheck source=tests/setup-lib.sh
source "$HERE/setup-lib.sh"  # say, fail, timed, chroot_in
[ "$(id -u)" -eq 0 ] || fail "must run as root"

# ------------------------------------------------------------------ tree
in_chroot() { chroot_in "$TREE" "$@"; }
tree_has() { in_chroot dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }

ensure_tree() {
    if [ ! -x "$TREE/usr/bin/podman" ]; then
        command -v debootstrap >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
        # Into a new directory, moved into place when complete: a half-made tree is never used.
        rm -rf "$TREE.new"
        mkdir -p "$(dirname "$TREE")"
        say "debootstrap $BASE_SUITE into $TREE (about a minute)"
        local list; list=$(IFS=,; echo "${PACKAGES[*]}")
        debootstrap --variant=minbase --include="$list" "$BASE_SUITE" "$TREE.new" \
            >"$TREE.new.log" 2>&1 || { tail -n 20 "$TREE.new.log" >&2; fail "debootstrap (log: $TREE.new.log)"; }
        apt_settings "$TREE.new"
        [ "$SUITE" != experimental ] || from_experimental "$TREE.new"
        mv -T "$TREE.new" "$TREE"
        rm -f "$TREE.new.log"
    fi
    # Nothing installed into the tree may start a service of its own.
    apt_settings "$TREE"
    local missing=() p
    for p in "${PACKAGES[@]}" "${EXTRA_PACKAGES[@]}"; do tree_has "$p" || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing into the tree: ${missing[*]}"
    # debootstrap can leave one package half-configured; --fix-broken finishes it.
    in_chroot apt-get --fix-broken install -y -qq >/dev/null 2>&1 || true
    in_chroot apt-get update -qq >/dev/null
    in_chroot apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# apt in the tree: no service starts at install (policy-rc.d); sid's Release may have expired
# on the mirror, which apt refuses unless told not to check Valid-Until.
apt_settings() {  # ROOT
    [ -x "$1/usr/sbin/policy-rc.d" ] || { printf '#!/bin/sh\nexit 101\n' >"$1/usr/sbin/policy-rc.d"; chmod 0755 "$1/usr/sbin/policy-rc.d"; }
    [ "$BASE_SUITE" = trixie ] && return 0
    local conf="$1/etc/apt/apt.conf.d/90podmand-test"
    [ -f "$conf" ] || echo 'Acquire::Check-Valid-Until "false";' >"$conf"
}

# experimental holds only what is newer than sid: its Podman stack goes onto the sid tree,
# from debootstrap's own mirror.
from_experimental() {  # ROOT
    local mirror list="$1/etc/apt/sources.list.d/experimental.list"
    mirror=$(awk '$1 == "deb" { print $2; exit }' "$1/etc/apt/sources.list")
    [ -n "$mirror" ] || fail "no mirror in $1/etc/apt/sources.list"
    echo "deb $mirror experimental main" >"$list"
    say "installing ${EXPERIMENTAL_PACKAGES[*]} from experimental"
    chroot_in "$1" apt-get --fix-broken install -y -qq >/dev/null 2>&1 || true
    chroot_in "$1" apt-get update -qq >/dev/null
    chroot_in "$1" apt-get install -y -qq --no-install-recommends -t experimental "${EXPERIMENTAL_PACKAGES[@]}" >/dev/null
    local version; version=$(chroot_in "$1" dpkg-query -W -f='${Version}' podman)
    case "$version" in 6.*) say "podman $version from experimental" ;; *) fail "podman $version after the experimental install, not 6.x" ;; esac
}

# Files the tree needs that no package writes (each rewritten only when it differs).
put() {  # put PATH MODE: stdin into $TREE/PATH
    local want; want=$(cat)
    if [ "$(cat "$TREE$1" 2>/dev/null)" != "$want" ]; then
        mkdir -p "$(dirname "$TREE$1")"
        printf '%s\n' "$want" >"$TREE$1"; chmod "$2" "$TREE$1"
        say "wrote $TREE$1"
    fi
}

configure_tree() {
    # New users (the tests' throwaway users) get uids and subordinate ids the host does not
    # hand out; the host's ranges (from 100000) are held by a placeholder name, so neither
    # useradd nor the tests' free-range search inside the tree gives them out.
    local f key value uid_min=${UIDS%:*} uid_max=${UIDS#*:} sub_min=${SUBIDS%:*} sub_max=${SUBIDS#*:}
    for key in UID_MIN:$uid_min UID_MAX:$uid_max GID_MIN:$uid_min GID_MAX:$uid_max \
               SUB_UID_MIN:$sub_min SUB_UID_MAX:$sub_max SUB_GID_MIN:$sub_min SUB_GID_MAX:$sub_max; do
        value=${key#*:}; key=${key%%:*}
        grep -qE "^$key[[:space:]]+$value\$" "$TREE/etc/login.defs" \
            || sed -i -E "/^$key[[:space:]]/d; \$a $key $value" "$TREE/etc/login.defs"
    done
    # (trixie's line is the host's 100000 up; a later suite's also covers the earlier blocks.)
    for f in /etc/subuid /etc/subgid; do
        touch "$TREE$f"
        grep -q '^reserved-for-host:' "$TREE$f" || echo "reserved-for-host:100000:$((sub_min - 100000))" >>"$TREE$f"
    done
    # The rootful default network, off the host's podman0 and 10.88.0.0/16.
    put /etc/containers/networks/podman.json 0644 <<EOF
{
     "name": "podman",
     "id": "2f259bab93aaaaa2542ba43ef33eb990d0999ee1b9924b557b7be53c0b7a1bb9",
     "driver": "bridge",
     "network_interface": "$BRIDGE",
     "created": "2026-01-01T00:00:00Z",
     "subnets": [{"subnet": "$SUBNET.0.0/16", "gateway": "$SUBNET.0.1"}],
     "ipv6_enabled": false,
     "internal": false,
     "dns_enabled": false,
     "ipam_options": {"driver": "host-local"}
}
EOF
    # No controller is delegated to the cgroup v2 view of the experimental tree, and Podman
    # gives every rootful container a pids limit of its own (containers.conf pids_limit,
    # 2048) that runc then cannot write ("openat2 .../pids.max: no such file or
    # directory"): every rootful `podman run` fails. The tree's Podman is told to set none,
    # as a host with this layout must be; a limit podmand asks for still reaches runc.
    if [ "$CGROUP" = v2 ]; then
        local conf=/etc/containers/containers.conf.d/60-podmand-test-cgroup2.conf before
        before=$(cat "$TREE$conf" 2>/dev/null || true)
        put "$conf" 0644 <<'EOF'
# Written by podmand tests/setup-podman5.sh: cgroup v2 here has no pids controller.
[containers]
pids_limit = 0
EOF
        # The services read it at start only.
        [ "$before" = "$(cat "$TREE$conf")" ] || [ -z "$(holder)" ] || inside bash tests/setup-podman.sh stop
    fi
    put /etc/podmand-test-tree 0644 <<<"podmand test tree: Debian $SUITE, made by tests/setup-podman5.sh"
    # The tree trusts what the host trusts: the host's local CA certificates (a network that
    # inspects TLS has one) go in too, or the README's build from the system Python cannot
    # reach the package index from the tree.
    local crt changed=""
    for crt in /usr/local/share/ca-certificates/*.crt; do
        [ -f "$crt" ] || continue
        cmp -s "$crt" "$TREE$crt" && continue
        mkdir -p "$TREE/usr/local/share/ca-certificates"
        cp "$crt" "$TREE$crt"; chmod 0644 "$TREE$crt"; changed=1
    done
    [ -z "$changed" ] || { in_chroot update-ca-certificates >/dev/null 2>&1; say "the tree trusts the host's local CAs"; }
    # pip (and pex's pip) verify with certifi's bundle unless told otherwise: as on the host,
    # when the host's pip is pointed at the system store.
    if grep -qsE '^[[:space:]]*cert[[:space:]]*=' /etc/pip.conf; then
        put /etc/pip.conf 0644 <<<$'[global]\ncert = /etc/ssl/certs/ca-certificates.crt'
    fi
}

# ------------------------------------------------------------------ namespace holder
# Recorded on the host as "pid start-time boot-id"; it is ours only while all three match,
# its root is the tree and it is the sleep we started: only then is it used or signalled.
starttime() { sed -E 's/^.*\) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; }
boot_id()   { cat /proc/sys/kernel/random/boot_id; }
holder() {  # the live holder's pid, or nothing
    local pid start boot
    [ -f "$STATE.holder" ] && read -r pid start boot <"$STATE.holder" || return 0
    [ -n "$pid" ] && [ "$boot" = "$(boot_id)" ] && [ "$(starttime "$pid")" = "$start" ] || return 0
    [ "$(stat -L -c %d:%i "/proc/$pid/root" 2>/dev/null)" = "$(stat -c %d:%i "$TREE")" ] || return 0
    [ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" = "sleep infinity " ] || return 0
    echo "$pid"
}

start_namespace() {
    [ -n "$(holder)" ] && return 0
    mkdir -p "$(dirname "$STATE")"
    rm -f "$STATE.holder" "$STATE.pid"
    # The holder's own shell writes its pid (the same process then execs sleep) while the
    # host's files are still in view; everything after pivot_root sees only the tree.
    # shellcheck disable=SC2016
    setsid unshare --mount --propagation private sh -c '
        set -e
        echo $$ >"$2"
        mount --bind "$1" "$1"
        cd "$1"
        mount -t proc proc proc
        mount --rbind /sys sys && mount --make-rslave sys
        [ -z "$3" ] || { mount -t cgroup2 cgroup2 sys/fs/cgroup && mkdir -p "sys/fs/cgroup/$3"; }
        mount -t tmpfs -o mode=0755,nosuid tmpfs dev
        mkdir dev/net dev/pts dev/shm dev/mqueue
        for node in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0 net/tun:10:200 fuse:10:229; do
            name=${node%%:*}; nums=${node#*:}
            mknod -m 0666 "dev/$name" c "${nums%:*}" "${nums#*:}"
        done
        mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts dev/pts
        ln -s pts/ptmx dev/ptmx
        mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs dev/shm
        mount -t mqueue mqueue dev/mqueue
        ln -s /proc/self/fd dev/fd
        ln -s /proc/self/fd/0 dev/stdin; ln -s /proc/self/fd/1 dev/stdout; ln -s /proc/self/fd/2 dev/stderr
        mount -t tmpfs -o mode=0755 tmpfs run
        mount -t tmpfs -o mode=1777 tmpfs tmp
        mkdir -p .oldroot
        pivot_root . .oldroot
        umount -l /.oldroot
        rmdir /.oldroot
        mount --make-rshared /
        exec sleep infinity' sh "$TREE" "$STATE.pid" "$V2_CGROUP" </dev/null >"$STATE.log" 2>&1 &
    local n pid
    for n in $(seq 100); do
        pid=$(cat "$STATE.pid" 2>/dev/null || true)
        if [ -n "$pid" ] && [ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" = "sleep infinity " ]; then
            echo "$pid $(starttime "$pid") $(boot_id)" >"$STATE.holder"
            break
        fi
        sleep 0.05
    done
    rm -f "$STATE.pid"
    [ -n "$(holder)" ] || fail "namespace holder did not start: $(cat "$STATE.log" 2>/dev/null)"
    say "namespace holder pid $(holder): $(inside podman --version)"
}

inside() {  # CMD...: as root in the namespace, from the checkout when it is mounted there
    local pid; pid=$(holder)
    [ -n "$pid" ] || fail "the tree's namespace is not up: run 'bash $0' first"
    # shellcheck disable=SC2016
    nsenter -t "$pid" -m -- env -i "${ENV_INSIDE[@]}" ${CI:+CI=$CI} sh -c \
        '[ -z "$2" ] || echo $$ >"/sys/fs/cgroup/$2/cgroup.procs"; cd "$1" 2>/dev/null || cd /; shift 2; exec "$@"' \
        sh "$CHECKOUT" "$V2_CGROUP" "$@"
}

# bind_in PATH: the host's PATH at the same path inside the running namespace. A mount made
# on the host does not reach the namespace (its mounts are private), so the host's tree is
# cloned (open_tree) and moved into it (setns + move_mount): no restart, nothing on the host.
bind_in() {
    local pid; pid=$(holder)
    [ "$(inside stat -c %d:%i "$1" 2>/dev/null)" = "$(stat -c %d:%i "$1")" ] && return 0
    python3 - "$1" "$pid" <<'PY' || fail "could not mount $1 into the tree"
import ctypes, os, sys
path, pid = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # the same on x86_64 and aarch64
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE, MOVE_MOUNT_F_EMPTY_PATH = 1, 0o2000000, 0x8000, 4
AT_FDCWD, CLONE_NEWNS = -100, 0x20000
def check(ret, what):
    if ret < 0:
        err = ctypes.get_errno()
        sys.exit(f"{what}: {os.strerror(err)}")
    return ret
tree = check(libc.syscall(SYS_OPEN_TREE, AT_FDCWD, path.encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE),
             f"open_tree {path}")
ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
check(libc.setns(ns, CLONE_NEWNS), "setns")
os.chdir("/")
os.makedirs(path, exist_ok=True)
check(libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, path.encode(), MOVE_MOUNT_F_EMPTY_PATH), f"move_mount {path}")
PY
    say "mounted $1 into the tree"
}

mount_checkout() {
    # The image tars are made on the host (the tree has other busybox and compiler builds).
    bash "$HERE/images/build.sh" cache
    bind_in "$CACHE"
    bind_checkout
}

bind_checkout() {
    bind_in "$CHECKOUT"
    # A git worktree's repository lives elsewhere: git (tests/checkout.py) needs it too.
    local common
    common=$(git -c safe.directory='*' -C "$CHECKOUT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
    case "$common" in ""|"$CHECKOUT"/*) ;; *) bind_in "$common" ;; esac
}

# ------------------------------------------------------------------ inside: user, services, images
ensure_user_inside() {
    local uid gid
    uid=$(id -u "$TEST_USER"); gid=$(id -g "$TEST_USER")
    if ! inside id -u "$TEST_USER" >/dev/null 2>&1; then
        inside groupadd --gid "$gid" "$TEST_USER"
        # No subordinate range from useradd (sid's would overlap the host's): setup-podman.sh
        # user gives one from this suite's block.
        inside useradd --uid "$uid" --gid "$gid" --create-home --shell /bin/bash \
            -K SUB_UID_COUNT=0 -K SUB_GID_COUNT=0 "$TEST_USER"
        say "created $TEST_USER (uid $uid, as on the host) in the tree"
    fi
    [ "$(inside id -u "$TEST_USER")" = "$uid" ] || fail "$TEST_USER has uid $(inside id -u "$TEST_USER") in the tree, $uid on the host"
    # Rootful userns=auto takes ids from the "containers" line of /etc/subuid (setup-podman.sh
    # host writes it); sid's Podman finds no range for a name with no account ("no subuid
    # ranges found for user \"containers\""), trixie's and the host's need none.
    if [ "$BASE_SUITE" != trixie ] && ! inside id -u containers >/dev/null 2>&1; then
        inside useradd --system --no-create-home --shell /usr/sbin/nologin containers
        say "created the system user containers in the tree (rootful userns=auto)"
    fi
    inside bash tests/setup-podman.sh host
    inside bash tests/setup-podman.sh user
}

images_inside() { inside env PODMAND_IMAGES_CACHED=1 bash tests/images/build.sh rootful rootless; }

# ------------------------------------------------------------------ the suite's virtualenv
requirements() { python3 "$HERE/requirements.py" "$CHECKOUT/pyproject.toml"; }  # build, runtime, test extra

ensure_venv() {
    local py want pip
    py=$(inside "$VENV_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    want="$py $CHECKOUT $(sha256sum "$CHECKOUT/pyproject.toml" | cut -d' ' -f1)"
    [ "$(cat "$TREE$TREE_VENV/.podmand-installed" 2>/dev/null)" = "$want" ] && return 0
    pip=(python3 -m pip)
    [ -x "$HOST_VENV/bin/python" ] && "$HOST_VENV/bin/python" -m pip --version >/dev/null 2>&1 && pip=("$HOST_VENV/bin/python" -m pip)
    local dir="$TREE$WHEELS/cp${py/./}"
    mkdir -p "$dir"
    say "downloading wheels for CPython $py into $dir"
    mapfile -t reqs < <(requirements)
    "${pip[@]}" download --quiet --disable-pip-version-check --only-binary=:all: \
        --python-version "$py" --implementation cp --platform "manylinux2014_$(uname -m)" \
        --platform "manylinux_2_28_$(uname -m)" -d "$dir" "${reqs[@]}" >"$dir.log" 2>&1 \
        || { grep -v '^WARNING: Location' "$dir.log" >&2; fail "pip download (log: $dir.log)"; }
    say "installing '.[test]' into the tree's $TREE_VENV"
    # A virtualenv of another Python (the tree's suite changed it) is made again.
    [ "$(inside "$TREE_VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$py" ] \
        || { rm -rf "${TREE:?}$TREE_VENV"; inside "$VENV_PYTHON" -m venv "$TREE_VENV"; }
    inside "$TREE_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-index \
        --find-links "$WHEELS/cp${py/./}" -e ".[test]" >&2
    echo "$want" >"$TREE$TREE_VENV/.podmand-installed"
}

# ------------------------------------------------------------------ stop
# Every process whose root is the tree was started through this script (the namespace is
# ours alone): the services and what they run, the containers' conmons and the rootless
# user's pause process. The containers are stopped through Podman first.
in_tree_pids() {
    local root p; root=$(stat -c %d:%i "$TREE")
    for p in /proc/[0-9]*; do
        [ "$(stat -L -c %d:%i "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"
    done
    return 0
}

stop_all() {
    local pid p n; pid=$(holder)
    [ -n "$pid" ] || { rm -f "$STATE.holder"; return 0; }
    inside podman stop --all --time 2 >/dev/null 2>&1 || true
    inside runuser -u "$TEST_USER" -- env -i PATH=/usr/bin:/bin HOME="/home/$TEST_USER" \
        XDG_RUNTIME_DIR="/run/user/$(id -u "$TEST_USER")" PODMAN_IGNORE_CGROUPSV1_WARNING=1 \
        sh -c 'cd / && podman stop --all --time 2' >/dev/null 2>&1 || true
    inside bash tests/setup-podman.sh stop || true
    for p in $(in_tree_pids); do [ "$p" = "$pid" ] || kill -TERM "$p" 2>/dev/null || true; done
    for n in $(seq 50); do [ "$(in_tree_pids | grep -cvx "$pid")" = 0 ] && break; sleep 0.1; done
    kill -TERM "$pid"
    # The tree's cgroup (v2 trees), empty now, seen from the host's own v2 mount.
    local v2; v2=$(findmnt -n -t cgroup2 -o TARGET | head -n 1)
    [ -z "$V2_CGROUP" ] || [ -z "$v2" ] || rmdir "$v2/$V2_CGROUP" 2>/dev/null || true
    say "stopped namespace holder pid $pid and what ran in the tree (its mounts went with them)"
    rm -f "$STATE.holder"
}

case "${1:-all}" in
    all)
        timed tree      ensure_tree
        timed config    configure_tree
        timed namespace start_namespace
        timed checkout  mount_checkout
        timed user      ensure_user_inside
        timed services  inside bash tests/setup-podman.sh services
        timed images    images_inside
        timed venv      ensure_venv
        timed check     inside bash tests/setup-podman.sh check
        ;;
    run) shift; [ $# -gt 0 ] || fail "usage: $0 run CMD..."; bind_checkout; inside "$@" ;;
    restart-rootless) inside bash tests/setup-podman.sh restart-rootless ;;
    env) inside bash tests/setup-podman.sh env ;;
    stop) stop_all ;;
    *) fail "usage: $0 [all|run CMD...|restart-rootless|env|stop]" ;;
esac
