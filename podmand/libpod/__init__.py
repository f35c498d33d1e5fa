"""podmand's client for Podman's libpod REST API.

``transport`` says what moves requests (``unixsocket``: HTTP/1.1 over Podman's
socket, framed by ``http1``; ``memory``: in memory, for tests), ``client`` holds
the endpoints, ``models`` the answers' shapes, ``lines`` the newline-delimited
bodies, ``timeouts`` every deadline and ``errors`` the only exceptions that leave
the package. ``versions`` says what each Podman release can do and gets wrong,
``times`` reads the times its API reports; ``routes`` builds request targets and
names their route templates, ``calls`` is the hook an observer of calls (tracing)
plugs into. Import from here. It imports no other
podmand module.
"""

from .client import PodmanClient
from .errors import PodmanError, PodmanUnavailable, PodmanUnreadable
from .memory import MockTransport
from .models import (
    BadEvent,
    ContainerConfig,
    ContainerCreated,
    ContainerInspect,
    ContainerListEntry,
    ContainerState,
    Event,
    EventActor,
    HealthcheckResult,
    HealthConfig,
    HealthState,
    HostConfig,
    HostIDMappings,
    HostInfo,
    HostSecurity,
    IDMap,
    IDMappings,
    ImageConfig,
    ImageImported,
    ImageInspect,
    ImageSummary,
    Info,
    MountPoint,
    NetworkInspect,
    NetworkSettings,
    OCIRuntimeInfo,
    PastaInfo,
    PathStat,
    PullLine,
    StoreInfo,
    VersionInfo,
    VolumeInspect,
    path_stat,
)
from .routes import quote
from .timeouts import Timeouts
from .transport import Request, Response, Streamed, Transport, Upload
from .unixsocket import UnixTransport

__all__ = [
    "BadEvent",
    "ContainerConfig",
    "ContainerCreated",
    "ContainerInspect",
    "ContainerListEntry",
    "ContainerState",
    "Event",
    "EventActor",
    "HealthConfig",
    "HealthState",
    "HealthcheckResult",
    "HostConfig",
    "HostIDMappings",
    "HostInfo",
    "HostSecurity",
    "IDMap",
    "IDMappings",
    "ImageConfig",
    "ImageImported",
    "ImageInspect",
    "ImageSummary",
    "Info",
    "MockTransport",
    "MountPoint",
    "NetworkInspect",
    "NetworkSettings",
    "OCIRuntimeInfo",
    "PastaInfo",
    "PathStat",
    "PodmanClient",
    "PodmanError",
    "PodmanUnavailable",
    "PodmanUnreadable",
    "PullLine",
    "Request",
    "Response",
    "StoreInfo",
    "Streamed",
    "Timeouts",
    "Transport",
    "UnixTransport",
    "Upload",
    "VersionInfo",
    "VolumeInspect",
    "path_stat",
    "quote",
    "times",
    "versions",
]
