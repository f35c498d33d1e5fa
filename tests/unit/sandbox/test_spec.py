"""Unit tests for podmand.sandbox.spec: request validation, and what a plan becomes in the pair's specs."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.errors import FailedPrecondition, InvalidArgument
from podmand.libpod import versions
from podmand.libpod.versions import Features
from podmand.pair import specs
from podmand.sandbox import driverconfig, envvars, spec, usernamespace
from podmand.sandbox.identity import Resolved
from podmand.sandbox.plan import Plan, Provision
from podmand.sandbox.resources import Resources
from tests.jwt import make_launch, make_token

TOKEN = make_token("abc123")
SECRETS_DIR = "/var/lib/podmand/secrets/abc123"


def make_sandbox(**spec_fields: Any) -> pb.DriverSandbox:
    """A minimal valid request, its launch bundle included; keyword arguments go to DriverSandboxSpec."""
    spec_fields.setdefault("launch_authentication", make_launch("abc123", "g0000000000000001"))
    return pb.DriverSandbox(id="abc123", name="demo", workspace="ws", spec=pb.DriverSandboxSpec(**spec_fields))


IDENTITY = Resolved(uid=1000, gid=1000, supplementary=(1001,), source="image", digest="sha256:feed")


def provision(image_env: tuple[str, ...] = (), **over: Any) -> Provision:
    fields: dict[str, Any] = {
        "image_id": "sha256:feed", "image_user": "", "image_env": image_env, "network": "",
        "supervisor_path": "/cache/openshell-sandbox", "secrets_dir": SECRETS_DIR, "instance": "inst1",
        "identity": IDENTITY, **over}
    return Provision(**fields)


def build(plan: Plan, settings: Settings, image_env: tuple[str, ...] = ()) -> dict[str, Any]:
    """The workload container's spec (pair.specs), where the request's limits, mounts,
    devices and user namespace go."""
    return specs.workload_spec(plan, settings, provision(image_env), rootless=False)


def supervisor(plan: Plan, settings: Settings) -> dict[str, Any]:
    """The supervisor container's spec: podmand's environment, health check and files for the gateway."""
    return specs.supervisor_spec(plan, settings, provision(), supervisor_image_id="sha256:5e1f")


def with_driver_config(cfg: dict[str, Any]) -> pb.DriverSandbox:
    sandbox = make_sandbox()
    sandbox.spec.template.driver_config.update(cfg)
    return sandbox


# ---------------------------------------------------------------- validate


def test_minimal_request_gets_defaults() -> None:
    """An empty spec is valid and falls back to the configured image, limits and userns."""
    plan = spec.validate(make_sandbox(), Settings())
    assert (plan.sandbox_id, plan.name, plan.workspace) == ("abc123", "demo", "ws")
    assert plan.image == Settings().sandbox_image
    assert plan.resources == Resources(cpu_quota=200_000, memory_limit=4 * 2**30, pids_limit=2048)
    assert plan.userns == "auto"
    assert plan.container_name == "openshell-ws--demo-abc123"
    assert plan.mounts == () and plan.cdi_devices == () and plan.driver_config_used is False
    assert len(plan.spec_hash) == 64


def test_a_podman_that_applies_no_limit_is_asked_for_none() -> None:
    """What /info says Podman applies decides the plan's limits (issue 32: Podman 6.1.1 on
    cgroup v2 with only hugetlb failed every start on the default pids limit)."""
    bare = versions.Features("6.1.1", rootless=False, limited=frozenset({"hugetlb"}))
    assert spec.validate(make_sandbox(), Settings(), podman=bare).resources.libpod() == {}
    some = versions.Features("5.8.6", rootless=True, limited=frozenset({"memory", "pids"}))
    assert spec.validate(make_sandbox(), Settings(), podman=some).resources.libpod() == {
        "memory": {"limit": 4 * 2**30}, "pids": {"limit": 2048}}


def test_missing_sandbox_is_invalid() -> None:
    """A request without a sandbox message is rejected, not crashed on."""
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(None, Settings())
    assert exc.value.message.startswith("sandbox:")


def _set(path: str, value: Any) -> pb.DriverSandbox:
    sandbox = make_sandbox()
    *parents, leaf = path.split(".")
    msg: Any = sandbox
    for p in parents:
        msg = getattr(msg, p)
    target = getattr(msg, leaf)
    if isinstance(value, dict):
        target.update(value)
    elif isinstance(value, list):
        target.extend(value)
    else:
        setattr(msg, leaf, value)
    return sandbox


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("id", "", "sandbox.id"),
        ("id", "-leading-dash", "sandbox.id"),
        ("id", "x" * 129, "sandbox.id"),
        ("name", "", "sandbox.name"),
        ("name", "has space", "sandbox.name"),
        ("workspace", "bad/ws", "sandbox.workspace"),
        ("spec.template.image", "img with space", "sandbox.spec.template.image"),
        ("spec.log_level", "info\n", "sandbox.spec.log_level"),
        ("spec.template.environment", {"1BAD": "x"}, "sandbox.spec.template.environment"),
        ("spec.template.environment", {"OK": "a\x00b"}, "sandbox.spec.template.environment[OK]"),
        ("spec.environment", {"BAD KEY": "x"}, "sandbox.spec.environment"),
        ("spec.template.labels", {"a=b": "x"}, "sandbox.spec.template.labels"),
        ("spec.command", ["ok", "bad\x00"], "sandbox.spec.command[1]"),
        ("spec.template.resources.cpu_limit", "lots", "sandbox.spec.template.resources.cpu_limit"),
        ("spec.template.resources.cpu_request", "1x", "sandbox.spec.template.resources.cpu_request"),
        ("spec.template.resources.memory_limit", "4GB", "sandbox.spec.template.resources.memory_limit"),
        ("spec.template.resources.memory_limit", "1Mi", "sandbox.spec.template.resources.memory_limit"),
        ("spec.template.agent_socket_path", "relative/ssh.sock", "sandbox.spec.template.agent_socket_path"),
    ],
)
def test_invalid_field_is_named(path: str, value: Any, field: str) -> None:
    """Each rejected field is named first in the message so the caller can fix it."""
    sandbox = _set(path, value)
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(sandbox, Settings())
    assert exc.value.message.startswith(field + ":"), exc.value.message


def test_container_name_length_limit() -> None:
    """Names valid on their own are rejected when the combined container name exceeds 255."""
    sandbox = make_sandbox()
    sandbox.workspace, sandbox.name = "w" * 128, "n" * 108
    assert len(spec.validate(sandbox, Settings()).container_name) == 255
    sandbox.name = "n" * 109
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(sandbox, Settings())
    assert exc.value.message.startswith("sandbox.name:")
    assert "255" in exc.value.message


def test_missing_spec_is_invalid() -> None:
    """A sandbox without a spec cannot be provisioned."""
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(pb.DriverSandbox(id="abc123", name="demo"), Settings())
    assert exc.value.message.startswith("sandbox.spec:")


def test_no_image_anywhere_is_failed_precondition() -> None:
    """With no default image and none in the template, it is a server-side setup problem."""
    with pytest.raises(FailedPrecondition) as exc:
        spec.validate(make_sandbox(), Settings(sandbox_image=""))
    assert exc.value.message.startswith("sandbox.spec.template.image:")


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"memory_request": "2Gi", "memory_limit": "1Gi"}, "sandbox.spec.template.resources.memory_request"),
        ({"cpu_request": "2", "cpu_limit": "500m"}, "sandbox.spec.template.resources.cpu_request"),
    ],
)
def test_request_above_limit_is_invalid(resources: dict[str, str], field: str) -> None:
    """A request larger than its limit cannot be satisfied."""
    sandbox = make_sandbox(template=pb.DriverSandboxTemplate(resources=pb.DriverResourceRequirements(**resources)))
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(sandbox, Settings())
    assert exc.value.message.startswith(field + ":")
    assert "exceeds" in exc.value.message


def _resources_of(settings: Settings, **res: str) -> dict[str, Any]:
    """The libpod resource_limits of a sandbox whose template asks for ``res``."""
    template = pb.DriverSandboxTemplate(resources=pb.DriverResourceRequirements(**res))
    return build(spec.validate(make_sandbox(template=template), settings), settings)["resource_limits"]


def test_limits_and_requests_reach_the_container_spec() -> None:
    """Limits become quota and memory limit; requests become CPU shares (the kubelet's
    millicores * 1024 / 1000) and a memory reservation."""
    limits = _resources_of(Settings(), cpu_limit="1500m", cpu_request="250m", memory_limit="512Mi",
                           memory_request="256Mi")
    assert limits["cpu"] == {"quota": 150_000, "period": 100_000, "shares": 256}
    assert limits["memory"] == {"limit": 512 * 2**20, "reservation": 256 * 2**20}
    assert limits["pids"] == {"limit": 2048}
    defaults = _resources_of(Settings())
    assert defaults["cpu"] == {"quota": 200_000, "period": 100_000}
    assert defaults["memory"] == {"limit": 4 * 2**30}


def test_default_limits_come_from_the_settings() -> None:
    """default_cpu_limit / default_memory_limit apply when the template has no limit; "unlimited"
    (or "0") sends no quota and no memory limit, and then any request is accepted."""
    assert _resources_of(Settings(default_cpu_limit="500m", default_memory_limit="1Gi")) == {
        "cpu": {"quota": 50_000, "period": 100_000},
        "memory": {"limit": 2**30},
        "pids": {"limit": 2048},
    }
    unlimited = Settings(default_cpu_limit="unlimited", default_memory_limit="0", pids_limit=0)
    assert _resources_of(unlimited) == {}
    assert _resources_of(unlimited, cpu_request="64", memory_request="64Gi") == {
        "cpu": {"shares": 65_536},
        "memory": {"reservation": 64 * 2**30},
    }
    assert _resources_of(unlimited, cpu_limit="1", memory_limit="1Gi")["memory"] == {"limit": 2**30}


@pytest.mark.parametrize(
    ("res", "field", "needle"),
    [
        ({"memory_request": "8Gi"}, "memory_request", "exceeds the default memory_limit '4Gi'"),
        ({"cpu_request": "3"}, "cpu_request", "exceeds the default cpu_limit '2'"),
    ],
)
def test_request_above_the_default_limit_is_invalid(res: dict[str, str], field: str, needle: str) -> None:
    """As Kubernetes refuses a request above a defaulted limit: it names the request, the
    default and the setting, and says how to ask for more."""
    template = pb.DriverSandboxTemplate(resources=pb.DriverResourceRequirements(**res))
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(make_sandbox(template=template), Settings())
    assert exc.value.message.startswith(f"sandbox.spec.template.resources.{field}:")
    assert needle in exc.value.message and f"default_{field.split('_')[0]}_limit" in exc.value.message


@pytest.mark.parametrize(
    ("user_namespaces", "settings_userns", "expected"),
    [
        (None, "keep-id", "keep-id"),
        (False, "auto", "host"),
        (True, "host", "auto"),
        (True, "auto:size=2048", "auto:size=2048"),
    ],
)
def test_userns_intent(user_namespaces: bool | None, settings_userns: str, expected: str) -> None:
    """The template's user_namespaces flag overrides the configured mode only when set
    (the host namespace only where the operator allows it)."""
    tpl = pb.DriverSandboxTemplate()
    if user_namespaces is not None:
        tpl.user_namespaces = user_namespaces
    plan = spec.validate(make_sandbox(template=tpl), Settings(
            userns=settings_userns, allow_host_userns=True))
    assert plan.userns == expected


def test_host_userns_needs_the_operator_setting() -> None:
    """user_namespaces = false is host root with podmand's capabilities: refused by
    default, naming the field and the setting that would allow it."""
    sandbox = make_sandbox(template=pb.DriverSandboxTemplate(user_namespaces=False))
    with pytest.raises(FailedPrecondition) as exc:
        spec.validate(sandbox, Settings())
    assert exc.value.message.startswith("sandbox.spec.template.user_namespaces:")
    assert "allow_host_userns" in exc.value.message and "PODMAND_ALLOW_HOST_USERNS" in exc.value.message
    assert spec.validate(sandbox, Settings(allow_host_userns=True)).userns == "host"


# ---------------------------------------------------------------- driver_config


def test_driver_config_disabled_is_failed_precondition() -> None:
    """Caller driver config needs an administrator opt-in."""
    sandbox = with_driver_config({"mounts": [{"type": "tmpfs", "target": "/scratch"}]})
    with pytest.raises(FailedPrecondition) as exc:
        spec.validate(sandbox, Settings())
    assert exc.value.message.startswith("sandbox.spec.template.driver_config:")


def test_empty_driver_config_is_ignored_when_disabled() -> None:
    """An empty Struct is 'no driver config', not a request that needs the opt-in."""
    sandbox = make_sandbox()
    sandbox.spec.template.driver_config.SetInParent()
    plan = spec.validate(sandbox, Settings())
    assert plan.driver_config_used is False


def test_driver_config_tmpfs_volume_and_bind() -> None:
    """Accepted mounts keep their kind, normalised target, source and options."""
    sandbox = with_driver_config({"mounts": [
        {"type": "tmpfs", "target": "/scratch/", "size_bytes": 1048576, "mode": 511},
        {"type": "volume", "source": "shared-data", "target": "/data", "read_only": False},
        {"type": "bind", "source": "/srv/models", "target": "/models"},
    ]})
    settings = Settings(allow_driver_config=True, enable_bind_mounts=True, admission_enabled=False)
    plan = spec.validate(sandbox, settings)
    assert plan.driver_config_used is True
    assert plan.mounts == (
        driverconfig.Mount("tmpfs", "/scratch", "", False, ("rw", "nosuid", "nodev", "size=1048576", "mode=777")),
        driverconfig.Mount("volume", "/data", "shared-data", False),
        driverconfig.Mount("bind", "/models", "/srv/models", True),
    )
    built = build(plan, settings)
    bind = {"destination": "/models", "type": "bind", "source": "/srv/models", "options": ["rbind", "ro"]}
    assert bind in built["mounts"]
    assert {"Name": "shared-data", "Dest": "/data", "Options": ["rw"]} in built["volumes"]
    assert built["labels"][names.DRIVER_CONFIG_USED] == "true"


def test_a_volume_subpath_is_in_the_container_spec_on_a_podman_that_honours_it() -> None:
    """validate takes the connected Podman's features: 5.4.2 mounts a volume's subpath, so
    the spec carries it beside the workspace volume; 4.3.1 would not, and is refused."""
    sandbox = with_driver_config({"mounts": [
        {"type": "volume", "source": "shared-data", "target": "/data", "subpath": "team-a"}]})
    settings = Settings(allow_driver_config=True, admission_enabled=False)
    plan = spec.validate(sandbox, settings, podman=Features("5.4.2"))
    assert plan.mounts == (driverconfig.Mount("volume", "/data", "shared-data", True, subpath="team-a"),)
    assert build(plan, settings)["volumes"] == [
        {"Name": plan.volume_name, "Dest": names.WORKSPACE_PATH, "Options": ["rw"]},
        {"Name": names.channel_volume_name(plan.sandbox_id), "Dest": names.CHANNEL_DIR, "Options": ["rw"]},
        {"Name": "shared-data", "Dest": "/data", "Options": ["ro"], "SubPath": "team-a"},
    ]
    with pytest.raises(FailedPrecondition, match=r"mounts\[0\]\.subpath: volume subpath needs Podman 4\.5\.0"):
        spec.validate(sandbox, settings, podman=Features("4.3.1"))


@pytest.mark.parametrize(
    ("cfg", "error", "field", "needle"),
    [
        ({"privileged": True}, InvalidArgument, "sandbox.spec.template.driver_config", "privileged"),
        ({"mounts": [{"type": "bind", "source": "/srv", "target": "/srv"}]}, FailedPrecondition,
         "sandbox.spec.template.driver_config.mounts[0]", "resource admission is enabled"),
        ({"mounts": [{"type": "tmpfs", "target": "/etc/openshell/x"}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[0].target", "/etc/openshell"),
        ({"mounts": [{"type": "tmpfs", "target": "/sandbox"}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[0].target", "/sandbox"),
        ({"mounts": [{"type": "tmpfs", "target": "/opt"}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[0].target", "/opt/openshell"),
        ({"mounts": [{"type": "tmpfs", "target": "/a/../etc/openshell"}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[0].target", "normalised"),
        ({"mounts": [{"type": "tmpfs", "target": "relative"}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[0].target", "absolute"),
        ({"mounts": [{"type": "tmpfs", "target": "/x"}, {"type": "tmpfs", "target": "/x/"}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[1].target", "duplicate"),
        ({"mounts": [{"type": "tmpfs", "target": "/x", "size_bytes": 0}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[0].size_bytes", "positive"),
        ({"mounts": [{"type": "tmpfs", "target": "/x", "size_bytes": 1.5}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[0].size_bytes", "positive"),
        ({"mounts": [{"type": "tmpfs", "target": "/x", "mode": 0o10000}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[0].mode", "mode"),
        ({"mounts": [{"type": "tmpfs", "target": "/x", "source": "/y"}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[0]", "source"),
        ({"mounts": [{"type": "nfs", "target": "/x"}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[0].type", "tmpfs"),
        ({"mounts": [{"type": "volume", "source": "../etc", "target": "/x"}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[0].source", "volume"),
        ({"mounts": [{"type": "volume", "source": "v", "target": "/x", "read_only": "yes"}]}, InvalidArgument,
         "sandbox.spec.template.driver_config.mounts[0].read_only", "boolean"),
        ({"cdi_devices": ["nvidia.com/gpu=0", "nvidia.com/gpu=0"]}, InvalidArgument,
         "sandbox.spec.template.driver_config.cdi_devices", "duplicate"),
        ({"cdi_devices": ["nvidia.com/gpu=0"]}, InvalidArgument,
         "sandbox.spec.template.driver_config.cdi_devices", "gpu request"),
    ],
)
def test_driver_config_rejections(cfg: dict[str, Any], error: type[Exception], field: str, needle: str) -> None:
    """Each bad driver_config entry is rejected with its path and the reason."""
    with pytest.raises(error) as exc:
        spec.validate(with_driver_config(cfg), Settings(allow_driver_config=True))
    message = exc.value.message  # type: ignore[attr-defined]
    assert message.startswith(field + ":"), message
    assert needle in message


def test_gpu_count_zero_is_invalid() -> None:
    """An explicit zero-GPU request is a contradiction."""
    sandbox = make_sandbox(resource_requirements=pb.ResourceRequirements(gpu=pb.GpuResourceRequirements(count=0)))
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(sandbox, Settings())
    assert exc.value.message.startswith("sandbox.spec.resource_requirements.gpu.count:")


def test_gpu_count_must_match_cdi_devices() -> None:
    """Explicit CDI devices are used as is, and their number must equal the GPU count."""
    sandbox = with_driver_config({"cdi_devices": ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]})
    sandbox.spec.resource_requirements.gpu.count = 2
    plan = spec.validate(sandbox, Settings(allow_driver_config=True))
    assert plan.cdi_devices == ("nvidia.com/gpu=0", "nvidia.com/gpu=1")
    assert build(plan, Settings(
            ))["devices"] == [{"path": "nvidia.com/gpu=0"}, {"path": "nvidia.com/gpu=1"}]
    sandbox.spec.resource_requirements.gpu.count = 1
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(sandbox, Settings(allow_driver_config=True))
    assert exc.value.message.startswith("sandbox.spec.resource_requirements.gpu.count:")


@pytest.mark.parametrize(("gpu", "count"), [(None, 0), (pb.GpuResourceRequirements(), 1),
                                            (pb.GpuResourceRequirements(count=3), 3)])
def test_plain_gpu_request_is_left_to_create(gpu: pb.GpuResourceRequirements | None, count: int) -> None:
    """Validation allocates nothing: a gpu request without cdi_devices becomes a count that the
    driver serves from its CDI inventory at create (no count: one GPU); no devices yet."""
    requirements = pb.ResourceRequirements(gpu=gpu) if gpu is not None else pb.ResourceRequirements()
    plan = spec.validate(make_sandbox(resource_requirements=requirements), Settings())
    assert (plan.gpu_count, plan.cdi_devices) == (count, ())
    assert "devices" not in build(plan, Settings())


@pytest.mark.parametrize("device", ["/dev/nvidia0", "nvidia.com/gpu", "nvidia.com/gpu=0,1", "nvidia.com/gpu=-0"])
def test_explicit_cdi_devices_must_be_cdi_names(device: str) -> None:
    """Upstream's check: a host path or a malformed selector is not a CDI device."""
    sandbox = with_driver_config({"cdi_devices": [device]})
    sandbox.spec.resource_requirements.gpu.count = 1
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(sandbox, Settings(allow_driver_config=True))
    assert exc.value.message.startswith("sandbox.spec.template.driver_config.cdi_devices: must contain CDI "
                                        "qualified names (<vendor>/<class>=<name>)")


# ---------------------------------------------------------------- intent


def test_intent_round_trip_without_secrets() -> None:
    """The recorded intent decodes to the request minus token, launch auth and status."""
    sandbox = make_sandbox(sandbox_token=TOKEN, launch_authentication=b"launch-secret", command=["python", "app.py"])
    sandbox.status.name = "observed"
    digest, intent = spec.encode_intent(sandbox)
    decoded = spec.decode_intent(intent)
    assert decoded.spec.sandbox_token == "" and decoded.spec.launch_authentication == b""
    assert not decoded.HasField("status")
    assert list(decoded.spec.command) == ["python", "app.py"]
    assert (decoded.id, decoded.name, decoded.workspace) == ("abc123", "demo", "ws")
    raw = base64.b64decode(intent)
    assert TOKEN.encode() not in raw and b"launch-secret" not in raw
    assert spec.encode_intent(decoded) == (digest, intent)


def test_intent_ignores_secrets_but_not_content() -> None:
    """Rotating a token must not look like a changed request; changing the command must."""
    base = spec.encode_intent(make_sandbox(command=["a"]))
    assert spec.encode_intent(make_sandbox(command=["a"], sandbox_token=TOKEN)) == base
    assert spec.encode_intent(make_sandbox(command=["a"], launch_authentication=b"x")) == base
    changed = spec.encode_intent(make_sandbox(command=["b"]))
    assert changed[0] != base[0] and changed[1] != base[1]
    plan_a = spec.validate(make_sandbox(command=["a"], sandbox_token=TOKEN), Settings())
    plan_b = spec.validate(make_sandbox(command=["a"], sandbox_token=TOKEN + "x"), Settings())
    assert plan_a.spec_hash == plan_b.spec_hash == base[0]
    assert spec.intent_labels(plan_a, "inst1")[names.INTENT] == base[1]


# ---------------------------------------------------------------- the pair's specs


@pytest.fixture
def token_plan() -> Plan:
    tpl = pb.DriverSandboxTemplate(
        environment={"OPENSHELL_ENDPOINT": "evil", "LD_PRELOAD": "x", "APP_MODE": "dev"},
        labels={names.MANAGED: "false", names.OWNER: "mallory", names.SANDBOX_ID: "other", "team": "blue"},
    )
    return spec.validate(make_sandbox(template=tpl, sandbox_token=TOKEN, environment={"APP_MODE": "prod"}), Settings(
            ))


def test_container_spec_identity_and_labels(token_plan: Plan) -> None:
    """The workload runs the runtime as its identity, and managed labels cannot be overridden by the template."""
    built = build(token_plan, Settings())
    assert built["name"] == "openshell-ws--demo-abc123"
    assert built["entrypoint"] == [names.RUNTIME_BIN]
    assert built["user"] == "1000:1000"
    labels = built["labels"]
    assert labels[names.MANAGED] == "true"
    assert labels[names.OWNER] == "podmand"
    assert labels[names.SANDBOX_ID] == "abc123"
    assert labels[names.SANDBOX_NAME] == "demo"
    assert labels[names.SANDBOX_WORKSPACE] == "ws"
    assert labels[names.SPEC_HASH] == token_plan.spec_hash
    assert labels["team"] == "blue"


def test_user_env_reaches_the_supervisor_only_as_json(token_plan: Plan) -> None:
    """None of the caller's variables is in the supervisor's environment (the workload's
    processes get them from bootstrap.json); OPENSHELL_USER_ENVIRONMENT carries them all, for
    its SSH sessions, and podmand's own values win. No token travels there, nor the sandbox_token."""
    env = supervisor(token_plan, Settings())["env"]
    assert TOKEN not in json.dumps(env)
    assert "APP_MODE" not in env and "LD_PRELOAD" not in env
    assert env[names.ENV_ENDPOINT] == "http://127.0.0.1:17670"
    assert json.loads(env[names.ENV_USER_ENV]) == {"APP_MODE": "prod", "LD_PRELOAD": "x", "OPENSHELL_ENDPOINT": "evil"}
    assert build(token_plan, Settings())["env"] == {}


@pytest.mark.parametrize("key", ["OPENSHELL_SUPERVISOR_TOPOLOGY", "LD_AUDIT", "GLIBC_TUNABLES", "MALLOC_ARENA_MAX",
                                 "RUST_LOG", "PYTHONPATH", "BASH_ENV", "ENV", "SSL_CERT_FILE", "HTTPS_PROXY",
                                 "http_proxy", "ALL_PROXY", "no_proxy"])
def test_unsafe_user_env_is_kept_from_the_supervisor(key: str) -> None:
    plan = spec.validate(make_sandbox(environment={key: "x", "SAFE": "y"}), Settings())
    env = supervisor(plan, Settings())["env"]
    assert key not in env and "SAFE" not in env


def test_identity_is_the_supervisors_oci_mode(token_plan: Plan) -> None:
    """The image's raw Config.User and empty UID/GID: a number beside a declaration is a
    fatal conflict for the stock supervisor."""
    env = specs.supervisor_env(token_plan, Settings(), "sandbox", IDENTITY)
    assert (env[names.ENV_IMAGE_USER], env[names.ENV_UID], env[names.ENV_GID]) == ("sandbox", "", "")
    assert env[names.ENV_NETWORK_CAPABILITIES] == "policy-dns-transparent-tcp"
    assert not [k for k in env if k.startswith("OPENSHELL_") and k not in SUPERVISOR_READS]


# Every OPENSHELL_* name podmand may set is one the stock supervisor reads.
SUPERVISOR_READS = {
    names.ENV_LOG_LEVEL, names.ENV_SANDBOX, names.ENV_SANDBOX_ID, names.ENV_ENDPOINT, names.ENV_SSH_SOCKET,
    names.ENV_IMAGE, names.ENV_MAIN_PROCESS, names.ENV_USER_ENV, names.ENV_TELEMETRY, names.ENV_IMAGE_USER,
    names.ENV_UID, names.ENV_GID, names.ENV_TLS_CA, names.ENV_TLS_CERT, names.ENV_TLS_KEY,
    names.ENV_NETWORK_CAPABILITIES, names.ENV_ADMITTED_BACKEND, names.ENV_PROXY_TLS_DIR,
}


@pytest.mark.parametrize(("userns", "uidmap", "limit"), [
    ("auto", [], usernamespace.AUTO_USERNS_SIZE),
    ("auto:size=4096", [], 4096),
    ("private", ["0:100000:500", "500:200000:100"], 600),
    ("private", ["0:100000:500", "700:200000:100"], 500),
    ("host", [], None),
    ("keep-id", [], None),
])
def test_userns_id_limit(userns: str, uidmap: list[str], limit: int | None) -> None:
    settings = Settings(userns=userns, uidmap=uidmap, gidmap=uidmap)
    assert spec.userns_id_limit(settings, userns) == limit


@pytest.mark.parametrize(
    ("userns", "expected"),
    [
        ("auto", {"userns": {"nsmode": "auto"},
                  "idmappings": {"HostUIDMapping": False, "HostGIDMapping": False, "AutoUserNs": True,
                                 "AutoUserNsOpts": {"Size": usernamespace.AUTO_USERNS_SIZE}}}),
        ("auto:size=2048", {"userns": {"nsmode": "auto", "value": "size=2048"},
                            "idmappings": {"HostUIDMapping": False, "HostGIDMapping": False, "AutoUserNs": True,
                                           "AutoUserNsOpts": {"Size": 2048}}}),
        ("host", {"userns": {"nsmode": "host"}}),
        ("keep-id:uid=1000", {"userns": {"nsmode": "keep-id", "value": "uid=1000"}}),
    ],
)
def test_userns_spec(userns: str, expected: dict[str, Any]) -> None:
    """Podman 4.3 needs AutoUserNs in idmappings for nsmode=auto; host has no idmappings."""
    plan = spec.validate(make_sandbox(), Settings(userns=userns))
    built = build(plan, Settings(userns=userns))
    assert {k: built[k] for k in ("userns", "idmappings") if k in built} == expected


def test_private_userns_uses_configured_maps() -> None:
    """userns=private turns the configured uid/gid maps into explicit idmappings."""
    settings = Settings(
            userns="private", uidmap=["0:100000:65536"], gidmap=["0:200000:1000", "1000:300000:1"])
    built = build(spec.validate(make_sandbox(), settings), settings)
    assert built["userns"] == {"nsmode": "private"}
    assert built["idmappings"]["UIDMap"] == [{"container_id": 0, "host_id": 100000, "size": 65536}]
    assert built["idmappings"]["GIDMap"] == [{"container_id": 0, "host_id": 200000, "size": 1000},
                                             {"container_id": 1000, "host_id": 300000, "size": 1}]


def test_the_health_log_is_bounded_by_podmand_itself() -> None:
    """Podman 5.3.0-5.4.1 leaves a libpod create's health log unbounded unless the request
    bounds it (containers/podman#25473): with probes on, the spec carries Podman's own
    defaults under the JSON names its SpecGenerator decodes; with none, neither is sent."""
    plan = spec.validate(make_sandbox(), Settings())
    built = supervisor(plan, Settings(health_check_interval=5))
    assert (built["healthMaxLogCount"], built["healthMaxLogSize"]) == (5, 500)
    assert not {"healthMaxLogCount", "healthMaxLogSize"} & set(supervisor(plan, Settings()))


def test_pids_limit_omitted_when_zero() -> None:
    """pids_limit=0 leaves the runtime default rather than sending a zero limit."""
    plan = spec.validate(make_sandbox(), Settings())
    assert build(plan, Settings())["resource_limits"]["pids"] == {"limit": 2048}
    unlimited = spec.validate(make_sandbox(), Settings(pids_limit=0))
    assert "pids" not in build(unlimited, Settings(pids_limit=0))["resource_limits"]


def test_host_gateway_ip() -> None:
    """The supervisor's: without a gateway IP loopback (it shares the host's network; Podman 4.3.1
    would write "host-gateway" unresolved), with one that; the workload has no network."""
    plan = spec.validate(make_sandbox(), Settings())
    assert supervisor(plan, Settings())["hostadd"] == [
        "host.containers.internal:127.0.0.1", "host.openshell.internal:127.0.0.1"]
    assert "hostadd" not in build(plan, Settings(host_gateway_ip="10.0.2.2"))
    assert supervisor(plan, Settings(host_gateway_ip="10.0.2.2"))["hostadd"] == [
        "host.containers.internal:10.0.2.2", "host.openshell.internal:10.0.2.2"]


def test_main_process_spec() -> None:
    """No command means an interactive login shell; a command carries its own tty and attach flags."""
    env = supervisor(spec.validate(make_sandbox(), Settings()), Settings())["env"]
    default = json.loads(env[names.ENV_MAIN_PROCESS])
    assert default == {"version": 1, "command": ["/bin/bash", "-l"], "tty": True}
    plan = spec.validate(make_sandbox(command=["python", "-m", "app"], await_main_process_attachment=True), Settings(
            ))
    doc = json.loads(envvars.main_process_spec(plan))
    assert doc == {"version": 1, "command": ["python", "-m", "app"], "tty": False,
                   "await_main_process_attachment": True}


def test_tls_files_mounted_and_referenced() -> None:
    """With TLS, the three client files are bind-mounted from the secrets dir into the supervisor,
    and named in its env."""
    settings = Settings(tls_ca="/x/ca.crt", tls_cert="/x/tls.crt", tls_key="/x/tls.key")
    built = supervisor(spec.validate(make_sandbox(), settings), settings)
    assert built["env"][names.ENV_ENDPOINT].startswith("https://")
    for fname, var in (("ca.crt", names.ENV_TLS_CA), ("tls.crt", names.ENV_TLS_CERT), ("tls.key", names.ENV_TLS_KEY)):
        dest = f"{names.TLS_DIR}/{fname}"
        assert built["env"][var] == dest
        (mount,) = [m for m in built["mounts"] if m["destination"] == dest]
        assert mount["source"] == f"{SECRETS_DIR}/{fname}" and "U" in mount["options"]


# ---------------------------------------------------------------- hostile input (issue 9)


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("id", "abc\n", "sandbox.id"),
        ("id", "..", "sandbox.id"),
        ("id", "../../x", "sandbox.id"),
        ("id", "/etc", "sandbox.id"),
        ("name", "demo\n", "sandbox.name"),
        ("workspace", "ws\n", "sandbox.workspace"),
        ("workspace", "w" * 129, "sandbox.workspace"),
        ("spec.environment", {"KEY\n": "x"}, "sandbox.spec.environment"),
        ("spec.environment", {"K" * 257: "x"}, "sandbox.spec.environment"),
    ],
)
def test_names_are_matched_whole(path: str, value: Any, field: str) -> None:
    """Full-match patterns: a trailing newline or a path is not an id, name, workspace or env key."""
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(_set(path, value), Settings())
    assert exc.value.message.startswith(field + ":"), exc.value.message


@pytest.mark.parametrize("value", ["..", ".", "../../x", "/etc", "abc\n", "a/b", "", "x" * 129, "\x00"])
def test_check_name_refuses_paths(value: str) -> None:
    """What every RPC runs on its sandbox_id before touching a file or Podman."""
    with pytest.raises(InvalidArgument) as exc:
        spec.check_name("sandbox_id", value, required=True)
    assert exc.value.message.startswith("sandbox_id:")
    assert len(exc.value.message) < 200  # a huge id is described, not echoed


def test_volume_source_is_matched_whole() -> None:
    sandbox = with_driver_config({"mounts": [{"type": "volume", "source": "data\n", "target": "/data"}]})
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(sandbox, Settings(allow_driver_config=True))
    assert exc.value.message.startswith("sandbox.spec.template.driver_config.mounts[0].source:")


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_driver_config_number_is_invalid(number: float) -> None:
    """NaN and Infinity are not JSON: INVALID_ARGUMENT naming the value's path, not a crash."""
    sandbox = with_driver_config({"mounts": [{"type": "tmpfs", "target": "/x", "size_bytes": 1}]})
    sandbox.spec.template.driver_config["mounts"][0]["size_bytes"] = number
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(sandbox, Settings(allow_driver_config=True))
    assert exc.value.message.startswith("sandbox.spec.template.driver_config.mounts[0].size_bytes:")
    assert "finite" in exc.value.message


def test_unset_driver_config_value_is_invalid() -> None:
    """A Value with no kind set (possible on the wire) is refused, not a crash."""
    sandbox = make_sandbox()
    sandbox.spec.template.driver_config.fields["mounts"].SetInParent()
    sandbox.spec.template.driver_config.fields["mounts"].Clear()
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(sandbox, Settings(allow_driver_config=True))
    assert exc.value.message.startswith("sandbox.spec.template.driver_config")


def test_huge_tmpfs_size_is_invalid() -> None:
    sandbox = with_driver_config({"mounts": [{"type": "tmpfs", "target": "/x", "size_bytes": 1e300}]})
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(sandbox, Settings(allow_driver_config=True))
    assert exc.value.message.startswith("sandbox.spec.template.driver_config.mounts[0].size_bytes:")


def test_image_mounts_become_image_volumes_pinned_by_id() -> None:
    """An image mount reaches Podman as an image volume naming the ID provisioning pulled;
    a sandbox without one sends no image_volumes at all."""
    sandbox = with_driver_config({"mounts": [{"type": "image", "source": "localhost/data:1", "target": "/data"}]})
    sandbox.spec.template.user_namespaces = False
    settings = Settings(allow_driver_config=True, admission_enabled=False, allow_host_userns=True)
    plan = spec.validate(sandbox, settings)
    built = specs.workload_spec(plan, settings, provision(mount_images={"localhost/data:1": "0123abcd"}),
                                rootless=False)
    assert built["image_volumes"] == [{"Source": "0123abcd", "Destination": "/data", "ReadWrite": False}]
    assert "image_volumes" not in build(spec.validate(make_sandbox(), Settings(
            )), Settings())


@pytest.mark.parametrize(
    ("field", "text", "needle"),
    [
        ("cpu_limit", "1025", "maximum of 1024 CPUs"),
        ("cpu_limit", "100000000000000000000", "maximum"),
        ("cpu_limit", "2000000m", "maximum"),
        ("cpu_request", "1e20", "not a CPU quantity"),
        ("cpu_limit", "1" * 65, "not a CPU quantity"),
        ("memory_limit", "8Ei", "maximum of 1Pi"),
        ("memory_limit", "2Pi", "maximum of 1Pi"),
        ("memory_request", "99999999999999999999", "maximum"),
        ("memory_limit", "1" * 65, "not a memory quantity"),
    ],
)
def test_quantities_are_bounded(field: str, text: str, needle: str) -> None:
    """Quantities Podman would refuse later (beyond int64 or any host) fail validation, naming the field."""
    res = pb.DriverResourceRequirements(**{field: text})
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(make_sandbox(template=pb.DriverSandboxTemplate(resources=res)), Settings())
    assert exc.value.message.startswith(f"sandbox.spec.template.resources.{field}:")
    assert needle in exc.value.message


def test_largest_quantities_are_accepted() -> None:
    res = pb.DriverResourceRequirements(cpu_limit="1024", memory_limit="1Pi")
    plan = spec.validate(make_sandbox(template=pb.DriverSandboxTemplate(resources=res)), Settings())
    assert (plan.resources.cpu_quota, plan.resources.memory_limit) == (1024 * 100_000, 2**50)
    assert plan.resources.cpu_quota < 2**63


@pytest.mark.parametrize(
    ("labels", "needle"),
    [
        ({"k" * 254: "v"}, "longer than 253 bytes"),
        ({"big": "<" * 4097}, "longer than 4096 bytes"),
        ({f"k{i}": "v" * 4000 for i in range(17)}, "more than 64 KiB"),
        ({"é" * 127: "v"}, "longer than 253 bytes"),  # bytes, not characters
    ],
)
def test_template_labels_are_bounded(labels: dict[str, str], needle: str) -> None:
    """Labels ride on every Podman event of the container: bounded per key, value and in total."""
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(make_sandbox(template=pb.DriverSandboxTemplate(labels=labels)), Settings())
    assert exc.value.message.startswith("sandbox.spec.template.labels")
    assert needle in exc.value.message


def test_labels_at_the_limits_are_accepted() -> None:
    labels = {"k" * 253: "v" * 4096, **{f"k{i}": "v" * 4000 for i in range(14)}}
    plan = spec.validate(make_sandbox(template=pb.DriverSandboxTemplate(labels=labels)), Settings())
    assert plan.labels == labels


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("/run/openshell/x; touch /pwned", "[A-Za-z0-9._/-]"),
        ("/run/openshell/$(id).sock", "[A-Za-z0-9._/-]"),
        ("/run/openshell/ssh sock", "[A-Za-z0-9._/-]"),
        ("/run/openshell/ssh.sock\n", "[A-Za-z0-9._/-]"),
        ("run/openshell/ssh.sock", "[A-Za-z0-9._/-]"),
        ("@abstract", "[A-Za-z0-9._/-]"),
        ("/run/openshell/../x/ssh.sock", "normalised"),
        ("/run//openshell/ssh.sock", "normalised"),
        ("/run/openshell/./ssh.sock", "normalised"),
        ("/run/openshell/", "normalised"),
        ("/ssh.sock", "dedicated parent"),
        ("/tmp/ssh.sock", "dedicated parent"),
        ("/sandbox/ssh.sock", "dedicated parent"),
        ("/run/ssh.sock", "dedicated parent"),
        ("/var/tmp/ssh.sock", "dedicated parent"),
        ("/dev/shm/ssh.sock", "dedicated parent"),
        ("/etc/openshell/auth/ssh.sock", "dedicated parent"),
        ("/opt/openshell/bin/ssh.sock", "dedicated parent"),
        ("/proc/self/ssh.sock", "dedicated parent"),
        ("/run/openshell/" + "s" * 93, "108 bytes"),
    ],
)
def test_agent_socket_path_is_refused(path: str, needle: str) -> None:
    """The path reaches the healthcheck and the supervisor chmods its parent 0700: only
    plain, normalised paths under 108 bytes with a dedicated parent."""
    sandbox = make_sandbox(template=pb.DriverSandboxTemplate(agent_socket_path=path))
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(sandbox, Settings())
    assert exc.value.message.startswith("sandbox.spec.template.agent_socket_path:")
    assert needle in exc.value.message


@pytest.mark.parametrize("path", ["/run/openshell/ssh.sock", "/run/agent/ssh.sock", "/sandbox/.ssh/agent.sock",
                                  "/run/openshell/" + "s" * 92])
def test_agent_socket_path_accepted(path: str) -> None:
    plan = spec.validate(make_sandbox(template=pb.DriverSandboxTemplate(agent_socket_path=path)), Settings(
            ))
    assert plan.ssh_socket_path == path and len(path.encode()) < 108


def test_bad_configured_socket_path_is_the_operators_problem() -> None:
    """The setting's value goes through the same check, reported as FAILED_PRECONDITION naming the setting."""
    with pytest.raises(FailedPrecondition) as exc:
        spec.validate(make_sandbox(), Settings(ssh_socket_path="/tmp/ssh.sock"))
    setting = "ssh_socket_path (--sandbox-ssh-socket-path / OPENSHELL_SANDBOX_SSH_SOCKET_PATH)"
    assert exc.value.message.startswith(setting + ":")


def test_host_bind_refused_while_admission_is_enabled() -> None:
    """No trusted label resolver for host paths: with admission on, binds are refused even
    when bind mounts are enabled; with admission off they need enable_bind_mounts."""
    sandbox = with_driver_config({"mounts": [{"type": "bind", "source": "/srv", "target": "/srv"}]})
    with pytest.raises(FailedPrecondition) as exc:
        spec.validate(sandbox, Settings(allow_driver_config=True, enable_bind_mounts=True))
    assert exc.value.message == (
        "sandbox.spec.template.driver_config.mounts[0]: host bind or image mount cannot be attached while "
        "resource admission is enabled: no trusted label resolver"
    )
    with pytest.raises(FailedPrecondition) as exc:
        spec.validate(sandbox, Settings(allow_driver_config=True, admission_enabled=False))
    assert "enable_bind_mounts" in exc.value.message


@pytest.mark.parametrize("image", [
    "ghcr.io/nvidia/openshell-community/sandboxes/base:latest", "localhost/podmand-test/sandbox:1", "busybox",
    "localhost:5000/x/y:tag", "quay.io/a_b/c__d:v1.2-rc", "sha256:" + "b" * 64,
    "docker.io/library/alpine:3.19@sha256:" + "a" * 64,
])
def test_image_references_accepted(image: str) -> None:
    assert spec.validate(make_sandbox(template=pb.DriverSandboxTemplate(image=image)), Settings(
            )).image == image


@pytest.mark.parametrize("image", ["::::", "/abs/path", "a b", "x:", "x@sha256:zz", "a//b", "-a", "a\n", "a" * 2000])
def test_malformed_image_reference_is_invalid(image: str) -> None:
    """A reference Podman would only refuse at pull time is refused up front."""
    with pytest.raises(InvalidArgument, match=r"^sandbox\.spec\.template\.image: .* is not an image reference"):
        spec.validate(make_sandbox(template=pb.DriverSandboxTemplate(image=image)), Settings())


def test_the_launch_bundle_is_required_and_must_be_this_sandboxs() -> None:
    """A create needs the gateway's launch bundle (FAILED_PRECONDITION without it, contract §2.1);
    its runtime generation is the plan's, and its gateway token must name this sandbox. A
    sandbox_token beside it is not read (a bad one is not refused); a recorded request,
    whose bundle is not part of the record, needs none."""
    plan = spec.validate(make_sandbox(launch_authentication=make_launch("abc123", "g0000000000000002")), Settings())
    assert plan.generation == "g0000000000000002"
    assert spec.validate(make_sandbox(sandbox_token="not a token"), Settings()).generation == "g0000000000000001"
    with pytest.raises(FailedPrecondition, match=r"^sandbox\.spec\.launch_authentication: required"):
        spec.validate(make_sandbox(launch_authentication=b""), Settings())
    assert spec.validate(make_sandbox(launch_authentication=b""), Settings(), recorded=True).generation == "0"
    with pytest.raises(FailedPrecondition,
                       match=r"^sandbox\.spec\.launch_authentication\.supervisor\.gateway_token: "):
        spec.validate(make_sandbox(launch_authentication=make_launch("other", "g0000000000000001")), Settings())


def test_workspace_volume_and_workdir_follow_the_image() -> None:
    """The volume goes where provisioning chose (the image's WorkingDir), the supervisor gets it as
    --workdir and starts at / itself."""
    plan = spec.validate(make_sandbox(), Settings())
    prov = provision(workspace="/workspace/project")
    built = specs.workload_spec(plan, Settings(), prov, rootless=False)
    assert built["volumes"][0] == {"Name": plan.volume_name, "Dest": "/workspace/project", "Options": ["rw"]}
    sup = specs.supervisor_spec(plan, Settings(), prov, supervisor_image_id="sha256:5e1f")
    assert sup["command"][:2] == ["--workdir", "/workspace/project"]
    assert sup["work_dir"] == "/"
    assert supervisor(plan, Settings())["command"][:2] == ["--workdir", "/sandbox"]
