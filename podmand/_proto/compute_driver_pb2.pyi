import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from . import extension_pb2 as _extension_pb2
from . import options_pb2 as _options_pb2
from . import sandbox_pb2 as _sandbox_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetCapabilitiesRequest(_message.Message):
    __slots__ = ("gateway",)
    GATEWAY_FIELD_NUMBER: _ClassVar[int]
    gateway: _extension_pb2.PeerMetadata
    def __init__(self, gateway: _Optional[_Union[_extension_pb2.PeerMetadata, _Mapping]] = ...) -> None: ...

class GetCapabilitiesResponse(_message.Message):
    __slots__ = ("driver_name", "driver_version", "default_image", "gateway_manages_lifecycle", "supports_sandbox_authentication", "driver_reports_runtime_readiness", "resource_capabilities", "rootfs_tar_staging_dir", "rootfs_tar_max_bytes", "extension", "resource_admission_policy")
    DRIVER_NAME_FIELD_NUMBER: _ClassVar[int]
    DRIVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_IMAGE_FIELD_NUMBER: _ClassVar[int]
    GATEWAY_MANAGES_LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_SANDBOX_AUTHENTICATION_FIELD_NUMBER: _ClassVar[int]
    DRIVER_REPORTS_RUNTIME_READINESS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    ROOTFS_TAR_STAGING_DIR_FIELD_NUMBER: _ClassVar[int]
    ROOTFS_TAR_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXTENSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ADMISSION_POLICY_FIELD_NUMBER: _ClassVar[int]
    driver_name: str
    driver_version: str
    default_image: str
    gateway_manages_lifecycle: bool
    supports_sandbox_authentication: bool
    driver_reports_runtime_readiness: bool
    resource_capabilities: ResourceCapabilities
    rootfs_tar_staging_dir: str
    rootfs_tar_max_bytes: int
    extension: _extension_pb2.PeerMetadata
    resource_admission_policy: str
    def __init__(self, driver_name: _Optional[str] = ..., driver_version: _Optional[str] = ..., default_image: _Optional[str] = ..., gateway_manages_lifecycle: _Optional[bool] = ..., supports_sandbox_authentication: _Optional[bool] = ..., driver_reports_runtime_readiness: _Optional[bool] = ..., resource_capabilities: _Optional[_Union[ResourceCapabilities, _Mapping]] = ..., rootfs_tar_staging_dir: _Optional[str] = ..., rootfs_tar_max_bytes: _Optional[int] = ..., extension: _Optional[_Union[_extension_pb2.PeerMetadata, _Mapping]] = ..., resource_admission_policy: _Optional[str] = ...) -> None: ...

class AuthenticateSandboxRequest(_message.Message):
    __slots__ = ("credential",)
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    credential: str
    def __init__(self, credential: _Optional[str] = ...) -> None: ...

class AuthenticateSandboxResponse(_message.Message):
    __slots__ = ("sandbox_id", "runtime_identity")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    runtime_identity: str
    def __init__(self, sandbox_id: _Optional[str] = ..., runtime_identity: _Optional[str] = ...) -> None: ...

class ResourceCapabilities(_message.Message):
    __slots__ = ("cpu", "memory", "gpu")
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    cpu: CpuResourceCapabilities
    memory: MemoryResourceCapabilities
    gpu: GpuResourceCapabilities
    def __init__(self, cpu: _Optional[_Union[CpuResourceCapabilities, _Mapping]] = ..., memory: _Optional[_Union[MemoryResourceCapabilities, _Mapping]] = ..., gpu: _Optional[_Union[GpuResourceCapabilities, _Mapping]] = ...) -> None: ...

class CpuResourceCapabilities(_message.Message):
    __slots__ = ("limit_supported",)
    LIMIT_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    limit_supported: bool
    def __init__(self, limit_supported: _Optional[bool] = ...) -> None: ...

class MemoryResourceCapabilities(_message.Message):
    __slots__ = ("limit_supported",)
    LIMIT_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    limit_supported: bool
    def __init__(self, limit_supported: _Optional[bool] = ...) -> None: ...

class GpuResourceCapabilities(_message.Message):
    __slots__ = ("default_selection_supported", "count_selection_supported")
    DEFAULT_SELECTION_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    COUNT_SELECTION_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    default_selection_supported: bool
    count_selection_supported: bool
    def __init__(self, default_selection_supported: _Optional[bool] = ..., count_selection_supported: _Optional[bool] = ...) -> None: ...

class DriverSandbox(_message.Message):
    __slots__ = ("id", "name", "namespace", "spec", "status", "workspace")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    namespace: str
    spec: DriverSandboxSpec
    status: DriverSandboxStatus
    workspace: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., namespace: _Optional[str] = ..., spec: _Optional[_Union[DriverSandboxSpec, _Mapping]] = ..., status: _Optional[_Union[DriverSandboxStatus, _Mapping]] = ..., workspace: _Optional[str] = ...) -> None: ...

class DriverSandboxSpec(_message.Message):
    __slots__ = ("log_level", "environment", "template", "policy", "resource_requirements", "sandbox_token", "command", "tty", "await_main_process_attachment", "workload_identity", "launch_authentication")
    class EnvironmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LOG_LEVEL_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_REQUIREMENTS_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_TOKEN_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    AWAIT_MAIN_PROCESS_ATTACHMENT_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_AUTHENTICATION_FIELD_NUMBER: _ClassVar[int]
    log_level: str
    environment: _containers.ScalarMap[str, str]
    template: DriverSandboxTemplate
    policy: _sandbox_pb2.SandboxPolicy
    resource_requirements: ResourceRequirements
    sandbox_token: str
    command: _containers.RepeatedScalarFieldContainer[str]
    tty: bool
    await_main_process_attachment: bool
    workload_identity: WorkloadIdentityRequest
    launch_authentication: bytes
    def __init__(self, log_level: _Optional[str] = ..., environment: _Optional[_Mapping[str, str]] = ..., template: _Optional[_Union[DriverSandboxTemplate, _Mapping]] = ..., policy: _Optional[_Union[_sandbox_pb2.SandboxPolicy, _Mapping]] = ..., resource_requirements: _Optional[_Union[ResourceRequirements, _Mapping]] = ..., sandbox_token: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., tty: _Optional[bool] = ..., await_main_process_attachment: _Optional[bool] = ..., workload_identity: _Optional[_Union[WorkloadIdentityRequest, _Mapping]] = ..., launch_authentication: _Optional[bytes] = ...) -> None: ...

class WorkloadIdentityRequest(_message.Message):
    __slots__ = ("user", "group")
    USER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    user: str
    group: str
    def __init__(self, user: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class ResolvedWorkloadIdentity(_message.Message):
    __slots__ = ("uid", "gid", "supplementary_gids", "source", "resource_digest")
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    SUPPLEMENTARY_GIDS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    uid: int
    gid: int
    supplementary_gids: _containers.RepeatedScalarFieldContainer[int]
    source: str
    resource_digest: str
    def __init__(self, uid: _Optional[int] = ..., gid: _Optional[int] = ..., supplementary_gids: _Optional[_Iterable[int]] = ..., source: _Optional[str] = ..., resource_digest: _Optional[str] = ...) -> None: ...

class DriverFenceEvidence(_message.Message):
    __slots__ = ("generation", "evidence_digest", "resource_claims")
    class ResourceClaimsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_CLAIMS_FIELD_NUMBER: _ClassVar[int]
    generation: str
    evidence_digest: str
    resource_claims: _containers.ScalarMap[str, str]
    def __init__(self, generation: _Optional[str] = ..., evidence_digest: _Optional[str] = ..., resource_claims: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ResourceRequirements(_message.Message):
    __slots__ = ("gpu",)
    GPU_FIELD_NUMBER: _ClassVar[int]
    gpu: GpuResourceRequirements
    def __init__(self, gpu: _Optional[_Union[GpuResourceRequirements, _Mapping]] = ...) -> None: ...

class GpuResourceRequirements(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class DriverSandboxTemplate(_message.Message):
    __slots__ = ("image", "agent_socket_path", "labels", "environment", "resources", "platform_config", "driver_config", "user_namespaces")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class EnvironmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    AGENT_SOCKET_PATH_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DRIVER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    USER_NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    image: str
    agent_socket_path: str
    labels: _containers.ScalarMap[str, str]
    environment: _containers.ScalarMap[str, str]
    resources: DriverResourceRequirements
    platform_config: _struct_pb2.Struct
    driver_config: _struct_pb2.Struct
    user_namespaces: bool
    def __init__(self, image: _Optional[str] = ..., agent_socket_path: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., environment: _Optional[_Mapping[str, str]] = ..., resources: _Optional[_Union[DriverResourceRequirements, _Mapping]] = ..., platform_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., driver_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., user_namespaces: _Optional[bool] = ...) -> None: ...

class DriverResourceRequirements(_message.Message):
    __slots__ = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")
    CPU_REQUEST_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMIT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str
    def __init__(self, cpu_request: _Optional[str] = ..., cpu_limit: _Optional[str] = ..., memory_request: _Optional[str] = ..., memory_limit: _Optional[str] = ...) -> None: ...

class DriverSandboxStatus(_message.Message):
    __slots__ = ("name", "instance_id", "agent_fd", "sandbox_fd", "conditions", "deleting", "resolved_identity", "fence_evidence")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FD_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FD_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    DELETING_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    FENCE_EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    instance_id: str
    agent_fd: str
    sandbox_fd: str
    conditions: _containers.RepeatedCompositeFieldContainer[DriverCondition]
    deleting: bool
    resolved_identity: ResolvedWorkloadIdentity
    fence_evidence: DriverFenceEvidence
    def __init__(self, name: _Optional[str] = ..., instance_id: _Optional[str] = ..., agent_fd: _Optional[str] = ..., sandbox_fd: _Optional[str] = ..., conditions: _Optional[_Iterable[_Union[DriverCondition, _Mapping]]] = ..., deleting: _Optional[bool] = ..., resolved_identity: _Optional[_Union[ResolvedWorkloadIdentity, _Mapping]] = ..., fence_evidence: _Optional[_Union[DriverFenceEvidence, _Mapping]] = ...) -> None: ...

class DriverCondition(_message.Message):
    __slots__ = ("type", "status", "reason", "message", "transition_time")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRANSITION_TIME_FIELD_NUMBER: _ClassVar[int]
    type: str
    status: str
    reason: str
    message: str
    transition_time: _timestamp_pb2.Timestamp
    def __init__(self, type: _Optional[str] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., transition_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DriverPlatformEvent(_message.Message):
    __slots__ = ("event_time", "source", "type", "reason", "message", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    event_time: _timestamp_pb2.Timestamp
    source: str
    type: str
    reason: str
    message: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, event_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., source: _Optional[str] = ..., type: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ValidateSandboxCreateRequest(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: DriverSandbox
    def __init__(self, sandbox: _Optional[_Union[DriverSandbox, _Mapping]] = ...) -> None: ...

class ValidateSandboxCreateResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "name")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    name: str
    def __init__(self, sandbox_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class GetSandboxResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: DriverSandbox
    def __init__(self, sandbox: _Optional[_Union[DriverSandbox, _Mapping]] = ...) -> None: ...

class ListSandboxesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSandboxesResponse(_message.Message):
    __slots__ = ("sandboxes",)
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    sandboxes: _containers.RepeatedCompositeFieldContainer[DriverSandbox]
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[DriverSandbox, _Mapping]]] = ...) -> None: ...

class CreateSandboxRequest(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: DriverSandbox
    def __init__(self, sandbox: _Optional[_Union[DriverSandbox, _Mapping]] = ...) -> None: ...

class CreateSandboxResponse(_message.Message):
    __slots__ = ("runtime_identity",)
    RUNTIME_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    runtime_identity: str
    def __init__(self, runtime_identity: _Optional[str] = ...) -> None: ...

class StopSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "name")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    name: str
    def __init__(self, sandbox_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class StopSandboxResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StartSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "name", "launch_authentication", "generation_id", "expected_runtime_identity")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_AUTHENTICATION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_RUNTIME_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    name: str
    launch_authentication: bytes
    generation_id: str
    expected_runtime_identity: str
    def __init__(self, sandbox_id: _Optional[str] = ..., name: _Optional[str] = ..., launch_authentication: _Optional[bytes] = ..., generation_id: _Optional[str] = ..., expected_runtime_identity: _Optional[str] = ...) -> None: ...

class StartSandboxResponse(_message.Message):
    __slots__ = ("runtime_identity",)
    RUNTIME_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    runtime_identity: str
    def __init__(self, runtime_identity: _Optional[str] = ...) -> None: ...

class DeleteSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "name")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    name: str
    def __init__(self, sandbox_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteSandboxResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class WatchSandboxesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchSandboxesSandboxEvent(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: DriverSandbox
    def __init__(self, sandbox: _Optional[_Union[DriverSandbox, _Mapping]] = ...) -> None: ...

class WatchSandboxesDeletedEvent(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class WatchSandboxesPlatformEvent(_message.Message):
    __slots__ = ("sandbox_id", "event")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    event: DriverPlatformEvent
    def __init__(self, sandbox_id: _Optional[str] = ..., event: _Optional[_Union[DriverPlatformEvent, _Mapping]] = ...) -> None: ...

class WatchSandboxesEvent(_message.Message):
    __slots__ = ("sandbox", "deleted", "platform_event")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_EVENT_FIELD_NUMBER: _ClassVar[int]
    sandbox: WatchSandboxesSandboxEvent
    deleted: WatchSandboxesDeletedEvent
    platform_event: WatchSandboxesPlatformEvent
    def __init__(self, sandbox: _Optional[_Union[WatchSandboxesSandboxEvent, _Mapping]] = ..., deleted: _Optional[_Union[WatchSandboxesDeletedEvent, _Mapping]] = ..., platform_event: _Optional[_Union[WatchSandboxesPlatformEvent, _Mapping]] = ...) -> None: ...

class EnsureWorkspaceRequest(_message.Message):
    __slots__ = ("workspace",)
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: str
    def __init__(self, workspace: _Optional[str] = ...) -> None: ...

class EnsureWorkspaceResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteWorkspaceRequest(_message.Message):
    __slots__ = ("workspace",)
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: str
    def __init__(self, workspace: _Optional[str] = ...) -> None: ...

class DeleteWorkspaceResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
