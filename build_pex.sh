#!/usr/bin/env bash
# Build podmand as single-file pexes: dist/podmand-<version>-<arch>.pex, dist/SHA256SUMS and
# dist/podmand.pex (a copy of this machine's architecture). ./build_pex.sh --help says how.
#
# Needs nothing but python3 (3.11+), bash, coreutils and network access to a Python package
# index; nothing installed into that Python (pex's pip needs 3.11's distutils, which Debian
# packages as python3-distutils, and on 3.12+ ensurepip). pex itself comes from a pinned,
# hash-checked wheel, unpacked into a pip-less virtualenv of its own in
# ~/.cache/podmand/build-<key> (made once, reused; the system Python is never touched). The
# wheel is fetched with pip, so pip's configuration (index, certificates) applies: the
# interpreter's own pip, else one that ensurepip installs from the wheel bundled with Python
# into a throwaway virtualenv (a stock Debian has no pip), else, with neither, straight from
# PIP_INDEX_URL. pex's own resolves ignore pip's configuration, as pex does by default: the
# wheels inside always come from pex's default index, so every builder gets the same bytes.
#
# Each pex runs on CPython 3.11, 3.12, 3.13 and 3.14 (manylinux2014 wheels for all four are inside;
# the targets are the platforms alone: an interpreter constraint would also pull in this
# machine's interpreter, adding x86_64 wheels to the aarch64 file) and is reproducible: the
# same checkout and pins give the same bytes, whichever Python 3.11 runs the build and
# wherever it lives. It boots through pexboot.sh, put in place of pex's own /bin/sh header:
# it unpacks only the running CPython's wheels from the file's .deps into
# $PEX_ROOT/podmand/<pex hash>/cp3XY once and imports podmand from there (when no other user
# can write there; else from a private copy: docs/security.md), skipping pex's
# runtime (which unpacks all four CPythons' wheels, identifies the interpreter in
# subprocesses and builds a venv: 1.7-4 s cold here, against 0.5-1 s). pex's runtime still
# runs the file when a PEX_* knob of its own is set (PEX_TOOLS=1 and the like).
set -euo pipefail
cd "$(dirname "$0")"

usage() {
    cat <<'EOF'
Usage: ./build_pex.sh [--all]

Builds podmand as one pex file per CPU architecture, each runnable by CPython 3.11,
3.12, 3.13 or 3.14 with no packages on the host:
  $DIST/podmand-<version>-<arch>.pex, $DIST/SHA256SUMS, and $DIST/podmand.pex
  (a copy of this machine's architecture, when it was built).
Needs only python3 (3.11 or newer) and access to a Python package index (pip's
configured one): no pex, nothing installed into that Python (Debian and Ubuntu split
pieces off it: 3.11 needs python3-distutils and a pip, which python3-pip and
python3-venv each bring along; 3.12 and newer need python3.X-venv; with neither pip
nor ensurepip, PIP_INDEX_URL names the index). The first build makes a pinned build
environment in ${XDG_CACHE_HOME:-~/.cache}/podmand/ and reuses it. The same checkout
gives the same bytes whichever Python 3.11 builds it, wherever it lives.

Options:
  --all      build every architecture (same as ARCHES="x86_64 aarch64")
  --help     show this text

Environment:
  PYTHON=python3          interpreter that runs the build (3.11 or newer)
  ARCHES="x86_64 aarch64" architectures to build (default: this machine's, uname -m)
  DIST=dist               output directory
  SOURCE_DATE_EPOCH       timestamps inside the files (default: the last commit's)
  XDG_CACHE_HOME          where the build environment lives (default: ~/.cache)
  PIP_INDEX_URL, PIP_CERT pip's own settings (as is pip.conf), used to fetch pex
EOF
}

ALL_ARCHES="x86_64 aarch64"
for arg in "$@"; do
    case "$arg" in
        --all) ARCHES="$ALL_ARCHES" ;;
        -h|--help) usage; exit 0 ;;
        *) printf 'build_pex: unknown argument %s (see --help)\n' "$arg" >&2; exit 2 ;;
    esac
done

PYTHON="${PYTHON:-python3}"
ARCHES="${ARCHES:-$(uname -m)}"
DIST="${DIST:-dist}"
PYVERS="311 312 313 314"
DEPS=(grpcio==1.85.3 grpcio-health-checking==1.85.1 grpcio-reflection==1.85.1 protobuf==7.36.2 msgspec==0.23.0
      # traces (otlp_endpoint); the SDK pins its own API, protos and conventions exactly: the two it
      # leaves open are pinned here
      opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-grpc==1.45.2
      googleapis-common-protos==1.76.0 typing-extensions==4.16.0
      # the split topology's per-launch TLS (podmand/pair/tls.py): one abi3 wheel serves all four
      # CPythons; cffi (per CPython) and pycparser are its declared dependencies
      cryptography==51.0.1 cffi==2.1.1 pycparser==3.12)
# pex, pinned to one wheel whatever Python builds (its code lands in every pex): the one for
# Python 3.11 and older. On 3.11 pex resolves with the pip it vendors (which needs Python's
# distutils); on 3.12+ it makes a pip with ensurepip. The building Python's minor version
# shows in the file (the zip's __main__.py names python3.X), so published files are built
# with 3.11.
PEX_VERSION=2.105.2
PEX_WHEEL=pex-2.105.2-py2.py35.py36.py37.py38.py39.py310.py311-none-any.whl
PEX_SHA256=5a4d73fbeab30ddf70e360971cb19b9fa80b2a29cfe83e786215fcdd5ef1af9d

START=$SECONDS
step() { printf 'build_pex: [%3ds] %s\n' "$((SECONDS - START))" "$*" >&2; }
die() { printf 'build_pex: %s\n' "$*" >&2; exit 1; }

for arch in $ARCHES; do
    case " $ALL_ARCHES " in *" $arch "*) ;; *) die "architecture '$arch' is not one of: $ALL_ARCHES" ;; esac
done
command -v "$PYTHON" >/dev/null || die "no '$PYTHON' on PATH: install Python 3.11 or newer, or set PYTHON="
PYVER=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "$PYTHON is Python $PYVER; 3.11 or newer is needed"
# What pex needs to run pip, which Debian and Ubuntu package apart from python3.
if [ "$PYVER" = 3.11 ]; then
    "$PYTHON" -c 'import distutils.util' 2>/dev/null \
        || die "$PYTHON has no distutils, which pex's pip needs: as root, apt-get install python3-distutils"
else
    "$PYTHON" -c 'import ensurepip' 2>/dev/null \
        || die "$PYTHON has no ensurepip, which pex needs to make its pip: as root, apt-get install python$PYVER-venv"
fi

# The build environment: a venv without pip holding the pinned pex wheel.
build_env() {
    local cache key dir tmp wheel
    cache="${XDG_CACHE_HOME:-${HOME:?set HOME or XDG_CACHE_HOME}/.cache}/podmand"
    key=$( { echo "$PEX_SHA256"
             "$PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version)'; } \
           | sha256sum | cut -c1-16)
    dir="$cache/build-$key"
    BUILD_PY="$dir/bin/python"
    if build_env_ok; then
        step "build environment: $dir (pex $PEX_VERSION, reused)"
        return
    fi
    step "build environment: making $dir (pex $PEX_VERSION)"
    mkdir -p "$cache"
    tmp=$(mktemp -d "$cache/.build-$key.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    "$PYTHON" -m venv --without-pip "$tmp/venv" || die "$PYTHON -m venv --without-pip failed"
    fetch_pex_wheel "$tmp/wheel"
    wheel="$tmp/wheel/$PEX_WHEEL"
    # Unpacking a pure wheel into site-packages installs it (pex runs as python -m pex).
    "$tmp/venv/bin/python" - "$wheel" "$PEX_SHA256" <<'PY' || die "could not install $wheel"
import hashlib, sys, sysconfig, zipfile
wheel, pin = sys.argv[1], sys.argv[2]
with open(wheel, "rb") as fh:
    digest = hashlib.sha256(fh.read()).hexdigest()
if digest != pin:
    sys.exit(f"{wheel}: sha256 {digest}, pinned {pin}")
with zipfile.ZipFile(wheel) as z:
    z.extractall(sysconfig.get_paths()["purelib"])
PY
    # Only complete environments are moved into place. If one is there already, another build
    # made it meanwhile (either will do) or it is broken (replace it).
    if ! mv -T "$tmp/venv" "$dir" 2>/dev/null && ! build_env_ok; then
        rm -rf "$dir"
        mv -T "$tmp/venv" "$dir" || die "could not move the build environment to $dir"
    fi
    rm -rf "$tmp"
    trap - EXIT
    build_env_ok || die "pex $PEX_VERSION does not import in $dir"
}

build_env_ok() {
    "$BUILD_PY" -c "import sys, pex.version; sys.exit(pex.version.__version__ != '$PEX_VERSION')" 2>/dev/null
}

fetch_pex_wheel() {  # DIR: the pinned wheel, hash-checked
    local req="$1/requirements.txt" pip=("$PYTHON" -m pip)
    mkdir -p "$1"
    echo "pex==$PEX_VERSION --hash=sha256:$PEX_SHA256" >"$req"
    if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
        # No pip in that Python (a stock Debian): ensurepip puts the pip wheel bundled with
        # Python into a throwaway virtualenv (offline), and that pip reads pip's configuration.
        if "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
            "$PYTHON" -m venv "$1/pip" >"$1/pip.log" 2>&1 \
                || { cat "$1/pip.log" >&2; die "$PYTHON -m venv could not make a virtualenv with pip"; }
            pip=("$1/pip/bin/python" -m pip)
        elif [ -n "${PIP_INDEX_URL:-}" ]; then
            fetch_from_index "$1" "$PIP_INDEX_URL"
            return
        else
            die "$PYTHON has no pip to download pex $PEX_VERSION with, nor ensurepip to make one: as root," \
                "apt-get install python3-pip (or python$PYVER-venv), or set PIP_INDEX_URL to your package index"
        fi
    fi
    "${pip[@]}" download --quiet --disable-pip-version-check --no-input --no-deps \
        --only-binary=:all: --python-version 3.11 --require-hashes -r "$req" -d "$1" >"$1/pip.log" 2>&1 \
        || { cat "$1/pip.log" >&2; die "pip could not download pex $PEX_VERSION"; }
}

fetch_from_index() {  # DIR INDEX: without any pip, read the index's page for pex and download the pinned file
    "$PYTHON" - "$1" "$2" "$PEX_WHEEL" "$PEX_SHA256" <<'PY' \
        || die "could not download pex $PEX_VERSION from $2"
import hashlib, html.parser, os, ssl, sys, urllib.parse, urllib.request
dest, index, name, digest = sys.argv[1], sys.argv[2].rstrip("/"), sys.argv[3], sys.argv[4]
tls = ssl.create_default_context(cafile=os.environ.get("PIP_CERT"))  # pip's CA bundle setting, if any


class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        self.hrefs += [v for k, v in attrs if tag == "a" and k == "href" and v]


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=120, context=tls) as resp:
            return resp.read()
    except (OSError, ValueError) as e:
        sys.exit(f"{url}: {e}")


page_url = f"{index}/pex/"
parser = Links()
parser.feed(get(page_url).decode())
found = [h for h in parser.hrefs if urllib.parse.urlsplit(h).path.rsplit("/", 1)[-1] == name]
if not found:
    sys.exit(f"{name} is not listed on {page_url}")
data = get(urllib.parse.urljoin(page_url, found[0]))
if hashlib.sha256(data).hexdigest() != digest:
    sys.exit(f"{name}: sha256 mismatch")
with open(f"{dest}/{name}", "wb") as fh:
    fh.write(data)
PY
}

# Write the pex anew: pexboot.sh in place of pex's own /bin/sh boot header, then pex's zip entries
# in pex's order with their names, times and modes, each native library under .deps (*.so)
# compressed with LZMA instead of deflate (a quarter smaller: what lets four CPythons' grpcio fit
# in 32 MB), on every core. Python's zipfile, which both boots extract .deps with, reads LZMA
# entries; zipimport does not, so what is imported from the zip itself (.bootstrap, __main__.py,
# __pex__) keeps pex's bytes. The zip's offsets count from the start of the file, boot header
# included. pex writes no zip64 records, data descriptors, extra fields nor comments into a file
# this size, and anything else is refused.
finish_pex() {  # PEX VERSION
    "$BUILD_PY" - "$1" "$2" pexboot.sh "$(dirname "$(dirname "$BUILD_PY")")/lzma" <<'PY' || die "could not finish $1"
import hashlib, io, json, lzma, os, struct, sys, tempfile, zipfile
from concurrent.futures import ThreadPoolExecutor
path, version, boot, cache = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
data = open(path, "rb").read()
z = zipfile.ZipFile(io.BytesIO(data))
infos = z.infolist()
key = json.loads(z.read("PEX-INFO"))["pex_hash"]
start = min(i.header_offset for i in infos)
if not data.startswith(b"#!/bin/sh\n") or data[start:start + 4] != b"PK\x03\x04":
    sys.exit(f"{path}: no /bin/sh header of {start} bytes before its zip")
odd = [i.filename for i in infos if i.flag_bits & ~0x800 or i.extra or i.comment or i.file_size >= 1 << 31]
if odd or z.comment or len(infos) >= 0xFFFF:
    sys.exit(f"{path}: its zip has entries this script does not rewrite: {odd[:5]}")


def lzma_entry(info):
    # A zip LZMA entry's data: LZMA SDK version 9.20, the properties' size and the properties, then
    # the raw stream with its end marker (an .lzma file's, less the 8-byte size it starts with).
    # Kept in the build environment's cache by the input's digest (the same bytes and the same
    # liblzma give the same output): a rebuild after a change to podmand compresses nothing.
    raw = z.read(info)
    kept = os.path.join(cache, hashlib.sha256(raw).hexdigest())
    try:
        with open(kept, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        pass
    alone = lzma.compress(raw, format=lzma.FORMAT_ALONE)
    entry = b"\x09\x14\x05\x00" + alone[:5] + alone[13:]
    os.makedirs(cache, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache)
    with os.fdopen(fd, "wb") as fh:
        fh.write(entry)
    os.replace(tmp, kept)
    return entry


native = [i for i in infos if i.filename.startswith(".deps/") and i.filename.endswith(".so")]
with ThreadPoolExecutor(os.cpu_count()) as pool:  # lzma lets go of the GIL while it compresses
    packed = dict(zip((i.filename for i in native), pool.map(lzma_entry, native)))
out = bytearray(open(boot, "rb").read().replace(b"@KEY@", key.encode()).replace(b"@VERSION@", version.encode()))
directory = bytearray()
for i in infos:
    name = i.filename.encode()
    if i.filename in packed:
        payload, method, flags, needs = packed[i.filename], zipfile.ZIP_LZMA, i.flag_bits | 0x02, 63  # 0x02: end marker
    else:
        (names, extra) = struct.unpack_from("<HH", data, i.header_offset + 26)
        at = i.header_offset + 30 + names + extra
        payload, method, flags, needs = data[at:at + i.compress_size], i.compress_type, i.flag_bits, i.extract_version
    y, mo, d, h, mi, s = i.date_time
    dos = ((h << 11) | (mi << 5) | (s // 2), ((y - 1980) << 9) | (mo << 5) | d)
    common = (needs, flags, method, *dos, i.CRC, len(payload), i.file_size, len(name))
    directory += struct.pack("<4sBBHHHHHIIIHHHHHII", b"PK\x01\x02", i.create_version, i.create_system, *common,
                             0, 0, 0, i.internal_attr, i.external_attr, len(out)) + name
    out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", *common, 0) + name + payload
out += directory + struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(infos), len(infos), len(directory),
                               len(out), 0)
with open(path, "wb") as fh:
    fh.write(out)
PY
}

VERSION=$("$PYTHON" -c 'import re,pathlib; print(re.search(r"__version__ = \"(.+)\"", pathlib.Path("podmand/__init__.py").read_text()).group(1))')
# Reproducible: fixed timestamps (the last commit's, else a constant) and hash seed. The
# checkout may belong to another user: reading its log is safe.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH=$(git -c safe.directory="$(pwd -P)" log -1 --format=%ct 2>/dev/null || echo 1767225600)
fi
export SOURCE_DATE_EPOCH
export PYTHONHASHSEED=0

build_env
mkdir -p "$DIST"
built=()
for arch in $ARCHES; do
    platforms=()
    # The version as 3.X.0: a dependency's marker on python_full_version (cryptography's on cffi)
    # cannot be evaluated for an abbreviated platform of two components.
    for v in $PYVERS; do platforms+=(--platform "manylinux2014_${arch}-cp-3.${v#3}.0-cp${v}"); done
    out="$DIST/podmand-${VERSION}-${arch}.pex"
    step "$arch: resolving and packing for CPython ${PYVERS// /, } -> $out"
    # --jobs 1: pip builds "." in place, once per platform; in parallel, setuptools' shared
    # build/ directory races ("File exists: build/bdist.../podmand-...dist-info").
    "$BUILD_PY" -m pex . "${DEPS[@]}" \
        "${platforms[@]}" \
        --jobs 1 \
        --entry-point podmand.__main__:main \
        --venv --sh-boot \
        --no-emit-warnings \
        --output-file "$out"
    finish_pex "$out" "$VERSION"
    built+=("$(basename "$out")")
    size=$(stat -c %s "$out")
    [ "$size" -le $((32 * 1024 * 1024)) ] || die "$out is $size bytes, over 32 MB"
    step "$arch: done, $((size / 1024 / 1024)) MB"
done
(cd "$DIST" && sha256sum "${built[@]}" > SHA256SUMS)
step "checksums: $DIST/SHA256SUMS"
host="$DIST/podmand-${VERSION}-$(uname -m).pex"
if [ -f "$host" ]; then
    cp "$host" "$DIST/podmand.pex"
    # It must start with nothing from the build environment.
    pexroot=$(mktemp -d)
    env -i PATH=/usr/local/bin:/usr/bin:/bin PEX_ROOT="$pexroot" "$DIST/podmand.pex" serve --help >/dev/null
    rm -rf "$pexroot"
    step "$DIST/podmand.pex starts"
fi
cat "$DIST/SHA256SUMS"
