"""GetCapabilities: PeerMetadata negotiation and the admission policy string.

The gateway calls GetCapabilities before every validate, create and start and
requires a byte-identical admission string, so the response is built once.
"""

from __future__ import annotations

import re

from . import __version__
from ._proto import compute_driver_pb2 as pb
from ._proto import extension_pb2 as ext
from .config import Settings
from .errors import FailedPrecondition
from .host.enforcement import Limits
from .sandbox import rootfs
from .security import admission

PROTOCOL_MAJOR = 1
PROTOCOL_MINOR = 0
CONTRACT = "openshell.compute.contract"
LAUNCH_AUTHENTICATION = "openshell.compute.launch-authentication"
IMPLEMENTATION_NAME = "podmand/podman"
_CAPABILITY = re.compile(r"^openshell(\.[a-z0-9-]+){2,}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def admission_policy(settings: Settings) -> str:
    """``v1:`` + compact JSON of the policy the driver's admission checks enforce."""
    return admission.policy(settings).wire()


# Each advertised bit is true only when something proves the behaviour; the reason
# and its proof sit next to the value (tests/unit/test_negotiation.py checks them).
# podmand mounts no credential of its own into a sandbox: the supervisor's bearer is the
# launch bundle's gateway token (contract §2.3). So the bit is false, as upstream's: the
# gateway then needs no runtime identity and answers AuthenticateSandbox itself, never
# calling the driver (contract §1.2); podmand's AuthenticateSandbox answers UNIMPLEMENTED.
SANDBOX_AUTHENTICATION = False
# GPU bits follow the CDI inventory as it is at each call (cdi.py; re-read at each create too):
# with selectable NVIDIA devices podmand picks them for a plain gpu.count or a gpu request with
# no count (tests/e2e/test_resources.py::test_gpu_count_assigns_cdi_devices); with none, both
# are refused (FAILED_PRECONDITION), so both bits are false. Explicit driver_config.cdi_devices
# work either way and are not a selection.
# podmand reports container state, not the supervisor's readiness.
RUNTIME_READINESS = False


def capabilities(
    settings: Settings, *, limits: Limits, gpus_selectable: bool = False
) -> pb.GetCapabilitiesResponse:
    """``limits``: which of the CPU and memory limits Podman applies (enforcement.py: the
    controllers it reports; there is no bit for requests, so none is claimed);
    ``gpus_selectable``: the CDI inventory has devices for a plain GPU request."""
    return pb.GetCapabilitiesResponse(
        driver_name="podman",
        driver_version=__version__,
        default_image=settings.sandbox_image,
        gateway_manages_lifecycle=True,
        supports_sandbox_authentication=SANDBOX_AUTHENTICATION,
        driver_reports_runtime_readiness=RUNTIME_READINESS,
        resource_capabilities=pb.ResourceCapabilities(
            cpu=pb.CpuResourceCapabilities(limit_supported=limits.cpu),
            memory=pb.MemoryResourceCapabilities(limit_supported=limits.memory),
            gpu=pb.GpuResourceCapabilities(
                default_selection_supported=gpus_selectable, count_selection_supported=gpus_selectable
            ),
        ),
        # Only once the staging directory exists (rootfs.prepare_staging): 0 means unsupported.
        rootfs_tar_staging_dir=settings.rootfs_staging_dir if rootfs.enabled(settings) else "",
        rootfs_tar_max_bytes=settings.rootfs_max_bytes if rootfs.enabled(settings) else 0,
        extension=ext.PeerMetadata(
            protocol_version=ext.ProtocolVersion(major=PROTOCOL_MAJOR, minor=PROTOCOL_MINOR),
            implementation_name=IMPLEMENTATION_NAME,
            implementation_version=__version__,
            supported_capabilities=[CONTRACT, LAUNCH_AUTHENTICATION],
            # the bundle is required by refusing a create or start without it (FAILED_PRECONDITION),
            # not by requiring the capability: the contract's §1 item 1, upstream's choice too
            required_capabilities=[CONTRACT],
        ),
        resource_admission_policy=admission_policy(settings),
    )


def with_gpus(response: pb.GetCapabilitiesResponse, selectable: bool) -> pb.GetCapabilitiesResponse:
    """``response`` with its GPU bits set from the current inventory (everything else as built)."""
    gpu = response.resource_capabilities.gpu
    if (gpu.default_selection_supported, gpu.count_selection_supported) == (selectable, selectable):
        return response
    current = pb.GetCapabilitiesResponse()
    current.CopyFrom(response)
    current.resource_capabilities.gpu.default_selection_supported = selectable
    current.resource_capabilities.gpu.count_selection_supported = selectable
    return current


def check_gateway(request: pb.GetCapabilitiesRequest, ours: ext.PeerMetadata) -> None:
    """Reject a gateway we cannot work with (FAILED_PRECONDITION, saying why)."""
    if not request.HasField("gateway"):
        raise FailedPrecondition("gateway did not provide protocol metadata; upgrade the gateway and podmand together")
    gw = request.gateway
    if not gw.HasField("protocol_version"):
        raise FailedPrecondition("gateway metadata has no protocol_version")
    if gw.protocol_version.major != PROTOCOL_MAJOR:
        raise FailedPrecondition(
            f"gateway uses unsupported protocol {gw.protocol_version.major}.{gw.protocol_version.minor}; "
            f"podmand supports {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}"
        )
    for field in ("implementation_name", "implementation_version"):
        value = getattr(gw, field)
        if not value.strip() or len(value.encode()) > 128 or _CONTROL.search(value):
            raise FailedPrecondition(f"gateway.{field}: must be 1-128 bytes without control characters")
    for field in ("supported_capabilities", "required_capabilities"):
        values = list(getattr(gw, field))
        if len(values) > 128 or len(set(values)) != len(values):
            raise FailedPrecondition(f"gateway.{field}: at most 128 entries without duplicates")
        for value in values:
            if len(value) > 128 or not _CAPABILITY.match(value):
                raise FailedPrecondition(f"gateway.{field}: {value!r} is not a valid capability name")
    missing = sorted(set(gw.required_capabilities) - set(ours.supported_capabilities))
    if missing:
        raise FailedPrecondition(f"gateway requires capabilities podmand does not support: {', '.join(missing)}")
    unmet = sorted(set(ours.required_capabilities) - set(gw.supported_capabilities))
    if unmet:
        raise FailedPrecondition(f"gateway is missing capabilities required by podmand: {', '.join(unmet)}")
