#!/usr/bin/env bash
# tests/setup-python314.sh - a CPython 3.14 for the ship test that runs the pex under it
# (tests/ship/test_python314.py), on a host whose own Pythons are older (Debian 12: 3.11).
#
# Run as root. Prints the tree's path. Safe to run again: a tree whose python3.14 runs is kept,
# so a re-run is a quick no-op; the first run takes about 30 s and 280 MB here.
#
# Why a tree: the only CPython 3.14 builds this project's machines can install come from
# Debian's archive (sid's python3.14), and they need sid's C library, newer than Debian 12's.
# So it is a minimal Debian sid tree (debootstrap minbase, plus python3.14 and ca-certificates),
# and the test runs the pex chrooted into it, as root, with nothing of the host's but the pex.
# Nothing in it runs in the background and nothing is mounted: removing the directory undoes it.
#
# Knobs (environment): PODMAND_PY314_TREE (default /var/lib/podmand-test/py314),
# PODMAND_PY314_MIRROR (Debian mirror, default http://deb.debian.org/debian).
set -euo pipefail

TREE="${PODMAND_PY314_TREE:-/var/lib/podmand-test/py314}"
MIRROR="${PODMAND_PY314_MIRROR:-http://deb.debian.org/debian}"
say() { printf 'setup-python314: %s\n' "$*" >&2; }

[ "$(id -u)" = 0 ] || { say "run as root (debootstrap, chroot)"; exit 1; }
works() { chroot "$TREE" /usr/bin/python3.14 -c 'import lzma, ssl, sys; assert sys.version_info[:2] == (3, 14)' 2>/dev/null; }
if [ -x "$TREE/usr/bin/python3.14" ] && works; then
    echo "$TREE"
    exit 0
fi
command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}
say "debootstrap sid with python3.14 into $TREE (about 30 s)"
rm -rf "$TREE.new"
mkdir -p "$(dirname "$TREE")"
debootstrap --variant=minbase --include=python3.14,ca-certificates sid "$TREE.new" "$MIRROR" \
    >"$TREE.new.log" 2>&1 || { tail -n 20 "$TREE.new.log" >&2; say "debootstrap failed (log: $TREE.new.log)"; exit 1; }
rm -rf "$TREE"
mv -T "$TREE.new" "$TREE"
mv "$TREE.new.log" "$TREE.log"
works || { say "$TREE/usr/bin/python3.14 does not run"; exit 1; }
say "$TREE: $(chroot "$TREE" /usr/bin/python3.14 -V)"
echo "$TREE"
