"""Sandbox request validation and the libpod container spec, as pure functions.

``validate`` turns a ``DriverSandbox`` into a :class:`Plan` or raises an error
naming the offending field, the request's size as recorded included (the
intent label, :func:`encode_intent`); ``container_spec`` turns a plan plus what
provisioning resolved (image ID, paths) into the SpecGenerator JSON. Their
parts live beside them: single-field checks in ``requestchecks``, the container
environment in ``sandboxenv``, podmand's own mounts in ``sandboxmounts`` and the
user namespace in ``usernamespace``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..config import Settings
from ..errors import DriverError, FailedPrecondition, InvalidArgument
from ..libpod import versions
from ..libpod.versions import Features
from ..names import is_image_reference
from ..security import tokens
from . import cdi, driverconfig, envvars, imagechecks, ownmounts, proxy, requestchecks, rootfs, usernamespace
from .identity import Resolved
from .plan import Plan, Provision
from .resources import resources

CAP_ADD = ["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "SYSLOG", "DAC_READ_SEARCH", "SETPCAP"]
# Upstream also drops KILL; podmand keeps it: the supervisor (root) forwards the
# stop signal to a workload running as another uid, which needs CAP_KILL, or
# every stop waits out stop_timeout and ends in SIGKILL.
CAP_DROP = ["DAC_OVERRIDE", "FSETID", "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SYS_CHROOT"]
STOP_SIGNAL = 15  # the only signal the supervisor (PID 1) handles
# The health log's bounds, Podman's own defaults (libpod/define/healthchecks.go:61-64 at v5.3.0),
# sent because Podman 5.3.0-5.4.1 gives a libpod create that leaves them out no bound at all
# (podmanversion.HEALTH_LOG_UNBOUNDED): podmand's probe every health_check_interval would grow
# the log without end. Older Podman has no such fields and drops them (its create decodes with
# encoding/json, unknown fields ignored: pkg/api/handlers/libpod/containers_create.go:38 at v4.3.1).
HEALTH_MAX_LOG_COUNT = 5
HEALTH_MAX_LOG_SIZE = 500
MAX_TOKEN_BYTES = 64 * 1024


def check_name(where: str, value: str, *, required: bool) -> None:
    """Ids, names and workspaces: they become file names, container and volume
    names and label filters, so the whole value must match."""
    if not value:
        if required:
            raise InvalidArgument(f"{where}: is required")
        return
    if not names.is_id(value):
        raise InvalidArgument(
            f"{where}: {requestchecks.shown(value)} must be 1-{names.MAX_ID} characters of [a-zA-Z0-9._-] "
            "starting with a letter or digit"
        )


def _gpu(sandbox: pb.DriverSandbox, devices: tuple[str, ...]) -> tuple[tuple[str, ...], int]:
    """(explicit CDI devices, how many GPUs podmand assigns itself at create)."""
    requirements = sandbox.spec.resource_requirements
    gpu = requirements.gpu if requirements.HasField("gpu") else None
    count = cdi.requested_count(gpu, "sandbox.spec.resource_requirements.gpu.count")
    if devices:
        cdi.check_explicit(devices, count, "sandbox.spec.template.driver_config.cdi_devices")
        return devices, 0
    return (), count or 0


def gateway_token(spec: pb.DriverSandboxSpec) -> str:
    """The token the supervisor presents to the gateway: ``sandbox_token``, else the
    launch bundle's ``gateway_token`` (the rest of the bundle is for split-topology
    supervisors, which this single-container layout does not run)."""
    if spec.sandbox_token.strip() or not spec.launch_authentication:
        return spec.sandbox_token.strip()
    where = "sandbox.spec.launch_authentication"
    return tokens.decode_launch_authentication(spec.launch_authentication, where).supervisor.gateway_token


def launch_bundle(
    raw: bytes, sandbox_id: str, where: str, refuse: type[DriverError] = InvalidArgument
) -> tokens.LaunchAuthentication:
    """The gateway's launch bundle, decoded strictly and validated, and this sandbox's: its
    gateway token names ``sandbox_id``. Otherwise ``refuse`` naming ``where`` (the split
    topology's create and start answer FailedPrecondition, contract §2.1)."""
    bundle = tokens.decode_launch_authentication(raw, where, refuse=refuse)
    try:
        tokens.check_sandbox_token(bundle.supervisor.gateway_token, sandbox_id,
                                   where=f"{where}.supervisor.gateway_token")
    except InvalidArgument as exc:
        raise refuse(exc.message) from None
    return bundle


def strip_secrets(sandbox: pb.DriverSandbox) -> pb.DriverSandbox:
    clean = pb.DriverSandbox()
    clean.CopyFrom(sandbox)
    clean.ClearField("status")
    clean.spec.ClearField("sandbox_token")
    clean.spec.ClearField("launch_authentication")
    return clean


def encode_intent(sandbox: pb.DriverSandbox) -> tuple[str, str]:
    """(spec hash, base64 intent) of the request without its secrets."""
    blob = strip_secrets(sandbox).SerializeToString(deterministic=True)
    return hashlib.sha256(blob).hexdigest(), base64.b64encode(blob).decode()


def decode_intent(intent: str) -> pb.DriverSandbox:
    sandbox = pb.DriverSandbox()
    sandbox.ParseFromString(base64.b64decode(intent))
    return sandbox


def validate(
    sandbox: pb.DriverSandbox | None,
    settings: Settings,
    *,
    podman: Features = versions.UNKNOWN,
    recorded: bool = False,
) -> Plan:
    """Check everything that can be checked without allocating anything.

    ``podman``: what the connected Podman supports (podmanversion.py; unknown: only
    what every Podman podmand runs on does). ``recorded``: a request read back from
    Podman, whose secrets were checked when it arrived and are not part of the record."""
    if sandbox is None:
        raise InvalidArgument("sandbox: is required")
    check_name("sandbox.id", sandbox.id, required=True)
    check_name("sandbox.name", sandbox.name, required=True)
    check_name("sandbox.workspace", sandbox.workspace, required=False)
    cname = names.container_name(sandbox.workspace, sandbox.name, sandbox.id)
    if len(cname) > 255:
        raise InvalidArgument(f"sandbox.name: container name {cname!r} exceeds 255 characters")
    if not sandbox.HasField("spec"):
        raise InvalidArgument("sandbox.spec: is required")
    spec, tpl = sandbox.spec, sandbox.spec.template
    # A sandbox from a rootfs tar runs the image imported from it; template.image (the
    # gateway fills in its default) is not used then.
    from_tar = tpl.HasField("driver_config") and rootfs.KEY in tpl.driver_config.fields
    image = rootfs.reference(sandbox.id) if from_tar else tpl.image or settings.sandbox_image
    if not image:
        raise FailedPrecondition(
            "sandbox.spec.template.image: no sandbox image configured; set OPENSHELL_SANDBOX_IMAGE "
            "or give an image in the sandbox template"
        )
    if not is_image_reference(image):
        raise InvalidArgument(f"sandbox.spec.template.image: {requestchecks.shown(image)} is not an image reference")
    if not from_tar and (why := imagechecks.reference_refusal(image)):
        raise InvalidArgument(f"sandbox.spec.template.image: {why}")
    requestchecks.check_text("sandbox.spec.log_level", spec.log_level)
    user_env = requestchecks.environment(
        ("sandbox.spec.template.environment", tpl.environment), ("sandbox.spec.environment", spec.environment)
    )
    labels = requestchecks.bounded_labels("sandbox.spec.template.labels", tpl.labels)
    command = requestchecks.command("sandbox.spec.command", spec.command)
    if tpl.agent_socket_path:
        ssh_socket = requestchecks.check_socket_path("sandbox.spec.template.agent_socket_path", tpl.agent_socket_path)
    else:  # the operator's setting: a bad one is a server-side problem
        where = "ssh_socket_path (--sandbox-ssh-socket-path / OPENSHELL_SANDBOX_SSH_SOCKET_PATH)"
        ssh_socket = requestchecks.check_socket_path(where, settings.ssh_socket_path, FailedPrecondition)
    split = settings.topology == "split"
    token = "" if split else spec.sandbox_token.strip()  # split: the supervisor's bearer is auth.json's
    if token:
        if len(token) > MAX_TOKEN_BYTES:
            raise InvalidArgument("sandbox.spec.sandbox_token: longer than 64 KiB")
        tokens.check_sandbox_token(token, sandbox.id)
    generation = "0"
    if spec.launch_authentication:
        bundle = launch_bundle(spec.launch_authentication, sandbox.id, "sandbox.spec.launch_authentication",
                               FailedPrecondition if split else InvalidArgument)
        generation = bundle.supervisor.runtime_generation
        if not token and not split:
            token = bundle.supervisor.gateway_token
    elif split and not recorded:
        raise FailedPrecondition(
            "sandbox.spec.launch_authentication: required (OpenShell 0.1.x's Sandbox Protocol: the supervisor's "
            "credentials and the workload's bootstrap come from it)"
        )
    elif settings.require_launch_auth and not recorded:
        raise FailedPrecondition("sandbox.spec.launch_authentication: podmand is configured to require it")
    requestchecks.check_text("sandbox.spec.workload_identity.user", spec.workload_identity.user)
    requestchecks.check_text("sandbox.spec.workload_identity.group", spec.workload_identity.group)
    userns = usernamespace.mode(tpl, settings)
    limits = resources(tpl.resources, settings)
    cfg = driverconfig.parse(tpl, settings, userns=userns, control_paths=(ssh_socket,), podman=podman)
    if cfg.userns and userns == "host" and settings.userns_base != "host":
        raise InvalidArgument(f"{usernamespace.WHERE}: conflicts with sandbox.spec.template.user_namespaces: false")
    userns = cfg.userns or userns
    devices, gpu_count = _gpu(sandbox, cfg.cdi_devices)
    spec_hash, intent = encode_intent(sandbox)
    if len(intent) > requestchecks.MAX_RECORD:  # the volume label that records the create
        requestchecks.check_record("sandbox", strip_secrets(sandbox), len(intent))
    return Plan(
        sandbox_id=sandbox.id,
        name=sandbox.name,
        workspace=sandbox.workspace,
        image=image,
        log_level=spec.log_level,
        user_env=user_env,
        labels=labels,
        command=command,
        tty=spec.tty,
        await_attach=spec.await_main_process_attachment,
        ssh_socket_path=ssh_socket,
        resources=limits,
        userns=userns,
        mounts=cfg.mounts,
        cdi_devices=devices,
        gpu_count=gpu_count,
        driver_config_used=cfg.used,
        rootfs_tar=cfg.rootfs_tar,
        spec_hash=spec_hash,
        intent=intent,
        has_token=bool(token),
        generation=generation,
        workload_user=spec.workload_identity.user.strip(),
        workload_group=spec.workload_identity.group.strip(),
    )


# ---------------------------------------------------------------- building


def identity_label(identity: Resolved) -> str:
    doc = {
        "uid": identity.uid,
        "gid": identity.gid,
        "groups": list(identity.supplementary),
        "source": identity.source,
        "digest": identity.digest,
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def filtered_user_env(plan: Plan) -> list[str]:
    """Keys of the caller's environment that stay out of the container environment
    (they still reach SSH sessions through OPENSHELL_USER_ENVIRONMENT)."""
    return sorted(k for k, v in plan.user_env.items() if envvars.caller_env_held_back(k, v))


def container_labels(plan: Plan, instance: str = "", identity: Resolved | None = None) -> dict[str, str]:
    labels = dict(plan.labels)
    labels.update(dict.fromkeys(names.READ_LABELS, ""))  # none from the template or the image
    labels.update(
        {
            names.MANAGED: "true",
            names.OWNER: names.OWNER_VALUE,
            names.SANDBOX_ID: plan.sandbox_id,
            names.SANDBOX_NAME: plan.name,
            names.SANDBOX_NAMESPACE: "",
            names.SANDBOX_WORKSPACE: plan.workspace,
            names.DRIVER_CONFIG_USED: "true" if plan.driver_config_used else "false",
            names.SPEC_HASH: plan.spec_hash,
            names.INSTANCE: instance,
            names.IDENTITY: identity_label(identity) if identity else "",
        }
    )
    return labels


def intent_labels(plan: Plan, instance: str, state_dir: str = "") -> dict[str, str]:
    """Labels of the workspace volume: the durable record of a create request."""
    return {
        names.OWNER: names.OWNER_VALUE,
        names.SANDBOX_ID: plan.sandbox_id,
        names.SANDBOX_WORKSPACE: plan.workspace,
        names.SPEC_HASH: plan.spec_hash,
        names.HAS_TOKEN: "true" if plan.has_token else "false",
        names.INSTANCE: instance,
        names.STATE_DIR: state_dir,
        names.INTENT: plan.intent,
        **({names.ROOTFS_IMAGE: plan.image} if plan.rootfs_tar else {}),
    }


def userns_id_limit(settings: Settings, mode: str, podman: Features = versions.UNKNOWN) -> int | None:
    """Container ids ``< limit`` exist in the sandbox's user namespace (None: not known
    here). The supervisor's setuid/setgid to any other id fails with EINVAL."""
    return usernamespace.id_limit(mode, settings, podman)


def health_probe(ssh_socket_path: str) -> list[str]:
    """Exec form: the shell only joins two tests with ``||``; the paths reach it
    as arguments, never as script text (and the socket path is validated too)."""
    script = 'test -e "$1" || test -S "$2"'
    return ["CMD", "/bin/sh", "-c", script, "probe", names.SSH_READY_MARKER, ssh_socket_path]


def container_spec(plan: Plan, settings: Settings, prov: Provision) -> dict[str, Any]:
    """The libpod SpecGenerator for one sandbox container (V1 single-container layout)."""
    mounts = ownmounts.own_mounts(plan, settings, prov)
    volumes: list[dict[str, Any]] = [{"Name": plan.volume_name, "Dest": prov.workspace, "Options": ["rw"]}]
    caller = driverconfig.libpod_mounts(plan.mounts, prov.mount_images)
    mounts += caller.mounts
    volumes += caller.volumes
    hosts = ["host.openshell.internal"]
    if settings.host_gateway_ip:
        hosts.insert(0, "host.containers.internal")
    hostadd = [f"{h}:{settings.host_gateway_ip or 'host-gateway'}" for h in hosts]
    limits: dict[str, Any] = plan.resources.libpod()
    if settings.pids_limit:
        limits["pids"] = {"limit": settings.pids_limit}
    spec: dict[str, Any] = {
        "name": plan.container_name,
        "hostname": f"sandbox-{plan.name}"[:63],
        "image": prov.image_id,
        "labels": container_labels(plan, prov.instance, prov.identity),
        "entrypoint": [names.SUPERVISOR_BIN],
        "command": ["--workdir", prov.workspace, *proxy.supervisor_args(settings)],
        "work_dir": "/",  # the supervisor starts at /: an image workdir is its to check (workspace.py)
        "user": "0:0",
        "cap_add": CAP_ADD,
        "cap_drop": CAP_DROP,
        "no_new_privileges": True,
        "seccomp_profile_path": "unconfined",
        "env": envvars.sandbox_env(plan, settings, image_user=prov.image_user),
        "unsetenv": envvars.unsafe_image_env(prov.image_env),
        "mounts": mounts,
        "volumes": volumes,
        **({"image_volumes": caller.image_volumes} if caller.image_volumes else {}),
        "netns": {"nsmode": "bridge"},
        "Networks": {prov.network: {}},
        "hostadd": hostadd,
        "stop_signal": STOP_SIGNAL,
        "stop_timeout": settings.stop_timeout,
        "resource_limits": limits,
        **usernamespace.libpod(plan.userns, settings),
    }
    if settings.health_check_interval:
        spec["healthconfig"] = {
            "Test": health_probe(plan.ssh_socket_path),
            "Interval": settings.health_check_interval * 10**9,
            "Timeout": 2 * 10**9,
            "Retries": 10,
            "StartPeriod": 0,
        }
        spec["healthMaxLogCount"] = HEALTH_MAX_LOG_COUNT  # pkg/specgen/specgen.go:606-609 at v5.3.0
        spec["healthMaxLogSize"] = HEALTH_MAX_LOG_SIZE
    if plan.cdi_devices:
        spec["devices"] = [{"path": d} for d in plan.cdi_devices]
    return spec
