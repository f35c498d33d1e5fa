"""A sandbox request as provisioning carries it: the checked ``Plan`` and what
provisioning resolved for it (``Provision``), plain data.

Its own module because the spec builder and the pieces it composes (envvars,
ownmounts) all read it: none of them may import another to get it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import names
from .driverconfig import Mount
from .identity import Resolved
from .resources import Resources


@dataclass(frozen=True)
class Plan:
    """A validated sandbox request: everything provisioning needs, secrets apart."""

    sandbox_id: str
    name: str
    workspace: str
    image: str
    log_level: str
    user_env: dict[str, str]
    labels: dict[str, str]
    command: list[str]
    tty: bool
    await_attach: bool
    ssh_socket_path: str
    resources: Resources
    userns: str
    mounts: tuple[Mount, ...] = ()
    cdi_devices: tuple[str, ...] = ()
    gpu_count: int = 0  # GPUs podmand assigns from its CDI inventory at create (none given explicitly)
    driver_config_used: bool = False
    spec_hash: str = ""
    intent: str = ""
    generation: str = "0"
    workload_user: str = ""
    workload_group: str = ""
    rootfs_tar: str = ""  # staged rootfs tar to import as ``image`` (rootfs.py)

    @property
    def container_name(self) -> str:
        return names.container_name(self.workspace, self.name, self.sandbox_id)

    @property
    def volume_name(self) -> str:
        return names.volume_name(self.sandbox_id)



@dataclass(frozen=True)
class Provision:
    """What provisioning resolved for a plan."""

    image_id: str
    image_user: str
    image_env: tuple[str, ...]
    network: str
    supervisor_path: str
    secrets_dir: str
    instance: str
    identity: Resolved
    selinux: bool = False  # label podmand's own bind mounts for SELinux (see selinux.py)
    workspace: str = names.WORKSPACE_PATH  # the workspace volume's path and --workdir (workspace.py)
    mount_images: dict[str, str] = field(default_factory=dict)  # image mount reference -> pulled image ID
