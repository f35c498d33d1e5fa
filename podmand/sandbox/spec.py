"""Sandbox request validation and the labels of what a sandbox is made of, as pure functions.

``validate`` turns a ``DriverSandbox`` into a :class:`Plan` or raises an error
naming the offending field, the request's size as recorded included (the
intent label, :func:`encode_intent`); :func:`container_labels` and
:func:`intent_labels` are the labels its containers and its workspace volume carry
(the containers' specs are ``pair.specs``'). Single-field checks live beside it in
``requestchecks``, the user namespace in ``usernamespace``.
"""

from __future__ import annotations

import base64
import hashlib
import json

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..config import Settings
from ..errors import FailedPrecondition, InvalidArgument
from ..libpod import versions
from ..libpod.versions import Features
from ..names import is_image_reference
from ..security import tokens
from . import cdi, driverconfig, imagechecks, requestchecks, rootfs, usernamespace
from .identity import Resolved
from .plan import Plan
from .resources import applicable, resources


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


def launch_bundle(raw: bytes, sandbox_id: str, where: str) -> tokens.LaunchAuthentication:
    """The gateway's launch bundle, decoded strictly and validated, and this sandbox's: its
    gateway token names ``sandbox_id``. Otherwise FailedPrecondition naming ``where`` (a
    create's and a start's answer, contract §2.1)."""
    bundle = tokens.decode_launch_authentication(raw, where, refuse=FailedPrecondition)
    try:
        tokens.check_sandbox_token(bundle.supervisor.gateway_token, sandbox_id,
                                   where=f"{where}.supervisor.gateway_token")
    except InvalidArgument as exc:
        raise FailedPrecondition(exc.message) from None
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
    # the supervisor's bearer is the launch bundle's (its auth.json): sandbox_token is not used
    generation = "0"
    if spec.launch_authentication:
        generation = launch_bundle(spec.launch_authentication, sandbox.id,
                                   "sandbox.spec.launch_authentication").supervisor.runtime_generation
    elif not recorded:
        raise FailedPrecondition(
            "sandbox.spec.launch_authentication: required (OpenShell 0.1.x's Sandbox Protocol: the supervisor's "
            "credentials and the workload's bootstrap come from it)"
        )
    requestchecks.check_text("sandbox.spec.workload_identity.user", spec.workload_identity.user)
    requestchecks.check_text("sandbox.spec.workload_identity.group", spec.workload_identity.group)
    userns = usernamespace.mode(tpl, settings)
    limits = applicable(resources(tpl.resources, settings), podman.limited)  # only what Podman applies
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
        names.INSTANCE: instance,
        names.STATE_DIR: state_dir,
        names.INTENT: plan.intent,
        **({names.ROOTFS_IMAGE: plan.image} if plan.rootfs_tar else {}),
    }


def userns_id_limit(settings: Settings, mode: str, podman: Features = versions.UNKNOWN) -> int | None:
    """Container ids ``< limit`` exist in the sandbox's user namespace (None: not known
    here). The supervisor's setuid/setgid to any other id fails with EINVAL."""
    return usernamespace.id_limit(mode, settings, podman)
