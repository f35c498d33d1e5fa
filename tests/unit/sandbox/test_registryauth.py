"""Registry credentials from an operator's auth.json: which entry a reference gets
(most specific first, as containers-auth.json(5)), the X-Registry-Auth value libpod
decodes, a file re-read on every pull, and secrets that never reach a message."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from podmand.config import Settings
from podmand.driver import pulls
from podmand.driver.pending import ProvisionFailed
from podmand.errors import ConfigError
from podmand.libpod import ImageInspect, PodmanError
from podmand.sandbox import registryauth

PASSWORD = "s3cret-Pässword:with:colons"
# What Podman 4.3.1 says when the registry refuses the pull's credentials (or wanted some).
REFUSED = ("initializing source docker://127.0.0.1:5000/team/app:1: reading manifest 1 in "
           "127.0.0.1:5000/team/app: unauthorized: authentication required")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def write_auth(path: Path, auths: dict[str, Any]) -> str:
    path.write_text(json.dumps({"auths": auths}))
    return str(path)


def secrets_in(text: str) -> list[str]:
    return [s for s in (PASSWORD, b64(f"alice:{PASSWORD}")) if s in text]


@pytest.mark.parametrize(("ref", "keys"), [
    ("reg.example:5000/ns/user/img:tag",
     ["reg.example:5000/ns/user/img", "reg.example:5000/ns/user", "reg.example:5000/ns", "reg.example:5000"]),
    ("quay.io/team/app@sha256:" + "a" * 64, ["quay.io/team/app", "quay.io/team", "quay.io"]),
    ("quay.io/team/app:1@sha256:" + "a" * 64, ["quay.io/team/app", "quay.io/team", "quay.io"]),
    ("docker://localhost/app", ["localhost/app", "localhost"]),
    ("index.docker.io/library/alpine:3", ["docker.io/library/alpine", "docker.io/library", "docker.io"]),
    ("alpine:3", []),  # short names: Podman picks the registry, its own auth.json applies
    ("library/alpine", []),
])
def test_lookup_keys_most_specific_first(ref: str, keys: list[str]) -> None:
    assert registryauth.lookup_keys(ref) == keys


@pytest.mark.parametrize(("key", "normal"), [
    ("https://index.docker.io/v1/", "docker.io"),  # Docker's legacy URL form names only its host
    ("http://reg:5000/some/path", "reg:5000"),
    ("registry-1.docker.io/library", "docker.io/library"),
    ("quay.io/team/", "quay.io/team"),
])
def test_keys_are_normalised_like_containers_image(key: str, normal: str) -> None:
    assert registryauth.normalise_key(key) == normal


def test_most_specific_entry_wins(tmp_path: Path) -> None:
    path = write_auth(tmp_path / "auth.json", {
        "quay.io": {"auth": b64("anyone:pw1")},
        "quay.io/team": {"auth": b64("team:pw2")},
        "https://index.docker.io/v1/": {"auth": b64("hub:pw3")},
    })
    team = registryauth.for_image(path, "quay.io/team/app:1")
    other = registryauth.for_image(path, "quay.io/other/app:1")
    hub = registryauth.for_image(path, "docker.io/library/alpine")
    assert team is not None and (team.key, team.username, team.password) == ("quay.io/team", "team", "pw2")
    assert other is not None and other.username == "anyone"
    assert hub is not None and (hub.username, hub.registry) == ("hub", "docker.io")
    assert registryauth.for_image(path, "ghcr.io/x/y:1") is None
    assert registryauth.for_image(path, "alpine") is None
    assert registryauth.for_image("", "quay.io/team/app:1") is None


def test_header_is_what_libpod_decodes(tmp_path: Path) -> None:
    """libpod tries a registry map first and then one Docker AuthConfig, base64url
    (padded) JSON: username and password (a password may hold colons)."""
    path = write_auth(tmp_path / "auth.json", {"reg:5000": {"auth": b64(f"alice:{PASSWORD}")}})
    cred = registryauth.for_image(path, "reg:5000/app:1")
    assert cred is not None
    doc = json.loads(base64.urlsafe_b64decode(cred.header()))
    assert doc == {"username": "alice", "password": PASSWORD, "serveraddress": "reg:5000"}
    assert not secrets_in(repr(cred)) and "alice" in repr(cred)


def test_identity_token_is_sent(tmp_path: Path) -> None:
    path = write_auth(tmp_path / "auth.json", {"reg:5000": {"identitytoken": "tok-123"}})
    cred = registryauth.for_image(path, "reg:5000/app:1")
    assert cred is not None
    assert json.loads(base64.urlsafe_b64decode(cred.header()))["identitytoken"] == "tok-123"
    assert "tok-123" not in repr(cred)


def test_file_is_read_again_on_each_pull(tmp_path: Path) -> None:
    """Operators rotate the password in place: the next pull uses the new one."""
    auth = tmp_path / "auth.json"
    write_auth(auth, {"reg:5000": {"auth": b64("alice:old")}})
    first = registryauth.for_image(str(auth), "reg:5000/app:1")
    write_auth(auth, {"reg:5000": {"auth": b64("alice:new")}})
    second = registryauth.for_image(str(auth), "reg:5000/app:1")
    assert first is not None and second is not None and (first.password, second.password) == ("old", "new")


@pytest.mark.parametrize(("content", "needle"), [
    (f'{{"auths": {{"reg:5000": {{"auth": "{PASSWORD}"}}}}', "is not valid JSON"),
    (json.dumps({"auths": {"reg:5000": {"auth": PASSWORD}}}), "entry 'reg:5000': auth is not base64"),
    (json.dumps({"auths": {"reg:5000": {"auth": b64(PASSWORD.replace(":", ""))}}}), "auth is not base64"),
    (json.dumps({"auths": {"reg:5000": {}}}), "has neither auth nor identitytoken"),
    (json.dumps({"auths": [PASSWORD]}), 'expected {"auths"'),
])
def test_bad_file_messages_name_the_setting_never_the_secret(tmp_path: Path, content: str, needle: str) -> None:
    auth = tmp_path / "auth.json"
    auth.write_text(content)
    with pytest.raises(registryauth.AuthFileError) as exc:
        registryauth.for_image(str(auth), "reg:5000/app:1")
    assert needle in str(exc.value) and "registry_auth_file" in str(exc.value)
    assert PASSWORD not in str(exc.value) and PASSWORD.replace(":", "") not in str(exc.value)


def test_settings_check(tmp_path: Path) -> None:
    good = write_auth(tmp_path / "auth.json", {"reg:5000": {"auth": b64("a:b")}})
    registryauth.check_settings(Settings(registry_auth_file=good))
    registryauth.check_settings(Settings())
    for path, needle in [("auth.json", "must be an absolute path"), (str(tmp_path / "none.json"), "cannot read")]:
        with pytest.raises(ConfigError, match=r"^invalid setting registry_auth_file \(--registry-auth-file / "
                                              r"PODMAND_REGISTRY_AUTH_FILE\): ") as exc:
            registryauth.check_settings(Settings(registry_auth_file=path))
        assert needle in str(exc.value)


def test_auth_failure_is_recognised() -> None:
    assert registryauth.is_auth_failure(REFUSED)
    assert not registryauth.is_auth_failure("reading manifest 1 in reg/app: manifest unknown")


# ---------------------------------------------------------------- through Driver._pull


class FakePodman:
    def __init__(self, error: str = "") -> None:
        self.error = error
        self.auth: list[str] = []

    async def pull_image(self, ref: str, policy: str, auth: str = "") -> Any:
        self.auth.append(auth)
        yield SimpleNamespace(stream=f"Trying to pull {ref}...\n")
        if self.error:
            raise PodmanError(500, self.error)

    async def inspect_image(self, ref: str) -> ImageInspect:
        return ImageInspect(id="sha256:" + "b" * 64)


def pull(podman: FakePodman, auth_file: str, ref: str = "127.0.0.1:5000/team/app:1") -> ImageInspect:
    settings = SimpleNamespace(registry_auth_file=auth_file, pull_inactivity_timeout=600.0)
    puller = pulls.Puller(podman, settings, SimpleNamespace(publish=lambda _e: None))  # type: ignore[arg-type]
    return asyncio.run(puller.pull(ref, "always", "ImagePullFailed", "sb-1"))


def test_pull_sends_the_matching_entry(tmp_path: Path) -> None:
    path = write_auth(tmp_path / "auth.json", {"127.0.0.1:5000/team": {"auth": b64(f"alice:{PASSWORD}")}})
    podman = FakePodman()
    assert pull(podman, path).id.startswith("sha256:")
    pull(podman, path, "127.0.0.1:5000/other/app:1")  # no entry: no header, Podman's own auth.json applies
    assert json.loads(base64.urlsafe_b64decode(podman.auth[0]))["password"] == PASSWORD
    assert podman.auth[1] == ""


@pytest.mark.parametrize("configured", [True, False])
def test_refused_pull_is_a_clear_terminal_reason(tmp_path: Path, configured: bool) -> None:
    path = write_auth(tmp_path / "auth.json", {"127.0.0.1:5000": {"auth": b64(f"alice:{PASSWORD}")}})
    with pytest.raises(ProvisionFailed) as exc:
        pull(FakePodman(error=REFUSED), path if configured else "")
    assert exc.value.reason == "ImagePullFailed"
    message = exc.value.message
    assert message.startswith("authentication to 127.0.0.1:5000 failed pulling '127.0.0.1:5000/team/app:1'")
    assert "registry_auth_file (--registry-auth-file / PODMAND_REGISTRY_AUTH_FILE)" in message
    assert ("entry '127.0.0.1:5000'" in message) is configured
    assert "unauthorized: authentication required" in message
    assert not secrets_in(message) and exc.value.__cause__ is None


def test_unreadable_file_at_pull_time_fails_the_pull(tmp_path: Path) -> None:
    podman = FakePodman()
    with pytest.raises(ProvisionFailed) as exc:
        pull(podman, str(tmp_path / "gone.json"))
    assert exc.value.reason == "ImagePullFailed" and "cannot read registry_auth_file" in exc.value.message
    assert podman.auth == []  # nothing pulled without the credentials the operator named
