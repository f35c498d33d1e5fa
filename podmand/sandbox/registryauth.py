"""Registry credentials for pulls, from an operator's auth.json (Podman's format).

Podman applies its own auth.json (``${XDG_RUNTIME_DIR}/containers/auth.json``, what
``podman login`` writes) to every pull. ``registry_auth_file`` adds a file the
operator manages for podmand: it is read again for each pull (a rotated password
applies to the next pull, no restart), the entry for the image is chosen as
containers-auth.json(5) says (the most specific key first: ``registry/ns/repo``,
``registry/ns``, …, ``registry``), and it travels to Podman for that one pull only,
as libpod's ``X-Registry-Auth`` header. Short names (no registry) get nothing from
this file: Podman picks their registry, and its own auth.json applies.

Secrets stay inside :class:`Credential`: no repr, no error message and no log line
shows them; only :meth:`Credential.header` encodes them, for the request.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings, describe, invalid

SETTING = "registry_auth_file"
HEADER = "X-Registry-Auth"
_DOCKER_HUB = {"docker.io", "index.docker.io", "registry-1.docker.io"}
# What Podman's pull error says when the registry refused the credentials (or wanted some).
_AUTH_FAILED = ("unauthorized", "authentication required", "invalid username/password")


class AuthFileError(Exception):
    """The auth file cannot be used; the message names the setting and the entry, never a secret."""


@dataclass(frozen=True)
class Credential:
    """One auth.json entry: which key matched, and the (hidden) secret."""

    key: str
    registry: str
    username: str = ""
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)

    def header(self) -> str:
        """libpod's single-registry X-Registry-Auth value: base64url of Docker's AuthConfig."""
        doc = {"username": self.username, "password": self.password, "serveraddress": self.registry}
        if self.identity_token:
            doc["identitytoken"] = self.identity_token
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode()


def _normalise_registry(host: str) -> str:
    return "docker.io" if host in _DOCKER_HUB else host


def normalise_key(key: str) -> str:
    """An auth.json key as containers/image compares it: a key written as a URL
    (``https://host/v1/``, Docker's legacy form) names only its host."""
    stripped = key.removeprefix("http://").removeprefix("https://")
    if stripped != key:
        stripped = stripped.split("/", 1)[0]
    host, sep, rest = stripped.partition("/")
    return _normalise_registry(host) + sep + rest.rstrip("/")


def lookup_keys(ref: str) -> list[str]:
    """The keys that may hold ``ref``'s credentials, most specific first; empty for
    a short name (Podman resolves those through its search registries)."""
    name = ref.removeprefix("docker://").split("@", 1)[0]
    head, slash, last = name.rpartition("/")
    if slash and ":" in last:
        name = f"{head}/{last.split(':', 1)[0]}"
    parts = name.split("/")
    first = parts[0]
    if len(parts) < 2 or not ("." in first or ":" in first or first == "localhost"):
        return []
    parts[0] = _normalise_registry(first)
    return ["/".join(parts[:n]) for n in range(len(parts), 0, -1)]


def _entry(key: str, value: Any, path: str) -> Credential:
    where = f"{SETTING} {path}: entry {key!r}"
    if not isinstance(value, dict):
        raise AuthFileError(f"{where} is not an object")
    token = value.get("identitytoken") or ""
    auth = value.get("auth") or ""
    if not isinstance(auth, str) or not isinstance(token, str):
        raise AuthFileError(f"{where}: auth and identitytoken must be strings")
    username = password = ""
    if auth:
        try:
            decoded = base64.b64decode(auth, validate=True).decode()
        except ValueError:  # binascii.Error, non-ASCII text, UnicodeDecodeError
            raise AuthFileError(f"{where}: auth is not base64 of 'user:password'") from None
        username, colon, password = decoded.partition(":")
        if not colon:
            raise AuthFileError(f"{where}: auth is not base64 of 'user:password'")
    elif not token:
        raise AuthFileError(f"{where} has neither auth nor identitytoken")
    normal = normalise_key(key)
    return Credential(key, normal.split("/", 1)[0], username, password, token)


def parse(data: bytes, path: str) -> dict[str, Credential]:
    """Entries of an auth.json by normalised key (other top-level keys, such as
    credHelpers, are not podmand's: Podman's own auth.json handles those)."""
    try:
        doc = json.loads(data)
    except ValueError:  # its message may quote the file: never shown
        raise AuthFileError(f"{SETTING} {path} is not valid JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("auths", {}), dict):
        raise AuthFileError(f'{SETTING} {path}: expected {{"auths": {{"registry": {{"auth": "..."}}}}}}')
    return {normalise_key(k): _entry(k, v, path) for k, v in doc.get("auths", {}).items()}


def load(path: str) -> dict[str, Credential]:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise AuthFileError(f"cannot read {SETTING} {path}: {exc.strerror or exc}") from None
    return parse(data, path)


def choose(entries: dict[str, Credential], ref: str) -> Credential | None:
    """The most specific entry for ``ref``, or None."""
    for key in lookup_keys(ref):
        if key in entries:
            return entries[key]
    return None


def for_image(path: str, ref: str) -> Credential | None:
    """Credentials for pulling ``ref`` from the auth file at ``path`` (read now)."""
    if not path or not lookup_keys(ref):
        return None
    return choose(load(path), ref)


def registry_of(ref: str) -> str:
    keys = lookup_keys(ref)
    return keys[-1] if keys else "the image's registry"


def is_auth_failure(message: str) -> bool:
    lowered = message.lower()
    return any(word in lowered for word in _AUTH_FAILED)


def failure_message(ref: str, cred: Credential | None, path: str, podman_says: str) -> str:
    """Why a pull was refused, naming where credentials came from (never what they are)."""
    setting = describe(SETTING)
    if cred is not None:
        source = f"credentials: entry {cred.key!r} of {setting}, {path}"
    elif path:
        source = f"no entry for it in {setting}, {path}; only the Podman service's own auth.json applied"
    else:
        source = f"{setting} is not set; only the Podman service's own auth.json applied"
    return f"authentication to {registry_of(ref)} failed pulling {ref!r} ({source}): {podman_says}"


def check_settings(s: Settings) -> None:
    """At start: the file, when named, must be readable and well-formed."""
    if not s.registry_auth_file:
        return
    if not os.path.isabs(s.registry_auth_file):
        raise invalid(SETTING, "must be an absolute path")
    try:
        load(s.registry_auth_file)
    except AuthFileError as exc:
        raise invalid(SETTING, str(exc)) from None
