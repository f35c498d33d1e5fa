"""WSL2: whether podmand runs in a WSL2 distribution, and what that changes for GPUs.

In WSL2 the GPU is shared with Windows through /dev/dxg (the dxgkrnl paravirtual
device), not as /dev/nvidia<N> devices, and the CDI spec NVIDIA's tools write there
(``nvidia-ctk cdi generate --mode=wsl``) declares the one device ``nvidia.com/gpu=all``.
So on such a host a default GPU request resolves to ``nvidia.com/gpu=all`` (cdi.py's
``all_by_default``), as upstream's Podman driver does (driver.rs:261 at 2f7fb65, which
checks the same file) and its Docker driver when Docker reports WSL2. Elsewhere ``all``
stays a device to ask for by name. The fact is one path's existence, passed in where it
is used so tests can say either.
"""

from __future__ import annotations

import os

DXG = "/dev/dxg"
SPEC_FIX = "nvidia-ctk cdi generate --mode=wsl --output=/etc/cdi/nvidia.yaml"


def wsl2(dxg: str = "") -> bool:
    """Whether this host shares its GPU through WSL2's /dev/dxg (``DXG``, or ``dxg``)."""
    return os.path.exists(dxg or DXG)
