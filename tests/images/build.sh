#!/usr/bin/env bash
# tests/images/build.sh - build podmand's test images without any registry and
# load them into the rootful store and/or the rootless test user's store.
#
#   bash tests/images/build.sh [rootful] [rootless]     (default: both; run as root)
#   bash tests/images/build.sh cache                    (only the cached tars and binary)
#   PODMAND_IMAGES_CACHED=1 bash tests/images/build.sh ...  (load the cached tars as they are,
#                             without rebuilding: tests/setup-podman5.sh's tree, whose
#                             busybox and compiler are not the ones the tars were made with)
#
# Images (the four sandbox images share one rootfs tar; only USER differs):
#   localhost/podmand-test/sandbox:1         busybox-static rootfs, users root/sandbox/nobody,
#                                            USER sandbox (like OpenShell's community base image)
#   localhost/podmand-test/sandbox-nouser:1  the same without USER
#   localhost/podmand-test/sandbox-uid:1     the same with USER 2345:2346 (no passwd entry)
#   localhost/podmand-test/sandbox-root:1    the same with USER root
#   localhost/podmand-test/sandbox-workdir:1 the sandbox rootfs plus /workspace/project (sandbox's, with
#                                            a README), WORKDIR /workspace/project; -workdir-root:1,
#                                            -workdir-sandbox:1 and -workdir-proc:1 the same with
#                                            WORKDIR /, /sandbox and /proc/sys (their own tar, so the
#                                            four sandbox images above stay as they are)
#   localhost/podmand-test/supervisor:1      just /openshell-sandbox, the static test stand-in
#                                            for the OpenShell supervisor, built from
#                                            supervisor/openshell-sandbox.c
# The split topology of OpenShell 0.1.x (rootless store only; docs/development.md):
#   localhost/podmand-test/runtime:1         just /openshell-sandbox, the Python stand-in of the
#                                            0.1.x workload runtime (runtime/openshell-sandbox),
#                                            which a driver bind-mounts into the workload
#   localhost/podmand-test/supervisor2:1     Debian bookworm + python3 + grpcio + cryptography,
#                                            /openshell-supervisor (supervisor2/openshell-supervisor),
#                                            the stand-in of the 0.1.x supervisor, as ENTRYPOINT
#   localhost/podmand-test/workload:1        the same rootfs (one tar for both), USER sandbox
#                                            (1000:1000, home /sandbox): a sandbox image the
#                                            runtime stand-in can run in
#   The Python rootfs starts from tests/images/pybase.sh's debootstrap tar; the wheels
#   (PY_WHEELS, manylinux, CPython 3.11 as in bookworm) come from PyPI once, through the
#   test virtualenv's pip, into $CACHE/wheels-cp311-<arch>.
#
# Rootfs tars are cached in /var/cache/podmand-test and rebuilt only when their
# inputs (this script, the C source, the stand-in scripts, /bin/busybox, the Python
# base tar, the wheels) change. The tars are reproducible (sorted, fixed mtime,
# hash-checked .pyc files), and each image carries a label with the sha256 of its
# tar plus its config, so a store is only touched when that label differs.
set -euo pipefail

TEST_USER="${PODMAND_TEST_USER:-podmand}"
CACHE=/var/cache/podmand-test
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/supervisor/openshell-sandbox.c"
LABEL=io.podmand-test.content
SANDBOX_IMAGE=localhost/podmand-test/sandbox:1
SANDBOX_NOUSER_IMAGE=localhost/podmand-test/sandbox-nouser:1
SANDBOX_UID_IMAGE=localhost/podmand-test/sandbox-uid:1
SANDBOX_ROOT_IMAGE=localhost/podmand-test/sandbox-root:1
SUPERVISOR_IMAGE=localhost/podmand-test/supervisor:1
RUNTIME_IMAGE=localhost/podmand-test/runtime:1
SUPERVISOR2_IMAGE=localhost/podmand-test/supervisor2:1
WORKLOAD_IMAGE=localhost/podmand-test/workload:1
RUNTIME_SRC="$HERE/runtime/openshell-sandbox"
SUPERVISOR2_SRC="$HERE/supervisor2/openshell-supervisor"
PY_WHEELS=(grpcio==1.85.4 cryptography==50.0.2)
PY_SITE=/usr/local/lib/python3.11/dist-packages
VENV="${PODMAND_TEST_VENV:-/var/lib/podmand-test/venv}"
WORKDIR_IMAGE=localhost/podmand-test/sandbox-workdir
PATH_ENV=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

say()  { printf 'images: %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "must run as root"

sha() { cat "$@" | sha256sum | cut -c1-64; }

# reproducible tar of directory $1 into $2 (ownership as on disk, numeric)
pack() {
    tar -C "$1" --sort=name --mtime=@0 --numeric-owner --format=gnu -cf "$2.tmp" .
    chmod 0644 "$2.tmp"
    mv "$2.tmp" "$2"
}

# fresh_or_build NAME KEY FUNC: run FUNC DIR unless $CACHE/NAME.tar was made from KEY
fresh_or_build() {
    local name=$1 key=$2 func=$3 tar="$CACHE/$1.tar" dir
    if [ -s "$tar" ] && [ "$(cat "$tar.key" 2>/dev/null)" = "$key" ]; then return 0; fi
    dir=$(mktemp -d)
    chmod 0755 "$dir"    # the tar's "./" becomes the image's "/": mktemp's 0700 would lock out non-root
    "$func" "$dir"
    pack "$dir" "$tar"
    rm -rf "$dir"
    echo "$key" >"$tar.key"
    say "built $tar"
}

sandbox_rootfs() {
    local d=$1 a
    [ -x /bin/busybox ] || fail "/bin/busybox missing (apt-get install busybox-static)"
    mkdir -p "$d"/{bin,sbin,usr/bin,usr/sbin,etc,root,sandbox,run,proc,sys,dev,var/tmp,tmp}
    cp /bin/busybox "$d/bin/busybox"
    # every applet, at the path busybox itself suggests (bin/ls, usr/bin/env, ...)
    for a in $(/bin/busybox --list-full); do
        [ "$a" = bin/busybox ] || [ -e "$d/$a" ] || ln -s /bin/busybox "$d/$a"
    done
    cat >"$d/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
sandbox:x:1000:1000:sandbox user:/sandbox:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
    cat >"$d/etc/group" <<'EOF'
root:x:0:
sandbox:x:1000:
extra:x:1001:sandbox
nogroup:x:65534:
EOF
    chmod 0700 "$d/root"
    chmod 1777 "$d/tmp" "$d/var/tmp"
    chown 1000:1000 "$d/sandbox"
}

workdir_rootfs() {
    sandbox_rootfs "$1"
    mkdir -p "$1/workspace/project"
    echo "image content" >"$1/workspace/project/README"
    chown -R 1000:1000 "$1/workspace"
}

supervisor_bin() {  # static stand-in, rebuilt when the source changes
    local out="$CACHE/openshell-sandbox" key
    key="$(sha "$SRC") gcc -static -O2"
    if [ -x "$out" ] && [ "$(cat "$out.key" 2>/dev/null)" = "$key" ]; then return 0; fi
    command -v gcc >/dev/null || fail "gcc missing (apt-get install gcc libc6-dev)"
    gcc -static -O2 -Wall -o "$out.tmp" "$SRC"
    mv "$out.tmp" "$out"
    echo "$key" >"$out.key"
    say "compiled $out"
}

supervisor_rootfs() {
    install -m 0755 "$CACHE/openshell-sandbox" "$1/openshell-sandbox"
    install -d -m 1777 "$1/tmp"
}

# ---------------------------------------------------------------- the Python stand-ins
host_python() {  # a CPython with pip: the test virtualenv's (tests/run.sh makes it first), else python3
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
        echo "$VENV/bin/python"
    else
        echo python3
    fi
}

wheels_dir() { echo "$CACHE/wheels-cp311-$(uname -m)"; }

python_wheels() {  # grpcio and cryptography (and their dependencies) for bookworm's CPython 3.11
    local dir key py
    dir=$(wheels_dir)
    key="${PY_WHEELS[*]}"
    if [ -d "$dir" ] && [ "$(cat "$dir.key" 2>/dev/null)" = "$key" ]; then return 0; fi
    py=$(host_python)
    rm -rf "$dir"
    mkdir -p "$dir"
    "$py" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
        --python-version 3.11 --implementation cp --platform "manylinux2014_$(uname -m)" \
        --platform "manylinux_2_28_$(uname -m)" -d "$dir" "${PY_WHEELS[@]}" >"$dir.log" 2>&1 \
        || { grep -v '^WARNING: Location' "$dir.log" >&2; fail "pip download of ${PY_WHEELS[*]} (log: $dir.log)"; }
    echo "$key" >"$dir.key"
    say "downloaded $(ls "$dir" | tr '\n' ' ')"
}

python_rootfs() {  # pybase + the wheels + a sandbox account + the supervisor stand-in
    local d=$1 py
    py=$(host_python)
    tar -C "$d" -xf "$CACHE/pybase.tar"
    chmod 0755 "$d"     # pybase.tar's "./" is mktemp's 0700: non-root could not reach anything
    mkdir -p "$d$PY_SITE"
    "$py" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$(wheels_dir)" \
        --no-compile --target "$d$PY_SITE" "${PY_WHEELS[@]}" >&2
    # bytecode checked by hash, not mtime: the tar stays reproducible and imports stay fast
    "$py" -m compileall -q -j 0 --invalidation-mode unchecked-hash -d "$PY_SITE" "$d$PY_SITE" >/dev/null
    grep -q '^sandbox:' "$d/etc/passwd" || echo 'sandbox:x:1000:1000:sandbox user:/sandbox:/bin/sh' >>"$d/etc/passwd"
    grep -q '^sandbox:' "$d/etc/group" || echo 'sandbox:x:1000:' >>"$d/etc/group"
    grep -q '^extra:' "$d/etc/group" || echo 'extra:x:1001:sandbox' >>"$d/etc/group"
    install -d -m 0755 -o 1000 -g 1000 "$d/sandbox"
    # busybox's applets where Debian's minbase has no such command (httpd, nc, wget, ip ...)
    [ -x /bin/busybox ] || fail "/bin/busybox missing (apt-get install busybox-static)"
    cp /bin/busybox "$d/bin/busybox"
    for a in $(/bin/busybox --list-full); do
        [ -e "$d/$a" ] || [ -L "$d/$a" ] || [ -e "$d/usr/$a" ] || [ -e "$d/bin/${a##*/}" ] \
            || [ -e "$d/usr/bin/${a##*/}" ] || ln -s /bin/busybox "$d/$a"
    done
    # the sandbox-workdir images' project (one tar for every sandbox image; only the config differs)
    mkdir -p "$d/workspace/project"
    echo "image content" >"$d/workspace/project/README"
    chown -R 1000:1000 "$d/workspace"
    install -m 0755 "$SUPERVISOR2_SRC" "$d/openshell-supervisor"
}

runtime_rootfs() {
    install -m 0755 "$RUNTIME_SRC" "$1/openshell-sandbox"
}

# podman import flags for each image (also part of the content label)
SANDBOX_CHANGES=(--change "ENV=PATH=$PATH_ENV" --change 'CMD=["/bin/sh"]')
SUPERVISOR_CHANGES=(--change "ENV=PATH=$PATH_ENV" --change 'CMD=["/openshell-sandbox"]')
RUNTIME_CHANGES=(--change "ENV=PATH=$PATH_ENV" --change 'CMD=["/openshell-sandbox"]')
SUPERVISOR2_CHANGES=(--change "ENV=PATH=$PATH_ENV" --change 'ENTRYPOINT=["/openshell-supervisor"]')
WORKLOAD_CHANGES=(--change "ENV=PATH=$PATH_ENV" --change 'USER=sandbox' --change 'CMD=["/bin/sh"]')

# ---------------------------------------------------------------- stores
user_env() {
    local uid; uid=$(id -u "$TEST_USER")
    echo env -i HOME="$(getent passwd "$TEST_USER" | cut -d: -f6)" USER="$TEST_USER" \
        LOGNAME="$TEST_USER" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
        XDG_RUNTIME_DIR="/run/user/$uid"
}
# podman_in STORE ARGS...: run podman against the rootful or the rootless store
podman_in() {
    local store=$1; shift
    if [ "$store" = rootful ]; then
        podman "$@"
    else
        # shellcheck disable=SC2046
        (cd / && runuser -u "$TEST_USER" -- $(user_env) podman "$@")
    fi
}

# tar_sha TAR: its sha256, remembered beside it for as long as its size and mtime stay
tar_sha() {
    local stamp; stamp=$(stat -c '%s %Y' "$1")
    if [ "$(sed -n 1p "$1.sha256" 2>/dev/null)" != "$stamp" ]; then
        printf '%s\n%s\n' "$stamp" "$(sha "$1")" >"$1.sha256"
    fi
    sed -n 2p "$1.sha256"
}

# load STORE IMAGE TAR CHANGES...: import TAR unless the store has this content
load() {
    local store=$1 image=$2 tar=$3; shift 3
    local want have old
    want=$(printf '%s\n' "$(tar_sha "$tar")" "$@" | sha256sum | cut -c1-64)
    have=$(podman_in "$store" image inspect --format "{{index .Labels \"$LABEL\"}}" "$image" 2>/dev/null || true)
    [ "$have" = "$want" ] && return 0
    old=$(podman_in "$store" image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
    podman_in "$store" import -q "$@" --change "LABEL=$LABEL=$want" "$tar" "$image" >/dev/null
    # drop the replaced image when nothing uses it any more
    [ -z "$old" ] || podman_in "$store" rmi "$old" >/dev/null 2>&1 || true
    say "$store: imported $image"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(rootful rootless)
for t in "${targets[@]}"; do
    case "$t" in rootful|rootless|cache) ;; *) fail "unknown target '$t' (rootful|rootless|cache)";; esac
done

if [ -n "${PODMAND_IMAGES_CACHED:-}" ]; then
    for f in sandbox sandbox-workdir supervisor runtime python-standin; do
        [ -s "$CACHE/$f.tar" ] || fail "$CACHE/$f.tar missing: run 'bash tests/images/build.sh cache' where it is made"
    done
else
    mkdir -p "$CACHE"; chmod 0755 "$CACHE"
    supervisor_bin
    self=$(sha "${BASH_SOURCE[0]}")
    fresh_or_build sandbox    "$self $(sha /bin/busybox)"                    sandbox_rootfs
    fresh_or_build supervisor "$self $(sha "$CACHE/openshell-sandbox")"      supervisor_rootfs
    fresh_or_build sandbox-workdir "$self $(sha /bin/busybox)"               workdir_rootfs
    fresh_or_build runtime    "$self $(sha "$RUNTIME_SRC")"                  runtime_rootfs
    [ -s "$CACHE/pybase.tar" ] || bash "$HERE/pybase.sh" tar
    python_wheels
    fresh_or_build python-standin "$self $(sha "$SUPERVISOR2_SRC") $(stat -c '%s %Y' "$CACHE/pybase.tar") $(ls "$(wheels_dir)" | tr '\n' ' ')" \
        python_rootfs
fi

for t in "${targets[@]}"; do
    [ "$t" != cache ] || continue
    if [ "$t" = rootless ]; then
        id -u "$TEST_USER" >/dev/null 2>&1 || fail "user $TEST_USER missing (run tests/setup-podman.sh)"
    fi
    py="$CACHE/python-standin.tar"
    load "$t" "$SANDBOX_IMAGE"        "$py" "${SANDBOX_CHANGES[@]}" --change 'USER=sandbox'
    load "$t" "$SANDBOX_NOUSER_IMAGE" "$py" "${SANDBOX_CHANGES[@]}"
    load "$t" "$SANDBOX_UID_IMAGE"    "$py" "${SANDBOX_CHANGES[@]}" --change 'USER=2345:2346'
    load "$t" "$SANDBOX_ROOT_IMAGE"   "$py" "${SANDBOX_CHANGES[@]}" --change 'USER=root'
    for w in :/workspace/project -root:/ -sandbox:/sandbox -proc:/proc/sys; do
        load "$t" "$WORKDIR_IMAGE${w%%:*}:1" "$py" "${SANDBOX_CHANGES[@]}" \
            --change 'USER=sandbox' --change "WORKDIR=${w#*:}"
    done
    load "$t" "$RUNTIME_IMAGE"     "$CACHE/runtime.tar" "${RUNTIME_CHANGES[@]}"
    load "$t" "$SUPERVISOR2_IMAGE" "$py" "${SUPERVISOR2_CHANGES[@]}"
    load "$t" "$WORKLOAD_IMAGE"    "$py" "${WORKLOAD_CHANGES[@]}"
    load "$t" "$SUPERVISOR_IMAGE"  "$CACHE/supervisor.tar" "${SUPERVISOR_CHANGES[@]}"
done
