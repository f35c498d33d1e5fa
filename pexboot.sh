#!/bin/sh
# podmand @VERSION@: /bin/sh boot in front of a pex (build_pex.sh puts it there; docs/development.md).
# It runs podmand from $PEX_ROOT/podmand/<pex hash>/cp3XY: this CPython's wheels, unpacked on first
# start (what no import reads left out; OTel's on their first import), pycs for serve once SERVING.
# With a PEX_* knob of pex's own set, or no CPython 3.11-3.13, pex's runtime runs the file.
set -eu
knobs="${PEX_TOOLS:-}${PEX_PYTHON:-}${PEX_PYTHON_PATH:-}${PEX_PATH:-}${PEX_VENV:-}${PEX_INTERPRETER:-}"
knobs="$knobs${PEX_MODULE:-}${PEX_SCRIPT:-}${PEX_INHERIT_PATH:-}${PEX_IGNORE_RCFILES:-}"
for python in python3.11 python3.12 python3.13 python3; do
    command -v "$python" >/dev/null 2>&1 || continue
    if [ -z "$knobs" ]; then
        exec "$python" -I -S -c '
import os, sys
pex, args = sys.argv[1], sys.argv[2:]
tag = "cp%d%d" % sys.version_info[:2]
verbose = os.environ.get("PEX_VERBOSE")
if tag not in ("cp311", "cp312", "cp313"):
    os.execv(sys.executable, [sys.executable, pex, *args])
home = os.path.join(os.environ.get("PEX_ROOT") or os.path.expanduser("~/.cache/pex"), "podmand", "@KEY@", tag)
otel = os.path.join(home, ".otel")
def unpack(dest, lazy):
    import json, shutil, tempfile, zipfile
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(dest) + ".", dir=os.path.dirname(dest))
    os.chmod(tmp, 0o755)
    with zipfile.ZipFile(pex) as z:
        wheels = json.loads(z.read("PEX-INFO"))["distributions"]
        keep = tuple(".deps/%s/" % w for w in wheels if (w[:-4].split("-")[-3] == tag or w[:-4].split("-")[-2]
                     in ("none", "abi3")) and w.startswith(("opentelemetry", "googleapis_common")) == lazy)
        if verbose:
            print("%s: unpacking %d of %d wheels into %s" % (pex, len(keep), len(wheels), dest), file=sys.stderr)
        for entry in z.infolist():
            rel = entry.filename.split("/", 2)[-1]
            if (entry.filename.startswith(keep) and not entry.is_dir() and not rel.startswith(".")
                    and not rel.endswith((".pyi", ".proto", "py.typed"))
                    and ("-info/" not in rel or rel.endswith(("/METADATA", "/entry_points.txt")))):
                d = os.path.join(tmp, rel)
                os.makedirs(os.path.dirname(d), exist_ok=True)
                with z.open(entry) as src, open(d, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
    try:
        os.rename(tmp, dest)
    except OSError:
        shutil.rmtree(tmp)
        if not os.path.isdir(dest):
            raise
class Otel:
    def find_spec(name, path, target=None):
        parts = name.split(".")
        if parts[0] not in ("opentelemetry", "google") or otel in sys.path or os.path.exists(os.path.join(home, *parts[:2])):
            return None
        if not os.path.isdir(otel):
            try:
                unpack(otel, True)
            except Exception as exc:
                raise ImportError("cannot unpack %s (%s)" % (otel, exc)) from None
        sys.path.append(otel)
        import importlib.machinery
        return importlib.machinery.PathFinder.find_spec(name, path)
if not os.path.isdir(home):
    sys.dont_write_bytecode = args[:1] == ["serve"]
    try:
        unpack(home, False)
    except Exception as exc:
        if verbose:
            print("%s: cannot unpack into %s (%s): running pex" % (pex, home, exc), file=sys.stderr)
        os.execv(sys.executable, [sys.executable, pex, *args])
sys.path[:0] = [home] + [p for p in os.environ.get("PEX_EXTRA_SYS_PATH", "").split(":") if p]
sys.meta_path.append(Otel)
for name in [n for n in os.environ if n.startswith("PEX_")]:
    del os.environ[name]
sys.argv = [pex, *args]
from podmand.__main__ import main
sys.exit(main())
' "$0" "$@"
    fi
    if [ -n "${PEX_VERBOSE:-}" ]; then
        echo >&2 "$0 used /bin/sh boot to select python: $(command -v "$python") for pex's runtime..."
    fi
    exec "$python" "$0" "$@"
done
echo >&2 "$0: podmand needs CPython 3.11, 3.12 or 3.13 (python3.11, python3.12 or python3.13) on PATH=$PATH"
exit 1
