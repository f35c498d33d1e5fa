from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NetworkTlsMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NETWORK_TLS_MODE_UNSPECIFIED: _ClassVar[NetworkTlsMode]
    NETWORK_TLS_MODE_SKIP: _ClassVar[NetworkTlsMode]
    NETWORK_TLS_MODE_TERMINATE: _ClassVar[NetworkTlsMode]
    NETWORK_TLS_MODE_PASSTHROUGH: _ClassVar[NetworkTlsMode]

class NetworkEnforcementMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NETWORK_ENFORCEMENT_MODE_UNSPECIFIED: _ClassVar[NetworkEnforcementMode]
    NETWORK_ENFORCEMENT_MODE_ENFORCE: _ClassVar[NetworkEnforcementMode]
    NETWORK_ENFORCEMENT_MODE_AUDIT: _ClassVar[NetworkEnforcementMode]

class NetworkAccessPreset(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NETWORK_ACCESS_PRESET_UNSPECIFIED: _ClassVar[NetworkAccessPreset]
    NETWORK_ACCESS_PRESET_READ_ONLY: _ClassVar[NetworkAccessPreset]
    NETWORK_ACCESS_PRESET_READ_WRITE: _ClassVar[NetworkAccessPreset]
    NETWORK_ACCESS_PRESET_FULL: _ClassVar[NetworkAccessPreset]
NETWORK_TLS_MODE_UNSPECIFIED: NetworkTlsMode
NETWORK_TLS_MODE_SKIP: NetworkTlsMode
NETWORK_TLS_MODE_TERMINATE: NetworkTlsMode
NETWORK_TLS_MODE_PASSTHROUGH: NetworkTlsMode
NETWORK_ENFORCEMENT_MODE_UNSPECIFIED: NetworkEnforcementMode
NETWORK_ENFORCEMENT_MODE_ENFORCE: NetworkEnforcementMode
NETWORK_ENFORCEMENT_MODE_AUDIT: NetworkEnforcementMode
NETWORK_ACCESS_PRESET_UNSPECIFIED: NetworkAccessPreset
NETWORK_ACCESS_PRESET_READ_ONLY: NetworkAccessPreset
NETWORK_ACCESS_PRESET_READ_WRITE: NetworkAccessPreset
NETWORK_ACCESS_PRESET_FULL: NetworkAccessPreset

class SandboxPolicy(_message.Message):
    __slots__ = ("version", "filesystem", "landlock", "process", "network_policies", "network_middlewares")
    class NetworkPoliciesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: NetworkPolicyRule
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[NetworkPolicyRule, _Mapping]] = ...) -> None: ...
    class NetworkMiddlewaresEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: NetworkMiddlewareConfig
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[NetworkMiddlewareConfig, _Mapping]] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FILESYSTEM_FIELD_NUMBER: _ClassVar[int]
    LANDLOCK_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_POLICIES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_MIDDLEWARES_FIELD_NUMBER: _ClassVar[int]
    version: int
    filesystem: FilesystemPolicy
    landlock: LandlockPolicy
    process: ProcessPolicy
    network_policies: _containers.MessageMap[str, NetworkPolicyRule]
    network_middlewares: _containers.MessageMap[str, NetworkMiddlewareConfig]
    def __init__(self, version: _Optional[int] = ..., filesystem: _Optional[_Union[FilesystemPolicy, _Mapping]] = ..., landlock: _Optional[_Union[LandlockPolicy, _Mapping]] = ..., process: _Optional[_Union[ProcessPolicy, _Mapping]] = ..., network_policies: _Optional[_Mapping[str, NetworkPolicyRule]] = ..., network_middlewares: _Optional[_Mapping[str, NetworkMiddlewareConfig]] = ...) -> None: ...

class FilesystemPolicy(_message.Message):
    __slots__ = ("include_workdir", "read_only", "read_write")
    INCLUDE_WORKDIR_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    READ_WRITE_FIELD_NUMBER: _ClassVar[int]
    include_workdir: bool
    read_only: _containers.RepeatedScalarFieldContainer[str]
    read_write: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, include_workdir: _Optional[bool] = ..., read_only: _Optional[_Iterable[str]] = ..., read_write: _Optional[_Iterable[str]] = ...) -> None: ...

class LandlockPolicy(_message.Message):
    __slots__ = ("compatibility",)
    COMPATIBILITY_FIELD_NUMBER: _ClassVar[int]
    compatibility: str
    def __init__(self, compatibility: _Optional[str] = ...) -> None: ...

class ProcessPolicy(_message.Message):
    __slots__ = ("run_as_user", "run_as_group")
    RUN_AS_USER_FIELD_NUMBER: _ClassVar[int]
    RUN_AS_GROUP_FIELD_NUMBER: _ClassVar[int]
    run_as_user: str
    run_as_group: str
    def __init__(self, run_as_user: _Optional[str] = ..., run_as_group: _Optional[str] = ...) -> None: ...

class NetworkPolicyRule(_message.Message):
    __slots__ = ("name", "endpoints", "binaries")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    BINARIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    endpoints: _containers.RepeatedCompositeFieldContainer[NetworkEndpoint]
    binaries: _containers.RepeatedCompositeFieldContainer[NetworkBinary]
    def __init__(self, name: _Optional[str] = ..., endpoints: _Optional[_Iterable[_Union[NetworkEndpoint, _Mapping]]] = ..., binaries: _Optional[_Iterable[_Union[NetworkBinary, _Mapping]]] = ...) -> None: ...

class NetworkMiddlewareConfig(_message.Message):
    __slots__ = ("name", "middleware", "config", "on_error", "endpoints", "order")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MIDDLEWARE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ON_ERROR_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    name: str
    middleware: str
    config: _struct_pb2.Struct
    on_error: str
    endpoints: MiddlewareEndpointSelector
    order: int
    def __init__(self, name: _Optional[str] = ..., middleware: _Optional[str] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., on_error: _Optional[str] = ..., endpoints: _Optional[_Union[MiddlewareEndpointSelector, _Mapping]] = ..., order: _Optional[int] = ...) -> None: ...

class MiddlewareEndpointSelector(_message.Message):
    __slots__ = ("include", "exclude")
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    include: _containers.RepeatedScalarFieldContainer[str]
    exclude: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, include: _Optional[_Iterable[str]] = ..., exclude: _Optional[_Iterable[str]] = ...) -> None: ...

class NetworkCredentialBinding(_message.Message):
    __slots__ = ("provider",)
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    provider: str
    def __init__(self, provider: _Optional[str] = ...) -> None: ...

class NetworkEndpoint(_message.Message):
    __slots__ = ("host", "port", "protocol", "tls", "enforcement", "access", "rules", "allowed_ips", "ports", "deny_rules", "allow_encoded_slash", "persisted_queries", "graphql_persisted_queries", "graphql_max_body_bytes", "path", "websocket_credential_rewrite", "request_body_credential_rewrite", "advisor_proposed", "credential_signing", "signing_service", "signing_region", "json_rpc_max_body_bytes", "mcp", "credential_binding", "allow_uninspected_credentials", "provider_credentialed")
    class GraphqlPersistedQueriesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: GraphqlOperation
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[GraphqlOperation, _Mapping]] = ...) -> None: ...
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    ENFORCEMENT_FIELD_NUMBER: _ClassVar[int]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_IPS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    DENY_RULES_FIELD_NUMBER: _ClassVar[int]
    ALLOW_ENCODED_SLASH_FIELD_NUMBER: _ClassVar[int]
    PERSISTED_QUERIES_FIELD_NUMBER: _ClassVar[int]
    GRAPHQL_PERSISTED_QUERIES_FIELD_NUMBER: _ClassVar[int]
    GRAPHQL_MAX_BODY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    WEBSOCKET_CREDENTIAL_REWRITE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_BODY_CREDENTIAL_REWRITE_FIELD_NUMBER: _ClassVar[int]
    ADVISOR_PROPOSED_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_SIGNING_FIELD_NUMBER: _ClassVar[int]
    SIGNING_SERVICE_FIELD_NUMBER: _ClassVar[int]
    SIGNING_REGION_FIELD_NUMBER: _ClassVar[int]
    JSON_RPC_MAX_BODY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MCP_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_BINDING_FIELD_NUMBER: _ClassVar[int]
    ALLOW_UNINSPECTED_CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_CREDENTIALED_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: int
    protocol: str
    tls: NetworkTlsMode
    enforcement: NetworkEnforcementMode
    access: NetworkAccessPreset
    rules: _containers.RepeatedCompositeFieldContainer[L7Rule]
    allowed_ips: _containers.RepeatedScalarFieldContainer[str]
    ports: _containers.RepeatedScalarFieldContainer[int]
    deny_rules: _containers.RepeatedCompositeFieldContainer[L7DenyRule]
    allow_encoded_slash: bool
    persisted_queries: str
    graphql_persisted_queries: _containers.MessageMap[str, GraphqlOperation]
    graphql_max_body_bytes: int
    path: str
    websocket_credential_rewrite: bool
    request_body_credential_rewrite: bool
    advisor_proposed: bool
    credential_signing: str
    signing_service: str
    signing_region: str
    json_rpc_max_body_bytes: int
    mcp: McpOptions
    credential_binding: NetworkCredentialBinding
    allow_uninspected_credentials: bool
    provider_credentialed: bool
    def __init__(self, host: _Optional[str] = ..., port: _Optional[int] = ..., protocol: _Optional[str] = ..., tls: _Optional[_Union[NetworkTlsMode, str]] = ..., enforcement: _Optional[_Union[NetworkEnforcementMode, str]] = ..., access: _Optional[_Union[NetworkAccessPreset, str]] = ..., rules: _Optional[_Iterable[_Union[L7Rule, _Mapping]]] = ..., allowed_ips: _Optional[_Iterable[str]] = ..., ports: _Optional[_Iterable[int]] = ..., deny_rules: _Optional[_Iterable[_Union[L7DenyRule, _Mapping]]] = ..., allow_encoded_slash: _Optional[bool] = ..., persisted_queries: _Optional[str] = ..., graphql_persisted_queries: _Optional[_Mapping[str, GraphqlOperation]] = ..., graphql_max_body_bytes: _Optional[int] = ..., path: _Optional[str] = ..., websocket_credential_rewrite: _Optional[bool] = ..., request_body_credential_rewrite: _Optional[bool] = ..., advisor_proposed: _Optional[bool] = ..., credential_signing: _Optional[str] = ..., signing_service: _Optional[str] = ..., signing_region: _Optional[str] = ..., json_rpc_max_body_bytes: _Optional[int] = ..., mcp: _Optional[_Union[McpOptions, _Mapping]] = ..., credential_binding: _Optional[_Union[NetworkCredentialBinding, _Mapping]] = ..., allow_uninspected_credentials: _Optional[bool] = ..., provider_credentialed: _Optional[bool] = ...) -> None: ...

class McpOptions(_message.Message):
    __slots__ = ("strict_tool_names", "allow_all_known_mcp_methods", "versions")
    STRICT_TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    ALLOW_ALL_KNOWN_MCP_METHODS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    strict_tool_names: bool
    allow_all_known_mcp_methods: bool
    versions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, strict_tool_names: _Optional[bool] = ..., allow_all_known_mcp_methods: _Optional[bool] = ..., versions: _Optional[_Iterable[str]] = ...) -> None: ...

class GraphqlOperation(_message.Message):
    __slots__ = ("operation_type", "operation_name", "fields")
    OPERATION_TYPE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_NAME_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    operation_type: str
    operation_name: str
    fields: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, operation_type: _Optional[str] = ..., operation_name: _Optional[str] = ..., fields: _Optional[_Iterable[str]] = ...) -> None: ...

class L7Rule(_message.Message):
    __slots__ = ("allow",)
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    allow: L7Allow
    def __init__(self, allow: _Optional[_Union[L7Allow, _Mapping]] = ...) -> None: ...

class L7Allow(_message.Message):
    __slots__ = ("method", "path", "command", "query", "operation_type", "operation_name", "fields", "params")
    class QueryEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: L7QueryMatcher
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[L7QueryMatcher, _Mapping]] = ...) -> None: ...
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: L7QueryMatcher
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[L7QueryMatcher, _Mapping]] = ...) -> None: ...
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    OPERATION_TYPE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_NAME_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    method: str
    path: str
    command: str
    query: _containers.MessageMap[str, L7QueryMatcher]
    operation_type: str
    operation_name: str
    fields: _containers.RepeatedScalarFieldContainer[str]
    params: _containers.MessageMap[str, L7QueryMatcher]
    def __init__(self, method: _Optional[str] = ..., path: _Optional[str] = ..., command: _Optional[str] = ..., query: _Optional[_Mapping[str, L7QueryMatcher]] = ..., operation_type: _Optional[str] = ..., operation_name: _Optional[str] = ..., fields: _Optional[_Iterable[str]] = ..., params: _Optional[_Mapping[str, L7QueryMatcher]] = ...) -> None: ...

class L7DenyRule(_message.Message):
    __slots__ = ("method", "path", "command", "query", "operation_type", "operation_name", "fields", "params")
    class QueryEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: L7QueryMatcher
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[L7QueryMatcher, _Mapping]] = ...) -> None: ...
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: L7QueryMatcher
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[L7QueryMatcher, _Mapping]] = ...) -> None: ...
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    OPERATION_TYPE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_NAME_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    method: str
    path: str
    command: str
    query: _containers.MessageMap[str, L7QueryMatcher]
    operation_type: str
    operation_name: str
    fields: _containers.RepeatedScalarFieldContainer[str]
    params: _containers.MessageMap[str, L7QueryMatcher]
    def __init__(self, method: _Optional[str] = ..., path: _Optional[str] = ..., command: _Optional[str] = ..., query: _Optional[_Mapping[str, L7QueryMatcher]] = ..., operation_type: _Optional[str] = ..., operation_name: _Optional[str] = ..., fields: _Optional[_Iterable[str]] = ..., params: _Optional[_Mapping[str, L7QueryMatcher]] = ...) -> None: ...

class L7QueryMatcher(_message.Message):
    __slots__ = ("glob", "any")
    GLOB_FIELD_NUMBER: _ClassVar[int]
    ANY_FIELD_NUMBER: _ClassVar[int]
    glob: str
    any: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, glob: _Optional[str] = ..., any: _Optional[_Iterable[str]] = ...) -> None: ...

class NetworkBinary(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...
