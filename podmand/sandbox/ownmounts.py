"""podmand's own files in a sandbox's supervisor container: root-only per-sandbox copies
of the gateway's TLS client material and of the corporate proxy's credential and CA
bundle (``pair.specs`` gives them to the supervisor, chowned to its user).

:func:`destinations` lists every destination podmand's own mounts have in the workload
container, whatever the settings: each is looked up in the sandbox's image before the
container is made (mountlinks.py), since Podman would follow a symbolic link the image
has on the way."""

from __future__ import annotations

from typing import Any

from .. import names
from ..config import Settings
from . import proxy, selinux
from .plan import Provision

TLS_FILES = ("ca.crt", "tls.crt", "tls.key")


def destinations() -> tuple[str, ...]:
    """Every destination of podmand's own mounts in the workload (``pair.specs``): the
    runtime binary, the channel and the proxy CA's tmpfs."""
    return (names.RUNTIME_BIN, names.CHANNEL_DIR, names.SUPERVISOR_CA_DIR)


def own_mounts(settings: Settings, prov: Provision) -> list[dict[str, Any]]:
    """libpod mounts of the per-sandbox files podmand gives the supervisor."""
    secrets = prov.secrets_dir
    mounts: list[dict[str, Any]] = []
    if settings.tls_enabled:  # per-sandbox copies, so private like the proxy's
        mounts += [
            _secret_mount(f"{names.TLS_DIR}/{f}", f"{secrets}/{f}", relabel=prov.selinux)
            for f in TLS_FILES
        ]
    return mounts + _proxy_mounts(settings, secrets, relabel=prov.selinux)


def _secret_mount(destination: str, source: str, *, relabel: bool) -> dict[str, Any]:
    """A root-only per-sandbox file: Podman's "U" chowns it to the container's user in every
    userns mode; with SELinux, "Z" gives it a label private to this sandbox's container."""
    options = ["bind", "ro", "U", *([selinux.PRIVATE] if relabel else [])]
    return {"destination": destination, "type": "bind", "source": source, "options": options}


def _proxy_mounts(settings: Settings, secrets: str, *, relabel: bool) -> list[dict[str, Any]]:
    """The corporate proxy's credential and CA bundle: per-sandbox copies, root-only."""
    files = [(settings.proxy_auth_file, proxy.AUTH_PATH, proxy.AUTH_FILE),
             (settings.proxy_ca_bundle, proxy.CA_BUNDLE_PATH, proxy.CA_FILE)]
    return [_secret_mount(inside, f"{secrets}/{name}", relabel=relabel) for wanted, inside, name in files if wanted]
