"""The ``.pyc`` files a cold start of the pex leaves for later: written once serving.

On the start that unpacks the pex's wheels, ``pexboot.sh`` turns writing bytecode off for
``serve`` (``sys.dont_write_bytecode``, set at run time, so ``sys.flags`` does not say
so): its first imports only compile, and the ``.pyc`` files, one new file each on the
cache's filesystem, are not written before SERVING. Once serving, ``write_deferred``
turns writing back on for later imports and writes those of the modules imported so far
from a thread of its own (a daemon: an exit does not wait; an unwritten file is written
by the next start's import). Python run with ``-B`` or ``PYTHONDONTWRITEBYTECODE``
(``sys.flags.dont_write_bytecode``) is left alone.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import threading


def deferred() -> bool:
    """Whether writing bytecode was turned off at run time, not by Python's own flags."""
    return bool(sys.dont_write_bytecode) and not sys.flags.dont_write_bytecode


def write_deferred() -> threading.Thread | None:
    """Writing on again, and the thread writing the ``.pyc`` files of the source modules
    imported so far that have none; None if writing was not deferred."""
    if not deferred():
        return None
    sys.dont_write_bytecode = False
    sources = []
    for module in list(sys.modules.values()):
        spec = getattr(module, "__spec__", None)
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader) \
                and spec.origin and spec.cached:
            sources.append((spec.origin, spec.cached))
    thread = threading.Thread(target=write, args=(sources,), name="podmand-pycs", daemon=True)
    thread.start()
    return thread


def write(sources: list[tuple[str, str]]) -> None:
    """Each source's ``.pyc`` where it has none, as the import system writes it (timestamp
    based); a file that cannot be written is skipped (the import compiles it again)."""
    import py_compile  # here, not on every start's path

    for source, cached in sources:
        if os.path.exists(cached):
            continue
        try:
            py_compile.compile(source, cfile=cached, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
        except (OSError, py_compile.PyCompileError):
            continue
