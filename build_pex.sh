#!/usr/bin/env bash
# Build podmand as single-file pexes, one per CPU architecture:
#   dist/podmand-<version>-x86_64.pex, dist/podmand-<version>-aarch64.pex, dist/SHA256SUMS
# and dist/podmand.pex (a copy of this machine's architecture).
# Each runs on CPython 3.11, 3.12 and 3.13 (manylinux2014 wheels for all three are inside;
# the targets are the platforms alone: an interpreter constraint would also pull in this
# machine's interpreter, adding x86_64 wheels to the aarch64 file),
# boots through /bin/sh (--venv --sh-boot measured fastest), and is reproducible:
# the same checkout and pinned versions give the same bytes.
#   ARCHES="x86_64"  ./build_pex.sh    # build fewer architectures
#   DIST=/tmp/out    ./build_pex.sh    # write somewhere else than dist/
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
ARCHES="${ARCHES:-x86_64 aarch64}"
DIST="${DIST:-dist}"
PYVERS="311 312 313"
VERSION=$("$PYTHON" -c 'import re,pathlib; print(re.search(r"__version__ = \"(.+)\"", pathlib.Path("podmand/__init__.py").read_text()).group(1))')
# Reproducible: fixed timestamps (the last commit's, else a constant) and hash seed.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 1767225600)}"
export PYTHONHASHSEED=0
mkdir -p "$DIST"
built=()
for arch in $ARCHES; do
  platforms=()
  for v in $PYVERS; do platforms+=(--platform "manylinux2014_${arch}-cp-${v}-cp${v}"); done
  out="$DIST/podmand-${VERSION}-${arch}.pex"
  "$PYTHON" -m pex . \
    grpcio==1.85.3 grpcio-health-checking==1.85.1 grpcio-reflection==1.85.1 protobuf==7.36.2 msgspec==0.23.0 \
    "${platforms[@]}" \
    --entry-point podmand.__main__:main \
    --venv --sh-boot \
    --no-emit-warnings \
    --output-file "$out"
  built+=("$(basename "$out")")
  size=$(stat -c %s "$out")
  [ "$size" -le $((30 * 1024 * 1024)) ] || { echo "$out is $size bytes, over 30 MB" >&2; exit 1; }
done
(cd "$DIST" && sha256sum "${built[@]}" > SHA256SUMS)
host="$DIST/podmand-${VERSION}-$(uname -m).pex"
if [ -f "$host" ]; then
  cp "$host" "$DIST/podmand.pex"
  # It must start with nothing from the build environment.
  env -i PATH=/usr/local/bin:/usr/bin:/bin PEX_ROOT="$(mktemp -d)" "$DIST/podmand.pex" serve --help >/dev/null
fi
cat "$DIST/SHA256SUMS"
