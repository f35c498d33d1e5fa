"""Unit tests for podmand.sandbox.proxy: upstream's proxy settings rules and messages, the
operator files' checks, and what the supervisor's container gets (argv, mounts, env)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from podmand import config
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.errors import ConfigError
from podmand.pair import specs
from podmand.sandbox import proxy, spec
from podmand.sandbox.files import SandboxFiles
from podmand.sandbox.identity import Resolved
from podmand.sandbox.plan import Provision
from podmand.sandbox.settings import CHECKS


def load_all(args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None) -> config.Settings:
    return config.load(args, environ, checks=CHECKS)


PROXY = "OPENSHELL_SANDBOX_HTTPS_PROXY"
NO_PROXY = "OPENSHELL_SANDBOX_NO_PROXY"
AUTH = "OPENSHELL_SANDBOX_PROXY_AUTH_FILE"
INSECURE = "OPENSHELL_SANDBOX_PROXY_AUTH_ALLOW_INSECURE"
BY_HOSTNAME = "OPENSHELL_SANDBOX_PROXY_CONNECT_BY_HOSTNAME"
CA = "OPENSHELL_SANDBOX_PROXY_CA_BUNDLE"
SECRET = "alice:s3cr3t-pass"
TLS = Path(__file__).resolve().parents[2] / "data" / "proxytls"
PEM = (TLS / "ca.pem").read_bytes()  # a real X.509 CA certificate (tests/data/proxytls)
FAKE_PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
CLEARTEXT = ("proxy_auth_file sends the credential as cleartext Basic auth over the plain-TCP connection to the "
             "http:// proxy; set proxy_auth_allow_insecure = true to accept that exposure, or remove proxy_auth_file")


@pytest.fixture
def auth_file(tmp_path: Path) -> str:
    path = tmp_path / "proxy-auth"
    path.write_text(f"  {SECRET}\n")
    return str(path)


@pytest.fixture
def ca_file(tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    path.write_bytes(PEM)
    return str(path)


def refusal(env: dict[str, str], args: argparse.Namespace | None = None) -> str:
    with pytest.raises(ConfigError) as exc:
        load_all(args=args, environ=env)
    return str(exc.value)


# ---------------------------------------------------------------- the URL, upstream's words

@pytest.mark.parametrize(("url", "why"), [
    ("proxy.corp:3128", "proxy URL must include an explicit scheme, e.g. http://proxy.corp.com:3128"),
    ("socks5://proxy.corp:1080", "unsupported proxy scheme 'socks5': only http:// and https:// forward proxies "
                                 "are supported by the sandbox supervisor"),
    ("FTP://proxy.corp:21", "unsupported proxy scheme 'ftp'"),
    ("https://proxy.corp", "proxy URL must include an explicit proxy port, e.g. http://proxy.corp.com:3128"),
    ("http://proxy.corp", "proxy URL must include an explicit proxy port, e.g. http://proxy.corp.com:3128"),
    ("http://proxy.corp:", "proxy URL must include an explicit proxy port"),
    ("http://proxy.corp:0", "proxy URL port must not be 0"),
    ("http://proxy.corp:3128/path", "proxy URL must not contain a path; use scheme://host:port only"),
    ("http://proxy.corp:3128?x=1", "proxy URL must not contain a query; use scheme://host:port only"),
    ("http://proxy.corp:3128/#top", "proxy URL must not contain a fragment; use scheme://host:port only"),
    ("http://proxy.corp:65536", "not a valid proxy URL: invalid port number"),
    ("http://:3128", "not a valid proxy URL: empty host"),
    ("http://[zz]:3128", "not a valid proxy URL: invalid IPv6 address"),
    ("http://pro xy:3128", "not a valid proxy URL: invalid domain character"),
    ("1http://proxy:3128", "not a valid proxy URL: relative URL without a base"),
])
def test_bad_proxy_url_is_refused_with_upstreams_message(url: str, why: str) -> None:
    text = refusal({PROXY: url})
    assert text.startswith("invalid setting https_proxy (--sandbox-https-proxy / OPENSHELL_SANDBOX_HTTPS_PROXY): "
                           "https_proxy " + why), text


@pytest.mark.parametrize("url", ["http://proxy.corp:3128", "http://proxy.corp:3128/", " HTTP://10.0.0.1:80 ",
                                 "http://[::1]:3128", "https://proxy.corp:3130", "HTTPS://proxy.corp:443"])
def test_good_proxy_urls(url: str) -> None:
    """A bare trailing slash is accepted, the scheme any case, IPv6 in brackets, the default port if written."""
    assert load_all(args=None, environ={PROXY: url}).https_proxy == url


def test_inline_credentials_are_refused_without_echoing_them() -> None:
    text = refusal({PROXY: "http://bob:hunter2@proxy.corp:3128"})
    assert text.endswith("https_proxy must not embed credentials in the URL; supply them via proxy_auth_file so "
                         "they are not stored in config or container metadata")
    assert "hunter2" not in text


def test_empty_when_set_is_refused(tmp_path: Path) -> None:
    """An empty environment variable means unset (as for every setting); a set but blank value is refused."""
    assert load_all(args=None, environ={PROXY: ""}).https_proxy is None
    assert refusal({PROXY: "   "}).endswith("https_proxy must not be empty when set")
    toml = tmp_path / "p.toml"
    toml.write_text('https_proxy = "http://p:3128"\nno_proxy = " "\n')
    assert refusal({"PODMAND_CONFIG": str(toml)}).endswith("no_proxy must not be empty when set; omit it instead")


# ---------------------------------------------------------------- pairing rules

def test_https_proxy_needs_no_insecure_acknowledgement(auth_file: str) -> None:
    """Upstream PR #2512: to an https:// proxy the credential travels inside TLS."""
    s = load_all(args=None, environ={PROXY: "https://proxy.corp:3130", AUTH: auth_file})
    assert proxy.secure(s.https_proxy or "") and not s.proxy_auth_allow_insecure
    assert proxy.supervisor_args(s) == ["--upstream-proxy=https://proxy.corp:3130",
                                        f"--upstream-proxy-auth-file={proxy.AUTH_PATH}"]
    assert refusal({PROXY: "http://proxy.corp:3128", AUTH: auth_file}).endswith(CLEARTEXT)


@pytest.mark.parametrize(("env", "field", "why"), [
    ({NO_PROXY: "internal.corp"}, "no_proxy", "no_proxy is set but no https_proxy is configured"),
    ({AUTH: "/f", INSECURE: "true"}, "proxy_auth_file", "proxy_auth_file is set but no https_proxy is configured"),
    ({PROXY: "http://p:3128", AUTH: "/f"}, "proxy_auth_file", CLEARTEXT),
    ({PROXY: "http://p:3128", AUTH: "/f", INSECURE: "false"}, "proxy_auth_file", CLEARTEXT),
    ({PROXY: "http://p:3128", INSECURE: "1"}, "proxy_auth_allow_insecure",
     "proxy_auth_allow_insecure is set but no proxy_auth_file is configured"),
    ({BY_HOSTNAME: "yes"}, "proxy_connect_by_hostname",
     "proxy_connect_by_hostname is set but no https_proxy is configured"),
    ({CA: "/ca.pem"}, "proxy_ca_bundle", "proxy_ca_bundle is set but no https_proxy is configured"),
])
def test_settings_that_need_another_are_refused(env: dict[str, str], field: str, why: str) -> None:
    text = refusal(env)
    assert text.startswith(f"invalid setting {field} ("), text
    assert text.endswith(why), text


# ---------------------------------------------------------------- the operator's files, checked at start

@pytest.mark.parametrize(("content", "why"), [
    (b" \n\t", "credential is empty"),
    (b"alice:pa\rss", "credential contains control characters"),
    ("alice:pa\x85ss".encode(), "credential contains control characters"),  # C1 control, UTF-8
    (b"alice", "credential must use the user:pass form (missing ':')"),
    (b":pass", "credential must use the user:pass form (empty user)"),
])
def test_bad_credential_is_refused_without_quoting_it(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "auth"
    path.write_bytes(content)
    text = refusal({PROXY: "http://p:3128", AUTH: str(path), INSECURE: "on"})
    assert text.endswith(f"proxy_auth_file '{path}': {why}")
    assert "pa\rss" not in text and "alice" not in text


def test_auth_file_must_be_a_small_readable_regular_file(tmp_path: Path) -> None:
    env = {PROXY: "http://p:3128", INSECURE: "true"}
    big = tmp_path / "big"
    big.write_bytes(b"a:" + b"b" * 4095)
    assert refusal({**env, AUTH: str(big)}).endswith(f"proxy auth file '{big}' exceeds the 4096-byte limit")
    assert refusal({**env, AUTH: str(tmp_path)}).endswith(f"proxy auth file '{tmp_path}' is not a regular file")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # would block a plain open
    assert refusal({**env, AUTH: str(fifo)}).endswith("is not a regular file")
    missing = tmp_path / "missing"
    assert refusal({**env, AUTH: str(missing)}).endswith(
        f"failed to open proxy auth file '{missing}': No such file or directory (os error 2)")
    latin = tmp_path / "latin"
    latin.write_bytes(b"al\xe9:pass")
    assert refusal({**env, AUTH: str(latin)}).endswith("stream did not contain valid UTF-8")


def test_ca_bundle_must_hold_a_certificate(tmp_path: Path) -> None:
    env = {PROXY: "http://p:3128"}
    empty, text = tmp_path / "empty.pem", tmp_path / "text.pem"
    empty.write_text(" \n")
    text.write_text("not a certificate\n")
    assert refusal({**env, CA: str(empty)}).endswith(f"proxy_ca_bundle '{empty}' is empty")
    assert refusal({**env, CA: str(text)}).endswith(f"proxy_ca_bundle '{text}' contains no PEM certificate blocks")
    assert refusal({**env, CA: str(tmp_path / "nope")}).endswith(
        f"proxy_ca_bundle '{tmp_path / 'nope'}' could not be read: No such file or directory (os error 2)")
    assert refusal({**env, CA: str(tmp_path)}).endswith("is not a regular file")


def test_ca_bundle_must_parse_as_x509(tmp_path: Path) -> None:
    """PEM armour around bytes that are no certificate is refused (upstream PR #2512's words);
    one good certificate among bad blocks is enough, as upstream's rustls store skips the rest."""
    fake, mixed = tmp_path / "fake.pem", tmp_path / "mixed.pem"
    fake.write_bytes(FAKE_PEM + FAKE_PEM.replace(b"MIIB", b"bm90IGEgY2VydGlmaWNhdGU="))
    mixed.write_bytes(FAKE_PEM + PEM)
    assert refusal({PROXY: "https://p:3130", CA: str(fake)}).endswith(
        f"proxy_ca_bundle '{fake}' contains no usable trust anchors (PEM blocks were found but none contain "
        "valid X.509 DER)")
    assert load_all(args=None, environ={PROXY: "https://p:3130", CA: str(mixed)}).proxy_ca_bundle == str(mixed)
    assert proxy.trust_anchors(mixed.read_bytes()) == proxy.trust_anchors(PEM) != []


def test_read_files_trims_the_credential(auth_file: str, ca_file: str) -> None:
    s = Settings(
            https_proxy="http://p:3128", proxy_auth_file=auth_file, proxy_auth_allow_insecure=True,
                 proxy_ca_bundle=ca_file)
    assert proxy.read_files(s) == (SECRET.encode() + b"\n", PEM)
    assert proxy.read_files(Settings()) == (None, None)


def test_files_are_written_root_only(tmp_path: Path) -> None:
    files = SandboxFiles(tmp_path)
    files.write_proxy("sb1", b"a:b\n", PEM)
    for name, data in ((proxy.AUTH_FILE, b"a:b\n"), (proxy.CA_FILE, PEM)):
        path = files.dir("sb1") / name
        assert path.read_bytes() == data
        assert path.stat().st_mode & 0o777 == 0o400


# ---------------------------------------------------------------- the container

SUPERVISOR_FLAGS = ("--backend-descriptor-file=", "--auth-bundle-file=", "--health-socket-path=")


def container(settings: Settings, **env: str) -> dict[str, Any]:
    """The supervisor container's spec: the proxy is the supervisor's."""
    sandbox = pb.DriverSandbox(id="abc123", name="demo", workspace="ws",
                               spec=pb.DriverSandboxSpec(environment=env))
    plan = spec.validate(sandbox, settings, recorded=True)
    prov = Provision(image_id="sha256:feed", image_user="", image_env=("HTTPS_PROXY=http://image:1",),
                          network="n", supervisor_path="/cache/sup", secrets_dir="/state/abc123", instance="i",
                          identity=Resolved(uid=1000, gid=1000, supplementary=(), source="image", digest="sha256:feed"))
    doc = specs.supervisor_spec(plan, settings, prov, supervisor_image_id="sha256:5e1f")
    doc["command"] = [arg for arg in doc["command"] if not arg.startswith(SUPERVISOR_FLAGS)]  # the pair's own
    return doc


def test_supervisor_gets_the_proxy_on_its_command_line_only(auth_file: str, ca_file: str) -> None:
    settings = load_all(args=None, environ={
        PROXY: " http://proxy.corp:3128 ", NO_PROXY: "-x.corp,10.0.0.0/8", AUTH: auth_file, INSECURE: "true",
        BY_HOSTNAME: "true", CA: ca_file})
    doc = container(settings, HTTPS_PROXY="http://evil:1", https_proxy="http://evil:2", NO_PROXY="*")
    assert doc["command"] == [
        "--workdir", "/sandbox",
        "--upstream-proxy=http://proxy.corp:3128",
        "--upstream-no-proxy=-x.corp,10.0.0.0/8",  # one argument: a leading '-' cannot read as a flag
        "--upstream-proxy-auth-file=/etc/openshell/auth/upstream-proxy",
        "--upstream-proxy-auth-allow-insecure",
        "--upstream-proxy-connect-by-hostname",
        "--upstream-proxy-ca-bundle=/etc/openshell/tls/proxy/ca-bundle.pem",
    ]
    mounts = {m["destination"]: m for m in doc["mounts"]}
    for inside, name in ((proxy.AUTH_PATH, proxy.AUTH_FILE), (proxy.CA_BUNDLE_PATH, proxy.CA_FILE)):
        assert mounts[inside]["source"] == f"/state/abc123/{name}"
        assert {"ro", "U"} <= set(mounts[inside]["options"])
    # The caller's proxy variables stay out of the supervisor's environment (it runs its own image).
    assert not {"HTTPS_PROXY", "https_proxy", "NO_PROXY"} & set(doc["env"])
    assert SECRET not in repr(doc) and auth_file not in repr(doc)


def test_no_proxy_no_flags_no_mounts() -> None:
    doc = container(Settings())
    assert doc["command"] == ["--workdir", "/sandbox"]
    assert not [m for m in doc["mounts"] if m["destination"] in (proxy.AUTH_PATH, proxy.CA_BUNDLE_PATH)]
    plain = container(Settings(https_proxy="http://p:3128"))
    assert plain["command"] == ["--workdir", "/sandbox", "--upstream-proxy=http://p:3128"]


def test_allow_insecure_is_a_bare_switch_or_takes_a_value(auth_file: str) -> None:
    """(test_config's generic check cannot hold it: true needs an auth file, and false then refuses one.)"""
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    env = {PROXY: "http://p:3128", AUTH: auth_file}
    bare = parser.parse_args(["--sandbox-proxy-auth-allow-insecure"])
    assert load_all(args=bare, environ={**env, INSECURE: "false"}).proxy_auth_allow_insecure is True
    off = parser.parse_args(["--sandbox-proxy-auth-allow-insecure=false"])
    assert refusal({**env, INSECURE: "true"}, off).endswith(CLEARTEXT)
