#!/bin/sh
# podmand @VERSION@: /bin/sh boot in front of a pex (build_pex.sh puts it there; docs/development.md).
# It runs podmand from $PEX_ROOT/podmand/<pex hash>/cp3XY: this CPython's wheels, unpacked on first
# start (what no import reads left out; OTel's on their first import), pycs for serve once SERVING.
# It imports only from directories no one else can change: each level from / down to cp3XY (and
# cp3XY/.otel) is a real directory (no symlink) owned by this user or root and writable by no group
# or other (above PEX_ROOT, sticky ones such as /tmp too). Otherwise it says which level and why and
# unpacks into a private temporary directory, removed at exit (docs/security.md).
# With a PEX_* knob of pex's own set, or no CPython 3.11-3.14, pex's runtime runs the file.
# Native libraries in .deps are LZMA entries (build_pex.sh): a CPython without the lzma module
# is told so instead of failing half-way through an unpack.
set -eu
knobs="${PEX_TOOLS:-}${PEX_PYTHON:-}${PEX_PYTHON_PATH:-}${PEX_PATH:-}${PEX_VENV:-}${PEX_INTERPRETER:-}"
knobs="$knobs${PEX_MODULE:-}${PEX_SCRIPT:-}${PEX_INHERIT_PATH:-}${PEX_IGNORE_RCFILES:-}"
for python in python3.11 python3.12 python3.13 python3.14 python3; do
    command -v "$python" >/dev/null 2>&1 || continue
    if [ -z "$knobs" ]; then
        exec "$python" -I -S -c '
import os, sys
pex, args = sys.argv[1], sys.argv[2:]
tag = "cp%d%d" % sys.version_info[:2]
verbose = os.environ.get("PEX_VERBOSE")
if tag not in ("cp311", "cp312", "cp313", "cp314"):
    os.execv(sys.executable, [sys.executable, pex, *args])
uid = os.geteuid()
def flaw(path, above=False):
    # Why path is not a directory to import from ("" if it is one, None if it does not exist).
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return "%s cannot be read (%s)" % (path, exc.strerror)
    kind, mode = st.st_mode & 0o170000, st.st_mode & 0o7777
    if kind != 0o040000:
        return "%s is %s" % (path, "a symlink" if kind == 0o120000 else "not a directory")
    if st.st_uid not in (uid, 0):
        return "%s is owned by uid %d" % (path, st.st_uid)
    if mode & 0o022 and not (above and mode & 0o1000):
        return "%s is writable by group or others (mode %04o)" % (path, mode)
    return ""
def check(levels, make=True):
    # The first flaw of levels, [(path, above)] from /, each made (0755) if missing and make; or "".
    for path, above in levels:
        why = flaw(path, above)
        if why is None and make:
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                pass
            except OSError as exc:
                return "%s cannot be made (%s)" % (path, exc.strerror)
            why = flaw(path, above)
        if why is None or why:
            return why or path + " is missing"
    return ""
def parents(path):
    # path, a real path (symlinks resolved), and each directory above it, as levels from /.
    levels = [(path, True)]
    while levels[0][0] != os.path.dirname(levels[0][0]):
        levels.insert(0, (os.path.dirname(levels[0][0]), True))
    return levels
def unpack(dest, lazy):
    # This CPython wheels (lazy: OTel ones) from the pex into a new directory renamed to dest,
    # made 0755 and files 0644 at most whatever the umask, with each __pycache__ made too.
    import json, shutil, tempfile, zipfile
    if not lazy:
        try:
            import lzma
        except ImportError:
            sys.exit("%s: %s has no lzma module (built without liblzma): the native libraries of podmand "
                     "are LZMA entries" % (pex, sys.executable))
        sys.dont_write_bytecode = args[:1] == ["serve"]
    tmp = tempfile.mkdtemp(prefix=os.path.basename(dest) + ".", dir=os.path.dirname(dest))
    made, code = {tmp}, set()
    def mkdirs(path):
        if path not in made:
            mkdirs(os.path.dirname(path))
            os.mkdir(path, 0o755)
            made.add(path)
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
                mkdirs(os.path.dirname(d))
                if d.endswith(".py"):
                    code.add(os.path.dirname(d))
                with z.open(entry) as src, open(os.open(d, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
    for path in code:
        mkdirs(os.path.join(path, "__pycache__"))
    os.chmod(tmp, 0o755)
    try:
        os.rename(tmp, dest)
    except OSError:
        shutil.rmtree(tmp)
        if not os.path.isdir(dest):
            raise
def place(dest, lazy, levels):
    # dest, unpacked if new, when it and its levels pass check; else a private copy, removed at exit.
    why = check(levels) or flaw(dest)
    if why is None:
        try:
            unpack(dest, lazy)
        except Exception as exc:
            why = "%s cannot be unpacked (%s)" % (dest, exc)
        else:
            why = check([(dest, False)], make=False)
    if not why:
        return dest
    import atexit, shutil, tempfile
    print("%s: %s: unpacking privately for this run instead (each directory from / to PEX_ROOT/podmand/"
          "<hash>/cp3XY must be owned by this user or root and writable by no one else)" % (pex, why), file=sys.stderr)
    tmp = os.path.realpath(tempfile.gettempdir())
    why = check(parents(tmp), make=False)
    if why:
        raise OSError("no safe temporary directory either: " + why)
    dest = os.path.join(tempfile.mkdtemp(prefix="podmand-pex.", dir=tmp), os.path.basename(dest))
    atexit.register(shutil.rmtree, os.path.dirname(dest), True)
    unpack(dest, lazy)
    return dest
class Otel:
    dir = None
    def find_spec(name, path, target=None):
        parts = name.split(".")
        if parts[0] not in ("opentelemetry", "google") or Otel.dir or os.path.exists(os.path.join(home, *parts[:2])):
            return None
        try:
            Otel.dir = place(os.path.join(home, ".otel"), True, [])
        except Exception as exc:
            raise ImportError("cannot unpack OpenTelemetry (%s)" % exc) from None
        sys.path.append(Otel.dir)
        import importlib.machinery
        return importlib.machinery.PathFinder.find_spec(name, path)
root = os.path.abspath(os.environ.get("PEX_ROOT") or os.path.expanduser("~/.cache/pex"))
top = os.path.join(os.path.realpath(os.path.dirname(root)), os.path.basename(root))
levels = parents(os.path.dirname(top)) + [(p, False) for p in (top, os.path.join(top, "podmand"),
                                                                 os.path.join(top, "podmand", "@KEY@"))]
try:
    home = place(os.path.join(top, "podmand", "@KEY@", tag), False, levels)
except Exception as exc:
    print("%s: cannot unpack podmand: %s" % (pex, exc), file=sys.stderr)
    sys.exit(1)
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
echo >&2 "$0: podmand needs CPython 3.11, 3.12, 3.13 or 3.14 (python3.11 ... python3.14) on PATH=$PATH"
exit 1
