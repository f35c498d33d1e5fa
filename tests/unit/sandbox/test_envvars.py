"""Unit tests for podmand.sandbox.envvars: which variables reach the root supervisor, from the
caller and from the image, and which reach only SSH sessions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.sandbox import envvars, spec
from podmand.sandbox.identity import Resolved
from podmand.sandbox.plan import Plan, Provision

IDENTITY = Resolved(uid=1000, gid=1000, supplementary=(), source="image", digest="sha256:feed")


def plan_with(environment: dict[str, str]) -> Plan:
    box = pb.DriverSandbox(id="abc123", name="demo", workspace="ws",
                           spec=pb.DriverSandboxSpec(environment=environment))
    return spec.validate(box, Settings(topology="single"))


def container(plan: Plan, image_env: tuple[str, ...] = ()) -> dict[str, Any]:
    prov = Provision(image_id="sha256:feed", image_user="", image_env=image_env, network="openshell-ws",
                          supervisor_path="/cache/openshell-sandbox", secrets_dir="/s", instance="i",
                          identity=IDENTITY)
    return spec.container_spec(plan, Settings(topology="single"), prov)


# Held back since this change; each one's reader is in the module docstring.
NEWLY_HELD_BACK = {
    # glibc's setuid list, for the root helpers (ip, nsenter, nft, dmesg)
    "GCONV_PATH": "/sandbox/gconv",
    "GETCONF_DIR": "/sandbox",
    "HOSTALIASES": "/sandbox/aliases",
    "LOCALDOMAIN": "evil.example",
    "LOCPATH": "/sandbox/locale",
    "NIS_PATH": "x",
    "NLSPATH": "/sandbox/%N",
    "RESOLV_HOST_CONF": "/sandbox/host.conf",
    "RES_OPTIONS": "ndots:15",
    "TMPDIR": "/sandbox/tmp",
    "TZDIR": "/sandbox/zoneinfo",
    "MUSL_LOCPATH": "/sandbox/locale",
    # the Rust runtime
    "TOKIO_WORKER_THREADS": "0",
    # TLS secrets and trust
    "SSLKEYLOGFILE": "/sandbox/keys",
    "SSL_CERT_DIR": "/sandbox/ca",
    # proxies, any case
    "GRPC_PROXY": "http://evil:1",
    "grpc_proxy": "http://evil:1",
    # telemetry SDK
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://evil:4317",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=x",
    # interpreter and shell start-up hooks
    "PYTHONUSERBASE": "/sandbox/py",
    "PERL5OPT": "-Mevil",
    "PERL5LIB": "/sandbox/perl",
    "PERLLIB": "/sandbox/perl",
    "PERL5DB": "x",
    "RUBYOPT": "-revil",
    "RUBYLIB": "/sandbox/rb",
    "NODE_OPTIONS": "--require /sandbox/x.js",
    "JAVA_TOOL_OPTIONS": "-javaagent:/sandbox/a.jar",
    "_JAVA_OPTIONS": "-javaagent:/sandbox/a.jar",
    "JDK_JAVA_OPTIONS": "-javaagent:/sandbox/a.jar",
    "SHELLOPTS": "xtrace",
    "BASHOPTS": "extdebug",
    "PS4": "$(id)",
    # the caller's PATH (root looks dmesg up through it)
    "PATH": "/sandbox/bin:/usr/bin:/bin",
    # locale and time values that name a file
    "LANG": "/sandbox/locale/evil",
    "LC_ALL": "/sandbox/evil",
    "LC_MESSAGES": "../../sandbox/evil",
    "LANGUAGE": "en:/sandbox/evil",
    "TZ": ":/sandbox/tz",
}

# Ordinary application names and values: they reach the main process.
PASSES = {
    "HOME": "/sandbox",
    "USER": "sandbox",
    "SHELL": "/bin/bash",
    "TERM": "xterm-256color",
    "FOO_BAR": "1",
    "MY_TOKEN": "secret",
    "APP_MODE": "prod",
    "NODE_ENV": "production",
    "JAVA_HOME": "/usr/lib/jvm/default",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "CURL_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",  # the workload's own; nothing root-side reads it
    "XDG_CONFIG_HOME": "/sandbox/.config",
    "STANDIN_POLICY_TCP": "1",
    "path": "/lower/case/is/not/PATH",
    "my.dotted-name": "x",
    "LANG": "C.UTF-8",
    "LC_ALL": "en_US.UTF-8",
    "LANGUAGE": "en_GB:en",
    "TZ": "Europe/Paris",
    "MY_PROXY_SETTING": "x",
}


@pytest.mark.parametrize("key", sorted(NEWLY_HELD_BACK))
def test_newly_held_back_caller_env_stays_out_of_the_supervisor(key: str) -> None:
    """Each family the deny-list missed: kept out of the container environment (so out of
    the root supervisor and its helpers), named for the EnvironmentFiltered event, and
    still given to SSH sessions through OPENSHELL_USER_ENVIRONMENT."""
    value = NEWLY_HELD_BACK[key]
    plan = plan_with({key: value, "APP_MODE": "prod"})
    env = container(plan)["env"]
    assert key not in env and env["APP_MODE"] == "prod"
    assert spec.filtered_user_env(plan) == [key]
    assert json.loads(env[names.ENV_USER_ENV]) == {key: value, "APP_MODE": "prod"}
    assert envvars.caller_env_held_back(key, value)


@pytest.mark.parametrize("key", sorted(PASSES))
def test_ordinary_caller_env_reaches_the_main_process(key: str) -> None:
    plan = plan_with({key: PASSES[key]})
    env = container(plan)["env"]
    assert env[key] == PASSES[key]
    assert spec.filtered_user_env(plan) == []
    assert not envvars.caller_env_held_back(key, PASSES[key])


@pytest.mark.parametrize(("value", "held"), [
    ("UTC", False),
    ("EST5EDT", False),
    ("America/New_York", False),
    (":Europe/Paris", False),
    ("/usr/share/zoneinfo/UTC", False),
    (":/etc/localtime", False),
    ("/etc/localtime", False),
    ("/sandbox/tz", True),
    (":/tmp/tz", True),
    ("../../sandbox/tz", True),
    ("/usr/share/zoneinfo/../../../sandbox/tz", True),
])
def test_tz_passes_only_inside_the_zone_database(value: str, held: bool) -> None:
    """glibc reads a TZ file from wherever TZ says; the zone names and the system's own
    files are ordinary, anything else is a file of the caller's choosing."""
    assert envvars.names_a_file("TZ", value) is held
    assert envvars.caller_env_held_back("TZ", value) is held


def test_image_env_is_unset_by_the_same_families_but_its_path_stays() -> None:
    """The image's ENV reaches the supervisor too: the same names are unset there, except
    PATH, which names the image's own directories (and without it the main process has
    none); ordinary entries are left alone."""
    image_env = ("PATH=/usr/local/bin:/usr/bin:/bin", "GCONV_PATH=/x", "TMPDIR=/var/tmp", "OTEL_SERVICE_NAME=s",
                 "SSLKEYLOGFILE=/k", "LANG=/opt/locale/x", "LC_ALL=C.UTF-8", "TZ=Etc/UTC", "NODE_OPTIONS=--x",
                 "APP=1", "NOVALUE")
    unset = container(plan_with({}), image_env)["unsetenv"]
    assert unset == ["GCONV_PATH", "LANG", "NODE_OPTIONS", "OTEL_SERVICE_NAME", "SSLKEYLOGFILE", "TMPDIR"]


def test_filtered_keys_are_sorted_and_only_the_held_back_ones() -> None:
    plan = plan_with({"TMPDIR": "/t", "GCONV_PATH": "/g", "APP_MODE": "prod", "LD_PRELOAD": "/x.so",
                      "OPENSHELL_ENDPOINT": "http://evil:1", "LANG": "C.UTF-8"})
    assert spec.filtered_user_env(plan) == ["GCONV_PATH", "LD_PRELOAD", "OPENSHELL_ENDPOINT", "TMPDIR"]
    env = container(plan)["env"]
    assert env[names.ENV_ENDPOINT] != "http://evil:1" and env["LANG"] == "C.UTF-8"
