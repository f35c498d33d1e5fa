"""podmand's own mounts in a sandbox container: the network-namespace tmpfs, the
supervisor binary, and root-only per-sandbox copies of its secrets (the token or
credential, TLS material, the corporate proxy's credential and CA bundle).

:func:`destinations` lists every destination these may have, whatever the settings:
each is looked up in the sandbox's image before the container is made (mountlinks.py),
since Podman would follow a symbolic link the image has on the way."""

from __future__ import annotations

from typing import Any

from .. import names
from ..config import Settings
from . import proxy, selinux
from .plan import Plan, Provision

TLS_FILES = ("ca.crt", "tls.crt", "tls.key")


def destinations() -> tuple[str, ...]:
    """Every destination :func:`own_mounts` may give a sandbox, under any settings, and the
    split topology's workload's own (``pair.specs``: the channel, the proxy CA's tmpfs)."""
    tls = tuple(f"{names.TLS_DIR}/{f}" for f in TLS_FILES)
    return (names.NETNS_DIR, names.SUPERVISOR_BIN, names.TOKEN_PATH, names.CREDENTIAL_PATH, *tls, proxy.AUTH_PATH,
            proxy.CA_BUNDLE_PATH, names.CHANNEL_DIR, names.SUPERVISOR_CA_DIR)


def own_mounts(plan: Plan, settings: Settings, prov: Provision) -> list[dict[str, Any]]:
    """libpod mounts of everything podmand itself puts into the sandbox."""
    secrets = prov.secrets_dir
    # One file for every sandbox of this supervisor image (a shared SELinux label), or the
    # sandbox's own copy in its directory (supervisor.py: its user namespace maps podmand's uid).
    label = selinux.PRIVATE if prov.supervisor_path.startswith(secrets.rstrip("/") + "/") else selinux.SHARED
    mounts: list[dict[str, Any]] = [
        {"destination": names.NETNS_DIR, "type": "tmpfs", "source": "tmpfs", "options": ["rw", "nosuid", "nodev"]},
        {
            "destination": names.SUPERVISOR_BIN,
            "type": "bind",
            "source": prov.supervisor_path,
            "options": ["bind", "ro", *([label] if prov.selinux else [])],
        },
        # One token source (see sandboxenv.sandbox_env).
        _secret_mount(names.TOKEN_PATH, f"{secrets}/sandbox.jwt", relabel=prov.selinux)
        if plan.has_token
        else _secret_mount(names.CREDENTIAL_PATH, f"{secrets}/driver.credential", relabel=prov.selinux),
    ]
    if settings.tls_enabled:  # per-sandbox copies, so private like the token
        mounts += [
            _secret_mount(f"{names.TLS_DIR}/{f}", f"{secrets}/{f}", relabel=prov.selinux)
            for f in TLS_FILES
        ]
    return mounts + _proxy_mounts(settings, secrets, relabel=prov.selinux)


def _secret_mount(destination: str, source: str, *, relabel: bool) -> dict[str, Any]:
    """A root-only per-sandbox file: Podman's "U" chowns it to the container's root in every
    userns mode; with SELinux, "Z" gives it a label private to this sandbox's container."""
    options = ["bind", "ro", "U", *([selinux.PRIVATE] if relabel else [])]
    return {"destination": destination, "type": "bind", "source": source, "options": options}


def _proxy_mounts(settings: Settings, secrets: str, *, relabel: bool) -> list[dict[str, Any]]:
    """The corporate proxy's credential and CA bundle: per-sandbox copies, root-only like the token."""
    files = [(settings.proxy_auth_file, proxy.AUTH_PATH, proxy.AUTH_FILE),
             (settings.proxy_ca_bundle, proxy.CA_BUNDLE_PATH, proxy.CA_FILE)]
    return [_secret_mount(inside, f"{secrets}/{name}", relabel=relabel) for wanted, inside, name in files if wanted]
