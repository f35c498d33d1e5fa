"""The pair's two libpod specs (podmand/pair/specs.py, contract §3.2, §3.3)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.errors import FailedPrecondition
from podmand.pair import specs
from podmand.sandbox import spec
from podmand.sandbox.identity import Resolved
from podmand.sandbox.plan import Plan, Provision
from tests.jwt import make_launch

SECRETS = "/var/lib/podmand/secrets/abc123"
RUNTIME = "/cache/openshell-sandbox"
IDENTITY = Resolved(uid=1000, gid=1001, supplementary=(1001, 3000, 2000), source="image", digest="sha256:feed")
BUNDLE = make_launch("abc123", "g0000000000000001")


def make_plan(settings: Settings, **spec_fields: Any) -> Plan:
    sandbox = pb.DriverSandbox(id="abc123", name="demo", workspace="ws", spec=pb.DriverSandboxSpec(**spec_fields))
    return spec.validate(sandbox, settings, recorded=True)  # a plan to build from: no bundle checked


def prov(identity: Resolved = IDENTITY, **over: Any) -> Provision:
    fields: dict[str, Any] = {
        "image_id": "sha256:feed", "image_user": "agent", "network": "unused", "supervisor_path": RUNTIME,
        "image_env": ("PATH=/usr/bin", "LD_PRELOAD=/evil.so", "HTTP_PROXY=http://bypass", "EMPTY=", "NOEQ"),
        "secrets_dir": SECRETS, "instance": "inst1", "identity": identity, **over}
    return Provision(**fields)


def workload(settings: Settings | None = None, *, rootless: bool = False, **over: Any) -> dict[str, Any]:
    settings = settings or Settings()
    return specs.workload_spec(make_plan(settings, launch_authentication=BUNDLE), settings, prov(**over),
                               rootless=rootless)


def supervisor(settings: Settings | None = None, **over: Any) -> dict[str, Any]:
    settings = settings or Settings()
    return specs.supervisor_spec(make_plan(settings, launch_authentication=BUNDLE), settings, prov(**over),
                                 supervisor_image_id="sha256:5e1f")


def test_workload_runs_the_runtime_fenced_and_bare() -> None:
    built = workload()
    assert built["name"] == "openshell-ws--demo-abc123" and built["image"] == "sha256:feed"
    assert built["entrypoint"] == ["/opt/openshell/bin/openshell-sandbox"]
    assert built["command"] == ["--bootstrap", "/.openshell/channel/sandbox/bootstrap.json"]
    assert (built["user"], built["groups"]) == ("1000:1001", ["2000", "3000"])
    assert (built["cap_drop"], built["cap_add"], built["no_new_privileges"]) == (["ALL"], [], True)
    assert "seccomp_profile_path" not in built  # the runtime's default profile
    assert built["sysctl"] == {"net.ipv4.ip_unprivileged_port_start": "0"}
    assert built["netns"] == {"nsmode": "none"}
    assert not {"Networks", "hostadd", "portmappings"} & set(built)
    assert built["env"] == {}
    assert built["unsetenv"] == ["EMPTY", "HTTP_PROXY", "LD_PRELOAD", "PATH"]
    assert built["labels"][names.ISOLATION_ROLE] == "sandbox"
    assert built["labels"][names.SANDBOX_ID] == "abc123" and built["labels"][names.INSTANCE] == "inst1"
    assert built["healthconfig"] == {"Test": ["NONE"]}


def test_workload_mounts() -> None:
    built = workload()
    assert built["volumes"][:2] == [
        {"Name": "openshell-sandbox-abc123-workspace", "Dest": "/sandbox", "Options": ["rw"]},
        {"Name": "openshell-channel-abc123", "Dest": "/.openshell/channel", "Options": ["rw"]},
    ]
    assert built["mounts"][:2] == [
        {"destination": "/opt/openshell/bin/openshell-sandbox", "type": "bind", "source": RUNTIME,
         "options": ["rbind", "ro"]},
        {"destination": "/run/openshell-supervisor-ca", "type": "tmpfs", "source": "tmpfs",
         "options": ["rw", "noexec", "nosuid", "nodev", "mode=0777", "size=1m"]},
    ]
    destinations = {m["destination"] for m in built["mounts"]}
    assert not destinations & {names.TOKEN_PATH, "/run/netns", "/etc/openshell/tls/client"}
    labelled = workload(selinux=True)
    assert labelled["mounts"][0]["options"] == ["rbind", "ro", "z"]
    assert labelled["volumes"][1]["Options"] == ["rw", "z"]


@pytest.mark.parametrize(("rootless", "source"), [(True, "image"), (False, "default")])
def test_the_launcher_form(rootless: bool, source: str) -> None:
    """Rootless, or an identity podmand made up: the runtime starts as root with four
    capabilities to chown the workspace, then drops to the identity itself."""
    ident = Resolved(1000, 1000, (), source, "sha256:feed")
    built = workload(rootless=rootless, identity=ident, workspace="/work")
    assert built["command"] == ["launch-capability-free", "1000", "1000",
                                "/.openshell/channel/sandbox/bootstrap.json", "/work"]
    assert (built["user"], built["groups"]) == ("0:0", [])
    assert (built["cap_drop"], built["cap_add"]) == (["ALL"], ["CHOWN", "SETGID", "SETUID", "SETPCAP"])


def test_the_callers_mounts_gpus_limits_and_userns_go_to_the_workload_only() -> None:
    settings = Settings(allow_driver_config=True, enable_bind_mounts=True, admission_enabled=False, pids_limit=99)
    sandbox = pb.DriverSandbox(id="abc123", name="demo", workspace="ws", spec=pb.DriverSandboxSpec(
        launch_authentication=BUNDLE, template=pb.DriverSandboxTemplate(resources=pb.DriverResourceRequirements(
            cpu_limit="2", memory_limit="1Gi"))))
    sandbox.spec.template.driver_config.update({"mounts": [{"type": "bind", "source": "/srv/m", "target": "/m"},
                                                           {"type": "volume", "source": "data", "target": "/d"}],
                                                "cdi_devices": ["nvidia.com/gpu=0"]})
    sandbox.spec.resource_requirements.gpu.count = 1
    plan = spec.validate(sandbox, settings, recorded=True)
    built = specs.workload_spec(plan, settings, prov(), rootless=True)
    assert {"destination": "/m", "type": "bind", "source": "/srv/m", "options": ["rbind", "ro"]} in built["mounts"]
    assert {"Name": "data", "Dest": "/d", "Options": ["ro"]} in built["volumes"]
    assert built["devices"] == [{"path": "nvidia.com/gpu=0"}]
    assert built["resource_limits"]["pids"] == {"limit": 99}
    assert built["resource_limits"]["memory"]["limit"] == 2**30
    assert built["userns"]["nsmode"] == "auto" and built["idmappings"]["AutoUserNs"] is True
    sup = specs.supervisor_spec(plan, settings, prov(), supervisor_image_id="sha256:5e1f")
    assert sup["resource_limits"] == built["resource_limits"]  # upstream's: the same limits
    assert "devices" not in sup and "idmappings" not in sup
    assert not [m for m in sup["mounts"] if m["destination"] in ("/m", "/d")]


def test_supervisor_runs_beside_it() -> None:
    built = supervisor()
    assert built["name"] == "openshell-supervisor-abc123" and built["image"] == "sha256:5e1f"
    assert built["entrypoint"] == ["/openshell-supervisor"]
    assert built["command"] == [
        "--workdir", "/sandbox",
        "--backend-descriptor-file=/.openshell/supervisor/runtime-descriptor.json",
        "--auth-bundle-file=/.openshell/supervisor/auth.json",
        "--health-socket-path=/run/openshell/supervisor-health.sock",
    ]
    assert (built["user"], built["groups"]) == ("1000:1001", ["2000", "3000"])
    assert (built["cap_drop"], built["cap_add"], built["no_new_privileges"]) == (["ALL"], [], True)
    assert built["netns"] == {"nsmode": "host"} and built["userns"] == {"nsmode": "host"}
    # the descriptor's host-gateway address, not Podman's "host-gateway" (unresolved before 4.7.0)
    assert built["hostadd"] == ["host.containers.internal:127.0.0.1", "host.openshell.internal:127.0.0.1"]
    assert supervisor(Settings(host_gateway_ip="10.0.2.2"))["hostadd"] == [
        "host.containers.internal:10.0.2.2", "host.openshell.internal:10.0.2.2"]
    assert built["volumes"] == [{"Name": "openshell-channel-abc123", "Dest": "/.openshell/channel", "Options": ["ro"]}]
    tmpfs = [m for m in built["mounts"] if m["type"] == "tmpfs"]
    assert [m["destination"] for m in tmpfs] == ["/run", "/var/log", "/tmp"]
    # U: Podman 4.3.1 leaves a tmpfs root's 0755 despite mode=0777 (tests/e2e/test_pair_lifecycle.py)
    assert all(m["options"] == ["rw", "noexec", "nosuid", "nodev", "mode=0777", "size=64m", "U"] for m in tmpfs)
    assert built["labels"][names.ISOLATION_ROLE] == "supervisor"
    assert names.sandbox_of(built["name"], built["labels"]) == ""  # the sandbox's instance is the workload
    assert built["healthconfig"] == {"Test": ["NONE"]}


def test_supervisor_env() -> None:
    """Contract §3.3: podmand's variables, the admitted backend and the proxy TLS dir; no
    token file, no caller variable of its own (they travel as OPENSHELL_USER_ENVIRONMENT)."""
    settings = Settings(grpc_endpoint="http://gw.example:8080")
    plan = make_plan(settings, launch_authentication=BUNDLE, environment={"TEAM": "blue", "LD_PRELOAD": "/x.so"})
    env = specs.supervisor_env(plan, settings, "agent", IDENTITY)
    assert env["OPENSHELL_ADMITTED_ISOLATION_BACKEND"] == "openshell-sandbox"
    assert env["OPENSHELL_PROXY_TLS_DIR"] == "/run/openshell/proxy-tls"
    assert env["OPENSHELL_SANDBOX"] == "demo" and env["OPENSHELL_SANDBOX_ID"] == "abc123"
    assert env["OPENSHELL_ENDPOINT"] == "http://gw.example:8080"
    assert specs.supervisor_env(plan, Settings(gateway_port=9443), "agent", IDENTITY)["OPENSHELL_ENDPOINT"] == (
        "http://127.0.0.1:9443")  # the host's network: the gateway at loopback, not host.containers.internal
    assert env["OPENSHELL_NETWORK_RUNTIME_CAPABILITIES"] == "policy-dns-transparent-tcp"
    assert (env["OPENSHELL_OCI_IMAGE_USER"], env["OPENSHELL_SANDBOX_UID"], env["OPENSHELL_SANDBOX_GID"]) == (
        "agent", "", "")
    assert json.loads(env["OPENSHELL_USER_ENVIRONMENT"]) == {"LD_PRELOAD": "/x.so", "TEAM": "blue"}
    assert not {"TEAM", "LD_PRELOAD", "OPENSHELL_SANDBOX_TOKEN_FILE", "OPENSHELL_K8S_SA_TOKEN_FILE"} & set(env)
    assert json.loads(env["OPENSHELL_MAIN_PROCESS_SPEC"])["version"] == 1
    no_user = specs.supervisor_env(plan, settings, "", IDENTITY)
    assert (no_user["OPENSHELL_SANDBOX_UID"], no_user["OPENSHELL_SANDBOX_GID"]) == ("1000", "1000")


def test_supervisor_health_check() -> None:
    built = supervisor(Settings(health_check_interval=7))
    assert built["healthconfig"] == {
        "Test": ["CMD", "/openshell-supervisor", "health", "--socket", "/run/openshell/supervisor-health.sock"],
        "Interval": 7 * 10**9, "Timeout": 2 * 10**9, "Retries": 10, "StartPeriod": 5 * 10**9}
    assert built["healthMaxLogCount"] == specs.HEALTH_MAX_LOG_COUNT


def test_supervisor_gets_podmands_files_for_the_gateway_the_workload_none() -> None:
    """TLS client files and the corporate proxy's files are the supervisor's (chowned to its
    user by "U"); the workload gets neither, nor a token."""
    settings = Settings(tls_ca="/etc/tls/ca.crt", tls_cert="/etc/tls/tls.crt", tls_key="/etc/tls/tls.key")
    sup = supervisor(settings)
    tls = [m for m in sup["mounts"] if m["destination"].startswith("/etc/openshell/tls/client/")]
    assert len(tls) == 3 and all("U" in m["options"] and m["source"].startswith(SECRETS) for m in tls)
    assert sup["env"]["OPENSHELL_TLS_CA"] == "/etc/openshell/tls/client/ca.crt"
    assert not [m for m in sup["mounts"] if m["destination"] in ("/run/netns", names.SUPERVISOR_BIN)]
    # its bearer tokens are auth.json's: no token file, whatever the plan
    for plan in (make_plan(settings), make_plan(settings, sandbox_token="a.b.c")):
        built = specs.supervisor_spec(plan, settings, prov(), supervisor_image_id="sha256:" + "5" * 64)
        assert not [m for m in built["mounts"] if m["destination"].startswith("/etc/openshell/auth")]
    work = workload(settings)
    assert not [m for m in work["mounts"] if m["destination"].startswith("/etc/openshell")]


def test_no_secret_in_either_spec() -> None:
    bundle = json.loads(BUNDLE)["supervisor"]
    text = json.dumps([workload(), supervisor()])
    for secret in (bundle["gateway_token"], bundle["sandbox_token"], *bundle["gateway_token"].split(".")[1:2]):
        assert secret not in text


def test_an_identity_of_root_is_refused() -> None:
    with pytest.raises(FailedPrecondition, match=r"^workload identity: uid 0"):
        workload(identity=Resolved(0, 1000, (), "image", "sha256:feed"))


def test_the_workloads_resolver_is_the_runtimes_dns_relay() -> None:
    """Contract §3.2: /etc/resolv.conf names 127.0.0.53 (the runtime's relay), root's and
    read-only in the workload, and Podman writes none of its own; the supervisor keeps the host's."""
    work = workload()
    [bind] = [m for m in work["mounts"] if m["destination"] == "/etc/resolv.conf"]
    assert bind["source"] == f"{SECRETS}/resolv.conf" and {"ro", "U"} <= set(bind["options"])
    assert work["use_image_resolve_conf"] is True
    assert not [m for m in supervisor()["mounts"] if m["destination"] == "/etc/resolv.conf"]
