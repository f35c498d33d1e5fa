"""The environment of a sandbox's supervisor container: podmand's own ``OPENSHELL_*``
variables as the stock supervisor reads them.

None of the caller's variables is among them: the workload's processes get those from
``bootstrap.json``'s child environment (``pair.documents.child_env``), and the
supervisor gets them only as ``OPENSHELL_USER_ENVIRONMENT`` (JSON) for its SSH
sessions. No token file either: the supervisor's bearer is the launch bundle's, in its
``auth.json``. ``pair.specs.supervisor_env`` adds what only the supervisor container needs.
"""

from __future__ import annotations

import json
from typing import Any

from .. import names
from ..config import Settings
from .plan import Plan

DEFAULT_COMMAND = ["/bin/bash", "-l"]


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
    """podmand's variables for the sandbox's supervisor. Identity is the supervisor's OCI
    mode: the image's raw ``Config.User`` and empty UID/GID (a non-empty pair beside it is
    a fatal conflict for the supervisor)."""
    env: dict[str, str] = {}
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
    return env
