"""Each sandbox feature's own check of the operator settings it reads.

They live beside the code that reads those settings (the proxy's URL rules in
proxy.py, the registry auth file's format in registryauth.py, ...), one layer
above ``config``, so ``config.load`` cannot call them itself: whoever loads the
settings to serve or to diagnose passes :data:`CHECKS` (``__main__``, doctor).
"""

from __future__ import annotations

from ..config import Check
from . import cdi, proxy, registryauth, resources, rootfs, usernamespace

CHECKS: tuple[Check, ...] = (
    registryauth.check_settings,
    proxy.validate,
    resources.check_settings,
    cdi.check_settings,
    rootfs.check_settings,
    usernamespace.check_settings,
)
