"""Wire strings shared with the upstream driver and the supervisor.

Labels, resource names, in-container paths and condition reasons are part of
the contract: keep them byte-identical to upstream.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# ---- labels on containers (and, for podmand, on volumes and networks)
MANAGED = "openshell.managed"
SANDBOX_ID = "openshell.ai/sandbox-id"
SANDBOX_NAME = "openshell.ai/sandbox-name"
SANDBOX_NAMESPACE = "openshell.ai/sandbox-namespace"
SANDBOX_WORKSPACE = "openshell.ai/sandbox-workspace"
DRIVER_CONFIG_USED = "openshell.ai/caller-driver-config-used"
# podmand's own: ownership needs more than one public label (GC never trusts one).
OWNER = "io.podmand.owner"
OWNER_VALUE = "podmand"
SPEC_HASH = "io.podmand.spec-hash"
INTENT = "io.podmand.intent"
HAS_TOKEN = "io.podmand.has-token"
STATE_DIR = "io.podmand.state-dir"  # which podmand (by its state directory) recorded an intent
INSTANCE = "io.podmand.instance"  # the stable half of the runtime identity
IDENTITY = "io.podmand.identity"  # resolved workload identity (JSON, no secrets)
ROOTFS_IMAGE = "io.podmand.rootfs-image"  # on the intent volume: the sandbox's imported rootfs (rootfs.py)

MANAGED_FILTER = [f"{MANAGED}=true", f"{OWNER}={OWNER_VALUE}"]
# Every label podmand reads of what it made. Podman copies an image's labels onto each
# container made from it unless the spec sets the key: a container podmand makes sets
# every one of these (its own helpers to a neutral "", see :func:`own_labels`), so no
# image can fill one in, and images that would are refused (:func:`reserved_label`).
READ_LABELS = (
    MANAGED,
    SANDBOX_ID,
    SANDBOX_NAME,
    SANDBOX_NAMESPACE,
    SANDBOX_WORKSPACE,
    DRIVER_CONFIG_USED,
    OWNER,
    SPEC_HASH,
    INTENT,
    HAS_TOKEN,
    STATE_DIR,
    INSTANCE,
    IDENTITY,
    ROOTFS_IMAGE,
)
RESERVED_LABEL_PREFIXES = ("openshell.", "io.podmand.")

# Ids, names and workspaces become file names, resource names and label filters.
ID_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]*")
MAX_ID = 128


def is_id(value: str) -> bool:
    """Whether ``value`` is a whole, safe id (never '.', '..', a path or an empty string)."""
    return len(value) <= MAX_ID and ID_RE.fullmatch(value) is not None

# ---- paths inside the sandbox
SUPERVISOR_BIN = "/opt/openshell/bin/openshell-sandbox"
SUPERVISOR_IN_IMAGE = "/openshell-sandbox"
TOKEN_PATH = "/etc/openshell/auth/sandbox.jwt"
TLS_DIR = "/etc/openshell/tls/client"
WORKSPACE_PATH = "/sandbox"
RESERVED_ROOTS = (
    "/opt/openshell",
    "/etc/openshell",
    "/etc/openshell-tls",
    "/run/openshell",
    "/run/openshell-sidecar",
    "/run/netns",
    "/var/run/netns",
    "/sandbox",
    "/.openshell",  # the split topology's channel (CHANNEL_DIR), and what the supervisor keeps
    "/run/openshell-supervisor-ca",  # the workload runtime installs the supervisor's proxy CA there
    "/etc/resolv.conf",  # the split topology's workload's: the runtime's DNS relay (RESOLV_CONF)
    # The kernel's: a mount there would replace procfs, sysfs or the device nodes
    # under the root supervisor (it reads /proc and /sys/fs/cgroup; GPUs come through CDI).
    "/proc",
    "/sys",
    "/dev",
)

# ---- the split topology (OpenShell 0.1.x's Sandbox Protocol; podmand/pair/): a workload
# container running the sandbox runtime and a supervisor container beside it
ISOLATION_ROLE = "openshell.ai/isolation-role"  # label: ROLE_WORKLOAD or ROLE_SUPERVISOR
ROLE_WORKLOAD = "sandbox"
ROLE_SUPERVISOR = "supervisor"
RUNTIME_BIN = SUPERVISOR_BIN  # the workload's entrypoint: openshell-sandbox, bound read-only
SUPERVISOR_ENTRYPOINT = "/openshell-supervisor"  # in the supervisor image
ISOLATION_BACKEND = "openshell-sandbox"  # the backend name the supervisor admits
CHANNEL_DIR = "/.openshell/channel"  # the channel volume, in the workload
CHANNEL_SANDBOX_DIR = "/.openshell/channel/sandbox"
BOOTSTRAP_PATH = "/.openshell/channel/sandbox/bootstrap.json"
SERVER_CERT_PATH = "/.openshell/channel/sandbox/server.crt"
SERVER_KEY_PATH = "/.openshell/channel/sandbox/server.key"
CONTROL_SOCKET_PATH = "/.openshell/channel/sandbox/control.sock"
SUPERVISOR_DIR = "/.openshell/supervisor"  # in the supervisor's own root filesystem, no volume
RUNTIME_DESCRIPTOR_PATH = "/.openshell/supervisor/runtime-descriptor.json"
AUTH_BUNDLE_PATH = "/.openshell/supervisor/auth.json"
RESTART_METADATA_PATH = "/.openshell/supervisor/restart-metadata.json"
SUPERVISOR_HEALTH_SOCKET = "/run/openshell/supervisor-health.sock"
SUPERVISOR_CA_DIR = "/run/openshell-supervisor-ca"  # the runtime installs the supervisor's proxy CA here
RESOLV_CONF = "/etc/resolv.conf"  # the workload's: the runtime's DNS relay (RESOLVER), the only resolver it has
RESOLVER = "nameserver 127.0.0.53\n"
RESOLVER_FILE = "resolv.conf"  # in the sandbox's state directory
SERVER_NAME_DOMAIN = "openshell.internal"  # the channel's TLS name: sandbox.<session id>.<this>


def supervisor_name(sandbox_id: str) -> str:
    return f"openshell-supervisor-{sandbox_id}"


def channel_volume_name(sandbox_id: str) -> str:
    return f"openshell-channel-{sandbox_id}"


# ---- env names the supervisor reads
ENV_LOG_LEVEL = "OPENSHELL_LOG_LEVEL"
ENV_SANDBOX = "OPENSHELL_SANDBOX"
ENV_SANDBOX_ID = "OPENSHELL_SANDBOX_ID"
ENV_ENDPOINT = "OPENSHELL_ENDPOINT"
ENV_SSH_SOCKET = "OPENSHELL_SSH_SOCKET_PATH"
ENV_IMAGE = "OPENSHELL_CONTAINER_IMAGE"
ENV_MAIN_PROCESS = "OPENSHELL_MAIN_PROCESS_SPEC"
ENV_USER_ENV = "OPENSHELL_USER_ENVIRONMENT"
ENV_TELEMETRY = "OPENSHELL_TELEMETRY_ENABLED"
ENV_IMAGE_USER = "OPENSHELL_OCI_IMAGE_USER"
ENV_UID = "OPENSHELL_SANDBOX_UID"
ENV_GID = "OPENSHELL_SANDBOX_GID"
ENV_NETWORK_CAPABILITIES = "OPENSHELL_NETWORK_RUNTIME_CAPABILITIES"
NETWORK_CAPABILITIES = "policy-dns-transparent-tcp"
ENV_TLS_CA = "OPENSHELL_TLS_CA"
ENV_TLS_CERT = "OPENSHELL_TLS_CERT"
ENV_TLS_KEY = "OPENSHELL_TLS_KEY"
ENV_ADMITTED_BACKEND = "OPENSHELL_ADMITTED_ISOLATION_BACKEND"  # the split topology's supervisor
ENV_PROXY_TLS_DIR = "OPENSHELL_PROXY_TLS_DIR"
PROXY_TLS_DIR = "/run/openshell/proxy-tls"

# ---- condition vocabulary
READY = "Ready"
SUSPENDED = "Suspended"
TRANSIENT_REASONS = frozenset(
    r.lower()
    for r in (
        "ReconcilerError",
        "DependenciesNotReady",
        "SupervisorNotConnected",
        "Starting",
        "ContainerStarting",
        "ContainerCreated",
        "HealthCheckStarting",
        "InspectFailed",
    )
)

# ---- progress metadata for platform events
PROGRESS_ACTIVE_STEP = "openshell.progress.active_step"
PROGRESS_ACTIVE_DETAIL = "openshell.progress.active_detail"
PROGRESS_COMPLETE_STEP = "openshell.progress.complete_step"
PROGRESS_COMPLETE_LABEL = "openshell.progress.complete_label"
STEP_REQUESTING = "requesting_sandbox"
STEP_PULLING = "pulling_image"
STEP_STARTING = "starting_sandbox"


# An OCI image reference as Podman parses it: [domain[:port]/]path[:tag][@digest],
# or a bare image ID. Checked up front so a typo is INVALID_ARGUMENT, not a failed pull.
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_RE = re.compile(
    rf"(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    rf"(?::[0-9]+)?)/)?{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
_IMAGE_ID_RE = re.compile(r"(?:sha256:)?[0-9a-f]{64}")


def is_image_reference(image: str) -> bool:
    return len(image) <= 1024 and bool(_IMAGE_RE.fullmatch(image) or _IMAGE_ID_RE.fullmatch(image))


def runtime_identity(instance: str, generation: str) -> str:
    """Opaque to the gateway: a stable part (the sandbox's container instance)
    and a part that changes with every start."""
    return f"podmand:{instance}/{generation}"


def stable_identity(runtime_identity: str) -> str:
    return runtime_identity.split("/", 1)[0]


def container_name(workspace: str, name: str, sandbox_id: str) -> str:
    return f"openshell-{workspace}--{name}-{sandbox_id}"


def sandbox_of(name: str, labels: Mapping[str, str]) -> str:
    """The sandbox id of a podmand sandbox's container, else "". Labels alone prove
    nothing (an image brings its own): the container must also bear the name
    :func:`container_name` gives for those labels. Podman keeps names unique, and
    only podmand names a container so (and only from a request with that id)."""
    sandbox_id = labels.get(SANDBOX_ID, "")
    if not sandbox_id or labels.get(MANAGED) != "true" or labels.get(OWNER) != OWNER_VALUE:
        return ""
    expected = container_name(labels.get(SANDBOX_WORKSPACE, ""), labels.get(SANDBOX_NAME, ""), sandbox_id)
    return sandbox_id if name.removeprefix("/") == expected else ""


def supervisor_of(name: str, labels: Mapping[str, str]) -> str:
    """The sandbox id of a podmand sandbox's supervisor container (the split topology),
    else "": podmand's labels, the supervisor role and the name :func:`supervisor_name`
    gives for that id (only podmand names a container so)."""
    sandbox_id = labels.get(SANDBOX_ID, "")
    if not sandbox_id or labels.get(MANAGED) != "true" or labels.get(OWNER) != OWNER_VALUE:
        return ""
    if labels.get(ISOLATION_ROLE) != ROLE_SUPERVISOR:
        return ""
    return sandbox_id if name.removeprefix("/") == supervisor_name(sandbox_id) else ""


def own_labels(state_dir: str = "") -> dict[str, str]:
    """Labels of a container podmand makes for itself (an image reader, a probe): every
    label podmand reads is set, to "" but for its owner and state directory, so none
    comes from the image."""
    labels = dict.fromkeys(READ_LABELS, "")
    labels.update({OWNER: OWNER_VALUE, STATE_DIR: state_dir})
    return labels


def reserved_label(labels: Mapping[str, str] | None) -> str | None:
    """The first of an image's labels that uses a prefix reserved for OpenShell and
    podmand (copied onto the sandbox's container, it could pose as another sandbox's)."""
    for key in sorted(labels or {}):
        if key.startswith(RESERVED_LABEL_PREFIXES):
            return key
    return None


def volume_name(sandbox_id: str) -> str:
    return f"openshell-sandbox-{sandbox_id}-workspace"


def network_name(prefix: str, workspace: str) -> str:
    """The gateway's default workspace joins ``prefix`` itself, the network upstream's
    OPENSHELL_NETWORK_NAME names (its fixtures create and join it); every other
    workspace keeps its own isolated ``<prefix>-<workspace>``."""
    return prefix if workspace in ("", "default") else f"{prefix}-{workspace}"
