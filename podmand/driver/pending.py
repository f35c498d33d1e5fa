"""A sandbox with no container yet: provisioning, failed, or stopped early."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .._proto import compute_driver_pb2 as pb
from ..sandbox import snapshots
from ..sandbox.plan import Plan
from ..sandbox.snapshots import Condition

# The stop marker of a sandbox stopped before it had a container.
STOPPED_EARLY = "-"
STOPPED_EARLY_MESSAGE = "Sandbox was stopped before its container started"


class ProvisionFailed(Exception):
    """A terminal provisioning failure, shown as Ready=False with this reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class Pending:
    plan: Plan
    instance: str
    ready: Condition
    stopped: bool = False
    task: asyncio.Task[None] | None = None
    # The container create Podman was last sent: it finishes even if provisioning is cancelled.
    creating: asyncio.Future[tuple[str, list[str]]] | None = None

    def snapshot(self) -> pb.DriverSandbox:
        p = self.plan
        return snapshots.pending(p.sandbox_id, p.name, p.workspace, p.container_name, self.ready, stopped=self.stopped)
