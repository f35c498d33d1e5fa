"""The sandbox container's environment, as the stock supervisor reads it, and the
variables kept out of it (they could steer the root supervisor, the root helpers it
runs, or the loader).

What the supervisor honours (NVIDIA/OpenShell at 2f7fb65, read for this module):

* Its own ``OPENSHELL_*`` variables: clap ``env =`` arguments and ``std::env::var``
  reads in ``crates/openshell-sandbox/src/main.rs`` and ``lib.rs``,
  ``crates/openshell-supervisor-process/src/{run,process,identity,log_push}.rs``,
  ``crates/openshell-supervisor-network/src/{opa,run,token_grant,inference_routes}.rs``,
  ``crates/openshell-core/src/{grpc_client,telemetry}.rs``. Several of them switch
  enforcement off (topology, binary identity, local policy files).
* The Rust runtime and the crates it links (``Cargo.lock``): ``RUST_LOG`` through
  tracing's ``EnvFilter::try_from_default_env`` (``openshell-sandbox/src/main.rs``),
  std's ``RUST_BACKTRACE``/``RUST_MIN_STACK``, tokio's ``TOKIO_WORKER_THREADS`` (the
  multi-thread runtime built in ``main.rs``; a bad value panics it), rustls-native-certs
  and openssl-probe's ``SSL_CERT_FILE``/``SSL_CERT_DIR`` (the trust roots of tonic's
  ``tls-native-roots`` and reqwest's ``rustls-tls-native-roots``), and reqwest's system
  proxy (``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, either case): the inference
  router's client (``crates/openshell-router/src/lib.rs``) does not disable it, and it
  carries provider credentials.
* The C library: the binary is static musl or glibc-static
  (``deploy/docker/Dockerfile.supervisor``), and its proxy resolves upstream names with
  ``tokio::net::lookup_host`` (``openshell-supervisor-network/src/proxy.rs``), i.e.
  ``getaddrinfo``, which under glibc follows ``RES_OPTIONS``, ``LOCALDOMAIN`` and
  ``HOSTALIASES``.
* The helpers it runs as root with its own, uncleared environment: the image's
  ``ip``, ``nsenter``, ``nft`` and ``iptables-legacy`` from fixed absolute paths
  (``crates/openshell-supervisor-process/src/netns/mod.rs``), and ``dmesg`` looked up
  through ``PATH`` (``crates/openshell-supervisor-process/src/bypass_monitor/mod.rs``).
  These are ordinary dynamically linked programs of the image, so everything glibc
  refuses for setuid programs (its ``unsecvars.h`` list: ``GCONV_PATH``,
  ``GETCONF_DIR``, ``HOSTALIASES``, ``LD_*``, ``LOCALDOMAIN``, ``LOCPATH``,
  ``MALLOC_TRACE``, ``NIS_PATH``, ``NLSPATH``, ``RESOLV_HOST_CONF``, ``RES_OPTIONS``,
  ``TMPDIR``, ``TZDIR``, and ``GLIBC_TUNABLES``) applies to them here, and so do
  locale and ``TZ`` values that name a file: util-linux's ``nsenter`` and ``dmesg``
  call ``setlocale``, and glibc loads an absolute locale name from that path.
  The caller's ``PATH`` would decide which ``dmesg`` root runs, e.g. one the workload
  wrote into its persistent workspace before a restart.
* Not read at 2f7fb65, held back all the same: ``OTEL_*`` (the workspace's
  OpenTelemetry SDK, ``crates/openshell-otel``, is not linked into the supervisor yet;
  its exporter would follow them to a collector of the caller's choosing),
  ``SSLKEYLOGFILE`` (rustls writes TLS secrets there only when asked to, and nothing
  asks), and interpreter or shell start-up hooks (an image's helper may be a script).

How the user environment reaches the workload
(``openshell-supervisor-process/src/process.rs`` ``spawn_impl``, ``ssh.rs``
``apply_child_env``): the main process inherits the container environment minus the
supervisor-only names, and ``OPENSHELL_USER_ENVIRONMENT`` only suppresses its
HOME/USER/SHELL/TERM defaults; SSH sessions clear their environment and take
``OPENSHELL_USER_ENVIRONMENT`` (minus ``OPENSHELL_*``). So a caller's variable kept
out of the container environment reaches SSH sessions but not the main process, and
the ``EnvironmentFiltered`` platform event names it.

The rule: a caller's variable enters the container environment unless its name is in
one of the families below (which also unset the image's ``ENV`` of the same names), it
is the caller's ``PATH`` (the image's stays: it names the image's own directories, as
trusted as the helpers root runs from them), or it is a locale or ``TZ`` variable whose
value names a file. An exact allow-list of names cannot work here: the main process
sees the caller's variables only through the container environment, and they are
arbitrary application names. The families are broad prefixes where a library owns the
prefix (``LD_``, ``MALLOC_``, ``GLIBC_``, ``RUST_``, ``TOKIO_``, ``SSL``, ``OTEL_``,
``RESOLV_``, ``OPENSHELL_``), so a later member of the family is held back without a
change here.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .. import names
from ..config import Settings
from .plan import Plan

DEFAULT_COMMAND = ["/bin/bash", "-l"]

# Names that never reach the supervisor from the image or the caller (see the module
# docstring for who reads each).
_UNSAFE_ENV = re.compile(
    # OpenShell's own
    r"OPENSHELL_.*"
    # the C library and the loader of the root helpers, and the supervisor's resolver
    r"|LD_.*|GLIBC_.*|MALLOC_.*|MUSL_LOCPATH|GCONV_PATH|GETCONF_DIR|HOSTALIASES|LOCALDOMAIN|LOCPATH"
    r"|NIS_PATH|NLSPATH|RESOLV_.*|RES_OPTIONS|TMPDIR|TZDIR"
    # the Rust runtime
    r"|RUST_.*|TOKIO_.*"
    # trust roots and key logging of root-side TLS
    r"|SSL.*"
    # proxies of the supervisor's HTTP clients (it sets the main process's itself)
    r"|(?i:(HTTPS?|ALL|NO|FTP|GRPC)_PROXY)"
    # telemetry SDK configuration
    r"|OTEL_.*"
    # interpreter and shell start-up hooks
    r"|PYTHON(PATH|STARTUP|HOME|USERBASE)|BASH_ENV|ENV|BASH_FUNC_.*|SHELLOPTS|BASHOPTS|PS4"
    r"|PERL5OPT|PERL5LIB|PERLLIB|PERL5DB|RUBYOPT|RUBYLIB|NODE_OPTIONS|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS"
    r"|JDK_JAVA_OPTIONS"
)
# Held back from the caller only: the image's PATH stays (the main process needs one).
_CALLER_ONLY = frozenset({"PATH"})
_LOCALE = re.compile(r"LANG|LANGUAGE|LC_[A-Z_]+")
_ZONEINFO = "/usr/share/zoneinfo/"
_LOCALTIME = "/etc/localtime"


def unsafe_env_key(key: str) -> bool:
    """Whether ``key`` is kept out of the supervisor's environment, from the image and
    the caller alike."""
    return bool(_UNSAFE_ENV.fullmatch(key))


def names_a_file(key: str, value: str) -> bool:
    """Whether a locale or ``TZ`` variable points glibc at a file of its choosing
    rather than the system's data: a locale name with a ``/`` (glibc loads an absolute
    one from that path), or a ``TZ`` outside the zoneinfo tree and ``/etc/localtime``
    (another absolute path, or a ``..`` component)."""
    if _LOCALE.fullmatch(key):
        return "/" in value
    if key == "TZ":
        zone = value.removeprefix(":")
        outside = zone.startswith("/") and not (zone == _LOCALTIME or zone.startswith(_ZONEINFO))
        return outside or ".." in zone.split("/")
    return False


def caller_env_held_back(key: str, value: str) -> bool:
    """Whether the caller's ``key=value`` stays out of the container environment
    (it still reaches SSH sessions through OPENSHELL_USER_ENVIRONMENT)."""
    return unsafe_env_key(key) or key in _CALLER_ONLY or names_a_file(key, value)


def unsafe_image_env(image_env: tuple[str, ...]) -> list[str]:
    """Keys of the image's ENV that podmand unsets in the supervisor."""
    pairs = (item.partition("=") for item in image_env)
    return sorted({key for key, _, value in pairs if unsafe_env_key(key) or names_a_file(key, value)})


def main_process_spec(plan: Plan) -> str:
    if plan.command:
        doc: dict[str, Any] = {
            "version": 1,
            "command": plan.command,
            "tty": plan.tty,
            "await_main_process_attachment": plan.await_attach,
        }
    else:
        doc = {"version": 1, "command": DEFAULT_COMMAND, "tty": True}
    return json.dumps(doc, separators=(",", ":"))


def sandbox_env(plan: Plan, settings: Settings, *, image_user: str) -> dict[str, str]:
    """The container environment, as the stock supervisor reads it.

    The caller's variables reach the main process through the container
    environment (the supervisor gives OPENSHELL_USER_ENVIRONMENT to SSH sessions
    only), minus those that could steer the root supervisor, its root helpers or
    the loader (``caller_env_held_back``).
    Identity is the supervisor's OCI mode: the image's raw ``Config.User`` and
    empty UID/GID (a non-empty pair beside it is a fatal conflict for the
    supervisor). Exactly one token source is set: the gateway's token file, or
    podmand's credential as the exchangeable bootstrap token, which the
    supervisor trades for a gateway JWT via IssueSandboxToken, which the gateway
    checks with AuthenticateSandbox."""
    env = {k: v for k, v in plan.user_env.items() if not caller_env_held_back(k, v)}
    if plan.log_level:
        env[names.ENV_LOG_LEVEL] = plan.log_level
    if plan.user_env:
        env[names.ENV_USER_ENV] = json.dumps(plan.user_env, separators=(",", ":"), sort_keys=True)
    env.update(
        {
            names.ENV_SANDBOX: plan.name,
            names.ENV_SANDBOX_ID: plan.sandbox_id,
            names.ENV_ENDPOINT: settings.endpoint,
            names.ENV_SSH_SOCKET: plan.ssh_socket_path,
            names.ENV_IMAGE: plan.image,
            names.ENV_MAIN_PROCESS: main_process_spec(plan),
            names.ENV_TELEMETRY: "true" if settings.telemetry_enabled else "false",
            names.ENV_NETWORK_CAPABILITIES: names.NETWORK_CAPABILITIES,
            names.ENV_IMAGE_USER: image_user,
            names.ENV_UID: "",
            names.ENV_GID: "",
        }
    )
    if settings.tls_enabled:
        env[names.ENV_TLS_CA] = f"{names.TLS_DIR}/ca.crt"
        env[names.ENV_TLS_CERT] = f"{names.TLS_DIR}/tls.crt"
        env[names.ENV_TLS_KEY] = f"{names.TLS_DIR}/tls.key"
    if plan.has_token:
        env[names.ENV_TOKEN_FILE] = names.TOKEN_PATH
    else:
        env[names.ENV_BOOTSTRAP_TOKEN_FILE] = names.CREDENTIAL_PATH
    return env
