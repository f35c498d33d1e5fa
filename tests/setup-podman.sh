#!/usr/bin/env bash
# tests/setup-podman.sh - prepare this machine for podmand's integration tests.
#
# Run as root. Safe to run again: each step first looks at what is already
# there and only changes what is missing or wrong, so a re-run is a quick no-op.
#
#   bash tests/setup-podman.sh [all|stop|env]
#     all   (default) packages, host config, rootless user + store, both API
#           services, test images (tests/images/build.sh), smoke check
#     stop  stop the two API services started by this script
#     restart-rootless  stop and start the rootless API service (for tests)
#     env   print export lines for the test suite (eval "$(... env)")
#     host|user|services|check  one step of "all" (tests/setup-podman5.sh runs
#           these inside its Podman 5 tree, whose packages and images it brings itself)
#
# Knobs (environment):
#   PODMAND_TEST_USER     rootless user (default: podmand)
#   PODMAND_TEST_SUBIDS   minimum subordinate uids/gids of that user (default
#                         262144: each --userns=auto container takes its own
#                         slice, 1024 by default, 2048 when asked)
#   PODMAN_ROOTFUL_SOCK   rootful socket (default: /run/podman/podman.sock)
#   PODMAND_TEST_LOGDIR   service logs (default: /var/log/podmand-test)
#
# Why the host needs fixing at all (Podman 4.3.1 on Debian 12 on these VMs;
# see shared/docs/podman-here.md for how each point was found):
#   - PID 1 is not systemd: no logind (so no /run/user/UID), no journald,
#     no systemd cgroup manager, no healthcheck timers.
#   - cgroup v1 hybrid layout: crun refuses to start containers, runc works.
#   - root has no CAP_SYS_RESOURCE: podman's default nofile ulimit of 1048576
#     cannot be set, so container start fails rootful.
#   - /dev/net/tun is 0600 (slirp4netns fails for rootless users).
#   - no storage.conf: rootless podman would silently use the slow vfs driver.
#   - "/" has private propagation; /run and /tmp live on disk, so podman does
#     not notice a reboot by itself.
set -euo pipefail

TEST_USER="${PODMAND_TEST_USER:-podmand}"
MIN_SUBIDS="${PODMAND_TEST_SUBIDS:-262144}"
ROOTFUL_SOCK="${PODMAN_ROOTFUL_SOCK:-/run/podman/podman.sock}"
LOGDIR="${PODMAND_TEST_LOGDIR:-/var/log/podmand-test}"
STATEDIR="${PODMAND_TEST_STATEDIR:-/var/lib/podmand-test}"
DROPIN=/etc/containers/containers.conf.d/50-podmand-test.conf
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Everything we need, by Debian package name. netavark + aardvark-dns are only
# "Recommends" of podman's deps: without them podman falls back to CNI. Naming
# runc satisfies "crun | runc" so crun (useless here) is not pulled in.
# iptables: netavark runs it for every bridge network, rootful and rootless
# (inside the rootless netns); without it "podman run --network <net>" fails
# with "netavark: No such file or directory (os error 2)".
# debootstrap: tests/images/pybase.sh builds the sidecar's Python base with it.
# docker-registry, apache2-utils (htpasswd), openssl: tests/e2e/test_registry.py runs
# a private registry with password auth (its own, on loopback, only for the test).
PACKAGES=(podman runc netavark aardvark-dns uidmap slirp4netns catatonit
          busybox-static curl iptables gcc libc6-dev python3.11 debootstrap zsh
          docker-registry apache2-utils openssl)

SETUP_NAME=setup-podman
# shellcheck source=tests/setup-lib.sh
source "$HERE/setup-lib.sh"  # say, fail, timed

[ "$(id -u)" -eq 0 ] || fail "must run as root"

# ------------------------------------------------------------------ helpers
uid_of()      { id -u "$TEST_USER"; }
home_of()     { getent passwd "$TEST_USER" | cut -d: -f6; }
runtime_dir() { echo "/run/user/$(uid_of)"; }
rootless_sock() { echo "$(runtime_dir)/podman/podman.sock"; }

# Run a shell snippet as the test user with a minimal, login-like environment
# (runuser keeps root's variables otherwise, which confuses podman).
as_user() {
    runuser -u "$TEST_USER" -- env -i \
        HOME="$(home_of)" USER="$TEST_USER" LOGNAME="$TEST_USER" \
        PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
        XDG_RUNTIME_DIR="$(runtime_dir)" \
        /bin/sh -c "cd \"\$HOME\" && $1"
}

api_up() { [ "$(curl -s -m 2 --unix-socket "$1" http://d/_ping 2>/dev/null)" = OK ]; }
wait_api() {  # wait_api SOCK: up to ~20 s
    local n
    for n in $(seq 200); do api_up "$1" && return 0; sleep 0.1; done
    return 1
}

# ------------------------------------------------------------------ packages
ensure_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed \
            || missing+=("$p")
    done
    [ -x /usr/bin/python3.11 ] || missing+=(python3.11)
    if [ ${#missing[@]} -eq 0 ]; then return 0; fi
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    # Packages such as docker-registry would start their own daemon (on :5000, all
    # interfaces) at install: Debian's policy-rc.d protocol forbids that, and the
    # file is ours only when it was not there before.
    local policy=/usr/sbin/policy-rc.d ours=""
    if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 0755 "$policy"; ours=1; fi
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || { [ -z "$ours" ] || rm -f "$policy"; return 1; }
    [ -z "$ours" ] || rm -f "$policy"
    [ -x /usr/bin/python3.11 ] || fail "/usr/bin/python3.11 still missing"
}

# ------------------------------------------------------------------ host config
# /run is not a tmpfs here, so podman's "alive" marker survives a reboot and
# podman would trust stale container state and a dead rootless pause process.
# Remember the boot id; when it changes, drop those markers (and our pidfiles).
forget_previous_boot() {
    local now stamp="$STATEDIR/boot_id"
    now=$(cat /proc/sys/kernel/random/boot_id)
    mkdir -p "$STATEDIR"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" != "$now" ]; then
        say "new boot: removing stale podman alive/pause.pid markers"
        rm -f /run/libpod/alive \
              /run/user/*/libpod/tmp/alive /run/user/*/libpod/tmp/pause.pid \
              /tmp/podman-run-*/libpod/tmp/alive /tmp/podman-run-*/libpod/tmp/pause.pid \
              "$ROOTFUL_SOCK.pid" /run/user/*/podman/podman.sock.pid "$STATEDIR"/*.service
    fi
    [ "$(cat "$stamp" 2>/dev/null)" = "$now" ] || echo "$now" >"$stamp"
}

configure_host() {
    forget_previous_boot

    # One drop-in is read by rootful and rootless podman alike.
    local conf
    conf=$(cat <<'EOF'
# Written by podmand tests/setup-podman.sh - do not edit.
[containers]
# Root lacks CAP_SYS_RESOURCE on these VMs; podman's default nofile=1048576
# makes runc fail ("error setting rlimit type 7: operation not permitted").
default_ulimits = []

[engine]
# crun cannot handle the cgroup v1 "hybrid" layout here; runc can.
runtime = "runc"
# No systemd / journald as PID 1.
cgroup_manager = "cgroupfs"
events_logger = "file"
# Past the default 1 MB Podman empties the file it rotates: a test reading past events (its
# record of what was made) found none when that happened mid-test (CI, 5.4.2, test_tenants).
events_logfile_max_size = "64m"
# Every exec session (podman exec, healthcheck runs) keeps its conmon alive
# this long after the command ends (default 300 s, Docker-compatible). With
# frequent probes that piles up hundreds of idle conmon processes.
exit_command_delay = 5
EOF
)
    mkdir -p "$(dirname "$DROPIN")"
    if [ "$(cat "$DROPIN" 2>/dev/null)" != "$conf" ]; then
        printf '%s\n' "$conf" >"$DROPIN"
        say "wrote $DROPIN"
        stop_all   # running services only read it at start
    fi

    # slirp4netns (rootless networking) opens /dev/net/tun. devtmpfs forgets
    # the mode on reboot, so this runs every time.
    if [ ! -c /dev/net/tun ]; then mkdir -p /dev/net; mknod /dev/net/tun c 10 200; fi
    [ "$(stat -c %a /dev/net/tun)" = 666 ] || chmod 0666 /dev/net/tun

    # Rootful --userns=auto allocates from the "containers" subordinate range.
    local f
    for f in /etc/subuid /etc/subgid; do
        touch "$f"
        grep -q '^containers:' "$f" || echo 'containers:2147483647:2147483648' >>"$f"
    done

    # Without systemd "/" is private; rootless podman warns about it.
    [ "$(findmnt -no PROPAGATION /)" = shared ] || mount --make-rshared /
}

# ------------------------------------------------------------------ rootless user
subids_of() {  # subids_of FILE: total count owned by the test user (name or uid)
    awk -F: -v n="$TEST_USER" -v u="$(uid_of)" '$1 == n || $1 == u { t += $3 } END { print t + 0 }' "$1"
}
first_free_subid() {  # first id after every range below the "containers" one
    awk -F: '$2 < 2147483647 && $2 + $3 > top { top = $2 + $3 } END { print (top < 100000 ? 100000 : top) }' \
        /etc/subuid /etc/subgid
}

ensure_user() {
    if ! id -u "$TEST_USER" >/dev/null 2>&1; then
        # Debian's useradd also hands out 65536 subuids/subgids.
        useradd --create-home --shell /bin/bash "$TEST_USER"
        say "created user $TEST_USER"
    fi
    local uid home rdir grew=0 f have start
    uid=$(uid_of); home=$(home_of); rdir=$(runtime_dir)

    # ~200 containers at the default --userns=auto size need more than 65536.
    start=$(first_free_subid)   # same start in both files
    for f in /etc/subuid /etc/subgid; do
        have=$(subids_of "$f")
        if [ "$have" -lt "$MIN_SUBIDS" ]; then
            echo "$TEST_USER:$start:$((MIN_SUBIDS - have))" >>"$f"
            say "$f: +$TEST_USER:$start:$((MIN_SUBIDS - have))"
            grew=1
        fi
    done

    # No logind: make the runtime dir ourselves. Podman relaxes it to 0711 later
    # (containers in --userns=auto must traverse it), so never chmod it back.
    [ -d "$rdir" ] || install -d -m 0700 -o "$uid" -g "$(id -g "$TEST_USER")" "$rdir"
    [ "$(stat -c %u "$rdir")" = "$uid" ] || chown "$uid:$(id -g "$TEST_USER")" "$rdir"

    if [ "$grew" = 1 ] && [ -d "$home/.local/share/containers/storage" ]; then
        # The existing user namespace (pause process) must be rebuilt.
        stop_rootless
        as_user 'podman system migrate' >/dev/null 2>&1 || true
    fi

    # Kernel overlay works rootless on this kernel; without storage.conf
    # podman 4.3.1 picks vfs (a full copy of the image per container).
    local sc="$home/.config/containers/storage.conf" want
    want=$'# Written by podmand tests/setup-podman.sh\n[storage]\ndriver = "overlay"'
    if [ "$(cat "$sc" 2>/dev/null)" != "$want" ]; then
        runuser -u "$TEST_USER" -- mkdir -p "$(dirname "$sc")"
        printf '%s\n' "$want" >"$sc"
        chown "$TEST_USER:" "$sc"
        say "wrote $sc"
    fi

    # A store created earlier with vfs (or with its run root under /tmp because
    # XDG_RUNTIME_DIR was unset) keeps those settings in its database and
    # ignores storage.conf. The only way out is a reset of that user's store.
    local expect="overlay $rdir/containers" got
    got=$(as_user 'podman info --format "{{.Store.GraphDriverName}} {{.Store.RunRoot}}" 2>/dev/null') \
        || fail "podman info as $TEST_USER: $(as_user 'podman info 2>&1 >/dev/null' | tail -n 3)"
    if [ "$got" != "$expect" ]; then
        say "rootless store is '$got', want '$expect': podman system reset"
        stop_rootless
        as_user 'podman system reset --force' >/dev/null 2>&1 || true
        got=$(as_user 'podman info --format "{{.Store.GraphDriverName}} {{.Store.RunRoot}}" 2>/dev/null') || true
        [ "$got" = "$expect" ] || fail "rootless store still '$got'"
    fi
}

# ------------------------------------------------------------------ services
# Both services run detached with stdin/stdout/stderr on a log file: a caller
# that reads our output through a pipe must see EOF when this script ends.
# Both start from /: a service keeps its start directory, and conmon fails every
# container ("Failed to get working directory") once a caller's temporary
# checkout it was started from is deleted.
start_rootful() {
    api_up "$ROOTFUL_SOCK" && return 0
    mkdir -p "$(dirname "$ROOTFUL_SOCK")" "$LOGDIR"
    rm -f "$ROOTFUL_SOCK"
    cd /
    setsid podman system service --time=0 "unix://$ROOTFUL_SOCK" \
        </dev/null >>"$LOGDIR/rootful.log" 2>&1 &
    local pid=$!
    wait_api "$ROOTFUL_SOCK" || fail "rootful API not up, see $LOGDIR/rootful.log"
    record_service rootful "$pid" 0 "$ROOTFUL_SOCK"
    say "rootful API up on $ROOTFUL_SOCK"
}

start_rootless() {
    local sock; sock=$(rootless_sock)
    api_up "$sock" && return 0
    mkdir -p "$LOGDIR"
    touch "$LOGDIR/rootless.log"; chown "$TEST_USER:" "$LOGDIR/rootless.log"
    # The inner shell records its own pid, then becomes the podman service.
    # From / also because rootless podman re-executes itself and returns to the
    # caller's directory, which the test user may not be allowed to enter.
    cd /
    setsid runuser -u "$TEST_USER" -- env -i \
        HOME="$(home_of)" USER="$TEST_USER" LOGNAME="$TEST_USER" \
        PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 XDG_RUNTIME_DIR="$(runtime_dir)" \
        /bin/sh -c 'mkdir -p "$(dirname "$1")" && rm -f "$1" && echo $$ >"$1.pid" &&
                    exec podman system service --time=0 "unix://$1"' sh "$sock" \
        </dev/null >>"$LOGDIR/rootless.log" 2>&1 &
    wait_api "$sock" || fail "rootless API not up, see $LOGDIR/rootless.log"
    # The pid comes from a file the test user wrote: record it only if it is that
    # user's podman service on our socket (record_service checks).
    record_service rootless "$(cat "$sock.pid" 2>/dev/null)" "$(id -u "$TEST_USER")" "$sock"
    say "rootless API up on $sock"
}

# Services this script started are recorded in $STATEDIR (root's, not a file
# another user or service can write) as "pid start-time": a pid alone gets
# reused, and a pidfile beside a socket may name someone else's Podman. Only a
# process matching both, owned by the expected uid and serving the expected
# socket, is ever stopped: never a service this script did not start.
starttime() { sed -E 's/^.*\) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; }

is_our_service() {  # PID UID SOCKET
    [ -n "$1" ] && [ "$(stat -c %u "/proc/$1" 2>/dev/null)" = "$2" ] &&
        tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "podman system service --time=0 unix://$3"
}

record_service() {  # NAME PID UID SOCKET
    mkdir -p "$STATEDIR"
    if is_our_service "$2" "$3" "$4"; then
        echo "$2 $(starttime "$2") $3 $4" >"$STATEDIR/$1.service"
    else
        say "not recording $1 service: pid '${2}' is not $3's podman service on $4"
    fi
}

stop_service() {  # NAME
    local rec="$STATEDIR/$1.service" pid start uid sock n
    [ -f "$rec" ] || return 0
    read -r pid start uid sock <"$rec" || true
    if is_our_service "$pid" "$uid" "$sock" && [ "$(starttime "$pid")" = "$start" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        for n in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        say "stopped $1 service pid $pid"
    fi
    rm -f "$rec"
}
stop_rootless() { stop_service rootless; }
stop_all()      { stop_service rootful; stop_rootless; }

# ------------------------------------------------------------------ images + check
build_images() { PODMAND_TEST_USER="$TEST_USER" bash "$HERE/images/build.sh" rootful rootless; }

smoke_check() {
    local s bad=0
    for s in "$ROOTFUL_SOCK" "$(rootless_sock)"; do
        if api_up "$s" && podman --url "unix://$s" run --rm --network none \
                localhost/podmand-test/sandbox:1 true >/dev/null; then
            :
        else
            say "smoke check failed on $s"; bad=1
        fi
    done
    return $bad
}

print_env() {
    echo "export PODMAND_TEST_USER=$TEST_USER"
    echo "export PODMAN_ROOTLESS_SOCK=$(rootless_sock)"
    echo "export PODMAN_ROOTFUL_SOCK=$ROOTFUL_SOCK"
}

case "${1:-all}" in
    all)
        timed packages ensure_packages
        timed host     configure_host
        timed user     ensure_user
        timed rootful  start_rootful
        timed rootless start_rootless
        timed images   build_images
        timed check    smoke_check
        ;;
    stop) stop_all ;;
    restart-rootless) stop_rootless; start_rootless ;;  # tests: Podman restarting under podmand
    env)  print_env ;;
    host)     timed host     configure_host ;;
    user)     timed user     ensure_user ;;
    services) timed rootful  start_rootful; timed rootless start_rootless ;;
    check)    timed check    smoke_check ;;
    *)    fail "usage: $0 [all|stop|restart-rootless|env|host|user|services|check]" ;;
esac
