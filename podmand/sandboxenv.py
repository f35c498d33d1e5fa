"""The sandbox container's environment, as the stock supervisor reads it, and the
variables kept out of it (they could steer the root supervisor or the loader)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from . import names
from .config import Settings

if TYPE_CHECKING:
    from .spec import Plan

DEFAULT_COMMAND = ["/bin/bash", "-l"]

# Environment that must not reach the root supervisor from the image or the
# caller: anything claiming to configure OpenShell, loader and allocator knobs,
# Rust runtime knobs of the (Rust) supervisor, interpreter start-up hooks, the
# trust roots of root-side TLS, and proxy settings (the supervisor's own HTTP
# clients, which carry injected provider credentials, would follow them; it sets
# the main process's proxy variables itself).
_UNSAFE_ENV = re.compile(
    r"^(OPENSHELL_.*|LD_.*|GLIBC_TUNABLES|MALLOC_.*|RUST_.*|PYTHON(PATH|STARTUP|HOME)|BASH_ENV|ENV"
    r"|SSL_CERT_(FILE|DIR)|(?i:(HTTPS?|ALL|NO|FTP)_PROXY))$"
)


def unsafe_env_key(key: str) -> bool:
    """Whether ``key`` is kept out of the supervisor's environment."""
    return bool(_UNSAFE_ENV.match(key))


def unsafe_image_env(image_env: tuple[str, ...]) -> list[str]:
    """Keys of the image's ENV that podmand unsets in the supervisor."""
    return sorted({item.split("=", 1)[0] for item in image_env if unsafe_env_key(item.split("=", 1)[0])})


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
    only), minus those that could steer the root supervisor or the loader.
    Identity is the supervisor's OCI mode: the image's raw ``Config.User`` and
    empty UID/GID (a non-empty pair beside it is a fatal conflict for the
    supervisor). Exactly one token source is set: the gateway's token file, or
    podmand's credential as the exchangeable bootstrap token, which the
    supervisor trades for a gateway JWT via IssueSandboxToken, which the gateway
    checks with AuthenticateSandbox."""
    env = {k: v for k, v in plan.user_env.items() if not unsafe_env_key(k)}
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
