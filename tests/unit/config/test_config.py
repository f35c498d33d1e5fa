"""Unit tests for podmand.config: layered settings and their validation."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import msgspec
import pytest

from podmand import config
from podmand.cli.parser import parser
from podmand.config import Settings, options
from podmand.config import load as load_settings
from podmand.errors import ConfigError
from podmand.sandbox.settings import CHECKS


def load(args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    return load_settings(args, environ, checks=CHECKS)


REPO_ROOT = Path(__file__).resolve().parents[3]


def flags(*argv: str) -> argparse.Namespace:
    """Parse ``podmand serve ARGV`` the way main() does (without the subcommand key)."""
    args = parser().parse_args(["serve", *argv])
    del args.command
    return args


def write_toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "podmand.toml"
    path.write_text(text)
    return str(path)


def test_defaults_with_empty_environment() -> None:
    """Nothing set means the struct defaults, unaffected by the real process environment,
    with the host's default paths worked out once, here."""
    default = msgspec.structs.replace(Settings(), socket=config.default_socket(), state_dir=config.default_state_dir())
    assert load(args=None, environ={}) == default


def test_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    """Each layer overrides the one below it: defaults < TOML < environment < flags."""
    cfg = write_toml(tmp_path, 'stop_timeout = 10\npids_limit = 99\nnetwork_name = "from-file"\nuserns = "nomap"\n')
    s = load(args=None, environ={"PODMAND_CONFIG": cfg})
    assert (s.stop_timeout, s.pids_limit, s.network_name, s.userns) == (10, 99, "from-file", "nomap")
    assert s.gateway_port == 17670  # untouched default

    env = {"PODMAND_CONFIG": cfg, "OPENSHELL_STOP_TIMEOUT": "20", "OPENSHELL_NETWORK_NAME": "from-env"}
    s = load(args=None, environ=env)
    assert (s.stop_timeout, s.pids_limit, s.network_name) == (20, 99, "from-env")

    s = load(args=flags("--stop-timeout", "30"), environ=env)
    assert (s.stop_timeout, s.pids_limit, s.network_name) == (30, 99, "from-env")


def test_config_flag_and_unset_flags(tmp_path: Path) -> None:
    """--config names the file; flags not given on the command line do not mask lower layers."""
    cfg = write_toml(tmp_path, "pids_limit = 7\n")
    s = load(args=flags("--config", cfg), environ={"OPENSHELL_STOP_TIMEOUT": "5"})
    assert (s.pids_limit, s.stop_timeout) == (7, 5)


def test_empty_env_value_is_unset(tmp_path: Path) -> None:
    """An exported-but-empty variable does not clobber the file's value."""
    cfg = write_toml(tmp_path, "stop_timeout = 10\n")
    assert load(args=None, environ={"PODMAND_CONFIG": cfg, "OPENSHELL_STOP_TIMEOUT": ""}).stop_timeout == 10


def test_bad_config_file(tmp_path: Path) -> None:
    """Unreadable or malformed TOML, and unknown keys, are configuration errors."""
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(args=None, environ={"PODMAND_CONFIG": str(tmp_path / "missing.toml")})
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(args=None, environ={"PODMAND_CONFIG": write_toml(tmp_path, "stop_timeout = = 1")})
    with pytest.raises(ConfigError, match="stop_timeouts"):
        load(args=None, environ={"PODMAND_CONFIG": write_toml(tmp_path, "stop_timeouts = 1")})


@pytest.mark.parametrize(
    ("var", "value", "field", "expected"),
    [
        ("OPENSHELL_ENABLE_BIND_MOUNTS", "1", "enable_bind_mounts", True),
        ("OPENSHELL_ENABLE_BIND_MOUNTS", " YES ", "enable_bind_mounts", True),
        ("OPENSHELL_TELEMETRY_ENABLED", "off", "telemetry_enabled", False),
        ("PODMAND_RESOURCE_ADMISSION", "0", "admission_enabled", False),
        ("PODMAND_ALLOW_DRIVER_CONFIG", "true", "allow_driver_config", True),
    ],
)
def test_bool_parsing(var: str, value: str, field: str, expected: bool) -> None:
    """Booleans accept the usual spellings, case-insensitively."""
    assert getattr(load(args=None, environ={var: value}), field) is expected


def test_bool_flag() -> None:
    """Boolean flags take a value and are parsed the same way."""
    assert load(args=flags("--enable-bind-mounts", "on"), environ={}).enable_bind_mounts is True


def test_list_fields_from_env_and_flags() -> None:
    """uidmap/gidmap are comma-separated in env and repeatable as flags."""
    s = load(args=None, environ={"OPENSHELL_PODMAN_USERNS": "private",
                                 "OPENSHELL_PODMAN_UIDMAP": "0:100000:65536, 65536:200000:1,",
                                 "OPENSHELL_PODMAN_GIDMAP": "0:100000:65536"})
    assert s.uidmap == ["0:100000:65536", "65536:200000:1"]
    s = load(args=flags("--userns", "private", "--uidmap", "0:1:2", "--uidmap", "2:3:4", "--gidmap", "0:1:2"),
             environ={})
    assert (s.uidmap, s.gidmap) == (["0:1:2", "2:3:4"], ["0:1:2"])


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"OPENSHELL_STOP_TIMEOUT": "abc"}, ["OPENSHELL_STOP_TIMEOUT"]),
        ({"OPENSHELL_STOP_TIMEOUT": "-1"}, ["OPENSHELL_STOP_TIMEOUT"]),
        ({"OPENSHELL_SANDBOX_IMAGE_PULL_POLICY": "sometimes"}, ["OPENSHELL_SANDBOX_IMAGE_PULL_POLICY"]),
        ({"OPENSHELL_PODMAN_HOST_GATEWAY_IP": "nope"}, ["OPENSHELL_PODMAN_HOST_GATEWAY_IP"]),
        ({"OPENSHELL_GATEWAY_PORT": "70000"}, ["OPENSHELL_GATEWAY_PORT"]),
        ({"OPENSHELL_ENABLE_BIND_MOUNTS": "maybe"}, ["OPENSHELL_ENABLE_BIND_MOUNTS"]),
        ({"OPENSHELL_PODMAN_TLS_CA": "/x/ca.crt"}, ["OPENSHELL_PODMAN_TLS_CERT", "OPENSHELL_PODMAN_TLS_KEY"]),
        ({"OPENSHELL_PODMAN_USERNS": "bogus"}, ["OPENSHELL_PODMAN_USERNS"]),
        ({"OPENSHELL_PODMAN_USERNS": "host:x"}, ["OPENSHELL_PODMAN_USERNS"]),
        ({"OPENSHELL_PODMAN_USERNS": "private"}, ["OPENSHELL_PODMAN_USERNS"]),
        ({"OPENSHELL_PODMAN_UIDMAP": "0:1:1", "OPENSHELL_PODMAN_GIDMAP": "0:1:1"}, ["OPENSHELL_PODMAN_UIDMAP"]),
        ({"OPENSHELL_PODMAN_USERNS": "private", "OPENSHELL_PODMAN_UIDMAP": "0:1",
          "OPENSHELL_PODMAN_GIDMAP": "0:1:1"}, ["OPENSHELL_PODMAN_UIDMAP"]),
        ({"OPENSHELL_PODMAN_USERNS": "private", "OPENSHELL_PODMAN_UIDMAP": "0:1:1",
          "OPENSHELL_PODMAN_GIDMAP": "0:1:0"}, ["OPENSHELL_PODMAN_GIDMAP"]),
        ({"OPENSHELL_COMPUTE_DRIVER_BIND": "0.0.0.0:50061"}, ["OPENSHELL_COMPUTE_DRIVER_BIND"]),
        ({"OPENSHELL_COMPUTE_DRIVER_BIND": "example.com:50061"}, ["OPENSHELL_COMPUTE_DRIVER_BIND"]),
        ({"OPENSHELL_COMPUTE_DRIVER_BIND": "127.0.0.1"}, ["OPENSHELL_COMPUTE_DRIVER_BIND"]),
        ({"OPENSHELL_NETWORK_NAME": "-bad"}, ["OPENSHELL_NETWORK_NAME"]),
        ({"OPENSHELL_SANDBOX_SSH_SOCKET_PATH": "run/ssh.sock"}, ["OPENSHELL_SANDBOX_SSH_SOCKET_PATH"]),
        ({"OPENSHELL_LOG_LEVEL": "loud"}, ["OPENSHELL_LOG_LEVEL"]),
    ],
)
def test_errors_name_the_variable(env: dict[str, str], names: list[str]) -> None:
    """An operator must be able to find the offending setting from the message alone."""
    with pytest.raises(ConfigError) as exc:
        load(args=None, environ=env)
    for name in names:
        assert name in str(exc.value)


def test_complete_tls_needs_existing_files(tmp_path: Path) -> None:
    """All three TLS paths enable TLS only when the files exist."""
    paths = {}
    for var, fname in (("OPENSHELL_PODMAN_TLS_CA", "ca.crt"), ("OPENSHELL_PODMAN_TLS_CERT", "tls.crt"),
                       ("OPENSHELL_PODMAN_TLS_KEY", "tls.key")):
        (tmp_path / fname).write_text("pem")
        paths[var] = str(tmp_path / fname)
    s = load(args=None, environ=paths)
    assert s.tls_enabled and s.endpoint == "https://127.0.0.1:17670"  # the split topology: from the host's network
    paths["OPENSHELL_PODMAN_TLS_KEY"] = str(tmp_path / "nope.key")
    with pytest.raises(ConfigError, match="OPENSHELL_PODMAN_TLS_KEY"):
        load(args=None, environ=paths)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("AUTO:size=10", "auto:size=10"), ("no-map", "nomap"), ("Host", "host"), ("keep-id:uid=1000", "keep-id:uid=1000")],
)
def test_userns_canonicalisation(value: str, expected: str) -> None:
    """userns modes are stored lower-case with Podman's spelling; parameters are kept verbatim."""
    environ = {"OPENSHELL_PODMAN_USERNS": value, "PODMAND_ALLOW_USERNS_OWN_UID": "true"}
    assert load(args=None, environ=environ).userns == expected


@pytest.mark.parametrize("bind", ["127.0.0.1:50061", "localhost:50061", "[::1]:50061"])
def test_loopback_tcp_accepted(bind: str) -> None:
    """Loopback development listeners are allowed."""
    assert load(args=None, environ={"OPENSHELL_COMPUTE_DRIVER_BIND": bind}).listen_tcp == bind


def test_admission_config_json() -> None:
    """The upstream admission JSON sets driver config and admission labels, overriding plain env."""
    text = ('{"allow_driver_config": true, "resource_admission": {"enabled": true, '
            '"required_labels": {"team": "blue", "openshell.ai/workspace": "${workspace}"}}}')
    s = load(args=None, environ={"OPENSHELL_DRIVER_ADMISSION_CONFIG_JSON": text, "PODMAND_ALLOW_DRIVER_CONFIG": "0"})
    assert s.allow_driver_config is True
    assert s.admission_enabled is True
    assert s.admission_labels == {"team": "blue", "openshell.ai/workspace": "${workspace}"}
    disabled = '{"resource_admission": {"enabled": false}}'
    s = load(args=None, environ={"OPENSHELL_DRIVER_ADMISSION_CONFIG_JSON": disabled})
    assert s.admission_enabled is False
    assert s.admission_labels == config.DEFAULT_ADMISSION_LABELS


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "OPENSHELL_DRIVER_ADMISSION_CONFIG_JSON"),
        ('{"privileged": true}', "OPENSHELL_DRIVER_ADMISSION_CONFIG_JSON"),
        ('{"resource_admission": {"enabled": true, "extra": 1}}', "OPENSHELL_DRIVER_ADMISSION_CONFIG_JSON"),
        ('{"resource_admission": {"required_labels": {"openshell.ai/workspace": "${workspace}"}}}', "fixed"),
        ('{"resource_admission": {"required_labels": {"openshell.ai/gateway-id": "x", "a": "b"}}}', "gateway-id"),
        ('{"resource_admission": {"required_labels": {"a": "not ok!"}}}', "not ok!"),
        ('{"allow_driver_config": "maybe"}', "PODMAND_ALLOW_DRIVER_CONFIG"),
    ],
)
def test_admission_config_json_errors(text: str, needle: str) -> None:
    """Malformed or unsafe admission config is refused with a message that locates it."""
    with pytest.raises(ConfigError) as exc:
        load(args=None, environ={"OPENSHELL_DRIVER_ADMISSION_CONFIG_JSON": text})
    assert needle in str(exc.value)


def test_cli_exits_2_naming_bad_variable() -> None:
    """A bad setting stops `podmand serve` before it touches Podman, with exit status 2."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSHELL_", "PODMAND_"))}
    env["OPENSHELL_STOP_TIMEOUT"] = "abc"
    proc = subprocess.run([sys.executable, "-m", "podmand", "serve"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("podmand: invalid setting stop_timeout (--stop-timeout / OPENSHELL_STOP_TIMEOUT): "
                           "expected a whole number of seconds, got 'abc'\n")


def test_upstream_flag_names_are_aliases() -> None:
    """Upstream's --bind-socket and --bind-address work as podmand's --socket and --listen-tcp."""
    s = load(args=flags("--bind-socket", "/run/x.sock", "--bind-address", "127.0.0.1:50061"), environ={})
    assert (s.socket, s.listen_tcp) == ("/run/x.sock", "127.0.0.1:50061")
    s = load(args=flags("--socket", "/run/y.sock", "--listen-tcp", "[::1]:1"), environ={})
    assert (s.socket, s.listen_tcp) == ("/run/y.sock", "[::1]:1")


def test_bare_bool_flag_means_true() -> None:
    """Upstream's --enable-bind-mounts is a bare switch; podmand's bool flags accept that form too."""
    s = load(args=flags("--enable-bind-mounts", "--telemetry-enabled", "false"), environ={})
    assert (s.enable_bind_mounts, s.telemetry_enabled) == (True, False)


def test_admission_config_json_flag_overrides_env() -> None:
    """Upstream's --admission-config-json flag, above its environment variable."""
    env = {options.ADMISSION_JSON_ENV: '{"allow_driver_config": false}'}
    s = load(args=flags("--admission-config-json", '{"allow_driver_config": true}'), environ=env)
    assert s.allow_driver_config is True
    with pytest.raises(ConfigError, match="--admission-config-json"):
        load(args=flags("--admission-config-json", "{nope"), environ={})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("if_not_present", "missing"), ("IfNotPresent", "missing"), ("ifnotpresent", "missing"),
        ("Always", "always"), ("NEVER", "never"), ("Newer", "newer"), (" missing ", "missing"),
    ],
)
def test_pull_policy_spellings(value: str, expected: str) -> None:
    """Upstream's ImagePullPolicy names, in any case, become Podman's."""
    assert load(args=None, environ={"OPENSHELL_SANDBOX_IMAGE_PULL_POLICY": value}).image_pull_policy == expected
    assert load(args=flags("--sandbox-image-pull-policy", value), environ={}).image_pull_policy == expected


def test_pull_policy_from_toml(tmp_path: Path) -> None:
    cfg = write_toml(tmp_path, 'image_pull_policy = "IfNotPresent"\n')
    assert load(args=None, environ={"PODMAND_CONFIG": cfg}).image_pull_policy == "missing"


def test_bad_pull_policy_lists_valid_ones() -> None:
    with pytest.raises(ConfigError) as exc:
        load(args=None, environ={"OPENSHELL_SANDBOX_IMAGE_PULL_POLICY": "sometimes"})
    text = str(exc.value)
    assert "'sometimes'" in text and "always, missing, never, newer" in text and "IfNotPresent" in text


def tls_env(tmp_path: Path) -> dict[str, str]:
    env = {}
    for var, fname in (("OPENSHELL_PODMAN_TLS_CA", "ca.crt"), ("OPENSHELL_PODMAN_TLS_CERT", "tls.crt"),
                       ("OPENSHELL_PODMAN_TLS_KEY", "tls.key")):
        (tmp_path / fname).write_text("pem")
        env[var] = str(tmp_path / fname)
    return env


@pytest.mark.parametrize("endpoint", ["https://gw:17670", "HTTPS://gw:17670"])
def test_https_endpoint_needs_tls(endpoint: str) -> None:
    """The stock supervisor dies with 'OPENSHELL_TLS_CA is required' otherwise: refuse to start."""
    with pytest.raises(ConfigError) as exc:
        load(args=None, environ={"OPENSHELL_GRPC_ENDPOINT": endpoint})
    for name in ("OPENSHELL_GRPC_ENDPOINT", "tls_ca", "tls_cert", "tls_key", "OPENSHELL_PODMAN_TLS_CA"):
        assert name in str(exc.value)


def test_https_endpoint_with_tls_is_fine(tmp_path: Path) -> None:
    env = {**tls_env(tmp_path), "OPENSHELL_GRPC_ENDPOINT": "https://127.0.0.1:17670"}
    s = load(args=None, environ=env)
    assert s.endpoint == "https://127.0.0.1:17670"
    assert config.startup_warnings(s, env) == []


def test_http_endpoint_with_tls_warns(tmp_path: Path) -> None:
    """TLS files with an explicit http:// endpoint are ignored by the supervisor: say so at start."""
    env = {**tls_env(tmp_path), "OPENSHELL_GRPC_ENDPOINT": "http://gw:17670"}
    [warning] = config.startup_warnings(load(args=None, environ=env), env)
    assert "http://" in warning and "OPENSHELL_GRPC_ENDPOINT" in warning and "ignores the TLS files" in warning
    plain = {"OPENSHELL_GRPC_ENDPOINT": "http://gw:17670"}
    assert config.startup_warnings(load(args=None, environ=plain), plain) == []


def test_unknown_openshell_env_named_in_one_warning() -> None:
    """Unknown OPENSHELL_* names, sorted, in one line; values never; known names not."""
    env = {
        "OPENSHELL_ZED": "secret-value",
        "OPENSHELL_NETWROK_NAME": "typo",
        "OPENSHELL_NETWORK_NAME": "openshell",
        "OPENSHELL_DRIVER_ADMISSION_CONFIG_JSON": "{}",
        "OPENSHELL_SANDBOX_RUNTIME_IMAGE": "openshell/sandbox:dev",
        "PODMAND_STATE_DIR": "/tmp/x",
        "HOME": "/root",
    }
    assert options.unknown_env(env) == ["OPENSHELL_NETWROK_NAME", "OPENSHELL_ZED"]
    warnings = config.startup_warnings(load(args=None, environ=env), env)
    assert len(warnings) == 1
    assert "OPENSHELL_NETWROK_NAME, OPENSHELL_ZED" in warnings[0]
    assert "secret-value" not in warnings[0] and "typo" not in warnings[0]


def test_upstream_launcher_environment_is_all_known(tmp_path: Path) -> None:
    """Everything upstream's e2e/with-podman-gateway.sh gives its standalone driver is accepted
    without a warning (pull policy spelled its way, https endpoint with TLS files)."""
    env = {
        "XDG_DATA_HOME": str(tmp_path / "driver-data"),
        "OPENSHELL_COMPUTE_DRIVER_SOCKET": str(tmp_path / "compute-driver.sock"),
        "OPENSHELL_PODMAN_SOCKET": "/run/user/1000/podman/podman.sock",
        "OPENSHELL_SANDBOX_IMAGE": "nvcr.io/nvidia/base/ubuntu:24.04",
        "OPENSHELL_SANDBOX_IMAGE_PULL_POLICY": "if_not_present",
        "OPENSHELL_HEALTH_CHECK_INTERVAL_SECS": "10",
        "OPENSHELL_GRPC_ENDPOINT": "https://127.0.0.1:40123",
        "OPENSHELL_GATEWAY_PORT": "40123",
        "OPENSHELL_NETWORK_NAME": "e2e-podman-1234-40123",
        "OPENSHELL_STOP_TIMEOUT": "15",
        "OPENSHELL_SANDBOX_RUNTIME_IMAGE": "openshell/sandbox:dev",
        "OPENSHELL_SUPERVISOR_IMAGE": "openshell/supervisor@sha256:" + "0" * 64,
        "OPENSHELL_ENABLE_BIND_MOUNTS": "true",
        **tls_env(tmp_path),
    }
    s = load(args=None, environ=env)
    assert (s.image_pull_policy, s.network_name, s.enable_bind_mounts) == ("missing", "e2e-podman-1234-40123", True)
    assert config.startup_warnings(s, env) == []


def test_overflow_uid_in_allowed_peers_is_warned() -> None:
    """65534 stands for every uid outside podmand's user namespace: allowing it allows them all."""
    s = load(environ={"PODMAND_ALLOWED_PEER_UIDS": "1005,65534"})
    [warning] = [w for w in config.startup_warnings(s, {}) if "65534" in w]
    assert "every uid outside" in warning
    assert not [w for w in config.startup_warnings(load(environ={"PODMAND_ALLOWED_PEER_UIDS": "1005"}), {})]


# Each setting with a value it refuses (environment text, or a TOML value of the wrong
# type for a setting where every string is valid) and what its message must say.
BAD: dict[str, tuple[str | int, str]] = {
    "socket": (5, "expected a string, got 5"),
    "listen_tcp": ("0.0.0.0:50061", "must be a loopback host:port"),
    "podman_socket": (5, "expected a string, got 5"),
    "podman_wait": ("soon", "expected a number of seconds, got 'soon'"),
    "podman_autostart": ("maybe", "expected true or false, got 'maybe'"),
    "podman_down_grace": ("abc", "expected a number of seconds, got 'abc'"),
    "sandbox_image": (1, "expected a string, got 1"),
    "image_pull_policy": ("sometimes", "expected one of: always, missing, never, newer"),
    "supervisor_image": (1, "expected a string, got 1"),
    "sandbox_runtime_image": (1, "expected a string, got 1"),
    "grpc_endpoint": ("https://gw:17670", "needs TLS material"),
    "gateway_port": ("http", "expected a whole number, got 'http'"),
    "network_name": ("-bad", "must match"),
    "host_gateway_ip": ("nope", "'nope' is not an IP address"),
    "ssh_socket_path": ("run/ssh.sock", "must be an absolute path"),
    "stop_timeout": ("abc", "expected a whole number of seconds, got 'abc'"),
    "pids_limit": ("lots", "expected a whole number, got 'lots'"),
    "tls_ca": ("missing", "is not a readable file"),
    "tls_cert": ("missing", "is not a readable file"),
    "tls_key": ("missing", "is not a readable file"),
    "userns": ("bogus", "supported modes: auto, host, keep-id, nomap, private"),
    "uidmap": ("0:1", "must be 'container_id:host_id:size'"),
    "gidmap": ("0:1", "must be 'container_id:host_id:size'"),
    "enable_bind_mounts": ("maybe", "expected true or false, got 'maybe'"),
    "health_check_interval": ("1.5", "expected a whole number of seconds, got '1.5'"),
    "allow_driver_config": ("maybe", "expected true or false, got 'maybe'"),
    "admission_enabled": ("maybe", "expected true or false, got 'maybe'"),
    "telemetry_enabled": ("maybe", "expected true or false, got 'maybe'"),
    "otlp_endpoint": ("collector:4317", "must start with http://, https:// or unix://"),
    "gateway_name": (5, "expected a string, got 5"),
    "state_dir": (1, "expected a string, got 1"),
    "log_level": ("loud", "expected one of: debug, info, warning, error; got 'loud'"),
    "log_format": ("xml", "expected one of: human, json; got 'xml'"),
    "resync_interval": ("often", "expected a number of seconds, got 'often'"),
    "resync_interval_silent": ("-1", "must be 0 or more (0: resync_interval)"),
    "gc_grace": ("inf", "expected a number of seconds, got inf"),
    "watch_buffer": ("big", "expected a whole number, got 'big'"),
    "allow_host_userns": ("maybe", "expected true or false, got 'maybe'"),
    "allow_userns": ("maybe", "expected true or false, got 'maybe'"),
    "allow_userns_own_uid": ("maybe", "expected true or false, got 'maybe'"),
    "userns_max_size": ("-1", "must be 1 to 4294967294 (or 0: the operator's own per-sandbox size"),
    "allowed_peer_uids": ("1000,root", "expected a whole number, got 'root'"),
    "registry_auth_file": ("auth.json", "must be an absolute path"),
    "pull_inactivity_timeout": ("-5", "must be 0 or more (0: never)"),
    "default_cpu_limit": ("lots", "'lots' is not a CPU quantity (e.g. 500m, 2, 1.5); or 'unlimited'"),
    "default_memory_limit": ("1k", "'1k' is below the minimum of 6Mi; or 'unlimited'"),
    "cdi_spec_dirs": ("/etc/cdi,cdi", "'cdi' is not an absolute path"),
    "selinux": ("enforcing", "expected one of: auto, on, off; got 'enforcing'"),
    "https_proxy": ("socks5://proxy:1080", "https_proxy unsupported proxy scheme 'socks5'"),
    "no_proxy": (".corp", "no_proxy is set but no https_proxy is configured"),
    "proxy_auth_file": ("/etc/proxy-auth", "proxy_auth_file is set but no https_proxy is configured"),
    "proxy_auth_allow_insecure": ("maybe", "expected true or false, got 'maybe'"),
    "proxy_connect_by_hostname": ("maybe", "expected true or false, got 'maybe'"),
    "proxy_ca_bundle": ("/etc/ca.pem", "proxy_ca_bundle is set but no https_proxy is configured"),
    "rootfs_staging_dir": ("staging", "must be an absolute path"),
    "rootfs_max_bytes": ("-1", "must be 0 or more (0: rootfs tar sources not supported)"),
    "log_size_max": ("8192", "must be at least 65536 (or 0: unbounded, unless containers.conf's log_size_max "
                             "bounds it)"),
    "exit_watch": ("poll", "expected one of: events, wait; got 'poll'"),
}


def test_exit_watch_default_and_override() -> None:
    """Exits come from events unless told otherwise (any case)."""
    assert load(args=None, environ={}).exit_watch == "events"
    assert load(args=None, environ={"PODMAND_EXIT_WATCH": "Wait"}).exit_watch == "wait"


def test_every_setting_has_a_bad_value_case() -> None:
    """A new setting must come with its bad-value message checked below."""
    assert set(BAD) == {opt.field for opt in options.OPTIONS}


@pytest.mark.parametrize("gone", options.REMOVED, ids=lambda gone: gone.field)
def test_a_removed_setting_stops_the_start_in_one_line_wherever_it_is_set(
        gone: options.Removed, tmp_path: Path) -> None:
    """topology (the single-container layout), require_launch_auth and the workspace
    network's network_prefix and network_pool are gone: from the environment, a flag or
    the file, whatever the value, one line names the setting and why, rather than the
    setting being ignored or argparse's usage error."""
    toml = write_toml(tmp_path, f'{gone.field} = "x"\n')
    for args, environ in ((None, {gone.env: "single"}), (flags(gone.flag, "single"), {}),
                          (None, {"PODMAND_CONFIG": toml})):
        with pytest.raises(ConfigError) as exc:
            load(args, environ)
        message = str(exc.value)
        assert message.startswith(f"setting {gone.field} ({gone.flag} / {gone.env}) was removed: "), message
        assert "\n" not in message and message.endswith("remove it from podmand's configuration")
    assert "single-container layout is gone" in str(options.REMOVED[0].error())
    assert "makes no workspace network" in str(options.REMOVED[-1].error())


@pytest.mark.parametrize("opt", options.OPTIONS, ids=lambda opt: opt.field)
def test_bad_value_message_names_the_setting_and_what_it_takes(opt: options.Option, tmp_path: Path) -> None:
    """Every refusal names the setting with its flag and variable and says what it takes in
    words (valid values listed for choices), never msgspec's "Expected `int`, got `str`"."""
    value, needle = BAD[opt.field]
    env: dict[str, str] = {}
    if opt.field in ("uidmap", "gidmap"):
        env.update(OPENSHELL_PODMAN_USERNS="private", OPENSHELL_PODMAN_UIDMAP="0:1:1", OPENSHELL_PODMAN_GIDMAP="0:1:1")
    if opt.field.startswith("tls_"):
        env.update(tls_env(tmp_path))
        value = str(tmp_path / "missing.pem")
    if isinstance(value, str):
        env[opt.env] = value
    else:
        env["PODMAND_CONFIG"] = write_toml(tmp_path, f"{opt.field} = {value}\n")
    with pytest.raises(ConfigError) as exc:
        load(args=None, environ=env)
    text = str(exc.value)
    assert text.startswith(f"invalid setting {opt.field} ({opt.flag} / {opt.env}): "), text
    assert needle in text
    assert "Expected `" not in text and "Invalid enum" not in text


@pytest.mark.parametrize("opt", [o for o in options.OPTIONS if BAD[o.field][1].startswith("expected true")
                                 and o.field != "proxy_auth_allow_insecure"],  # tests/unit/sandbox/test_proxy.py
                         ids=lambda opt: opt.field)
def test_every_bool_flag_is_a_bare_switch_or_takes_a_value(opt: options.Option) -> None:
    """``--flag`` alone means true and ``--flag=false`` false, for every boolean setting."""
    base = bool_context(opt.field)
    assert getattr(load(args=flags(opt.flag), environ={**base, opt.env: "false"}), opt.field) is True
    assert getattr(load(args=flags(f"{opt.flag}=false"), environ={**base, opt.env: "true"}), opt.field) is False
    assert getattr(load(args=flags(opt.flag, "no"), environ=base), opt.field) is False


def bool_context(field: str) -> dict[str, str]:
    """The other settings a boolean needs before it may be true (the proxy's, as upstream)."""
    if field == "allow_host_userns":
        return {"PODMAND_ALLOW_USERNS_OWN_UID": "true"}
    if not field.startswith("proxy_"):
        return {}
    return {"OPENSHELL_SANDBOX_HTTPS_PROXY": "http://proxy.corp:3128"}


def test_numbers_forgive_spaces_and_choices_any_case() -> None:
    s = load(args=None, environ={"OPENSHELL_STOP_TIMEOUT": " 7 ", "PODMAND_LOG_FORMAT": "JSON"})
    assert (s.stop_timeout, s.log_format) == (7, "json")


def test_unknown_key_in_config_file_is_named(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "stop_timeouts = 1\n")
    with pytest.raises(ConfigError) as exc:
        load(args=None, environ={"PODMAND_CONFIG": path})
    assert str(exc.value).startswith(f"unknown setting 'stop_timeouts' in config file {path}")
