"""The gRPC servicer: translate requests and errors, delegate to the driver.

The socket accepts before start-up is done (server.py): each RPC waits for what it
needs of it (``Readiness``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from . import logs, names
from ._proto import compute_driver_pb2 as pb
from .driver import Driver
from .errors import DriverError, Unavailable, Unimplemented
from .libpod import PodmanError, PodmanUnavailable, PodmanUnreadable
from .negotiation import check_gateway, with_gpus
from .sandbox import requestchecks
from .watch.hub import Hub
from .watch.streams import End

log = logging.getLogger("podmand.rpc")
T = TypeVar("T")
INTERNAL_MESSAGE = "internal error in podmand; its log has the details"


def status_of(exc: Exception) -> tuple[grpc.StatusCode, str] | None:
    """The status an RPC answers an expected failure with: the one mapping from podmand's
    errors (errors.py) to gRPC. None: a bug, answered INTERNAL with INTERNAL_MESSAGE
    (the exception's text may carry request data, so it stays in the log)."""
    if isinstance(exc, DriverError):
        return exc.code, exc.message
    if isinstance(exc, PodmanUnavailable):
        return grpc.StatusCode.UNAVAILABLE, f"Podman is unavailable: {exc}"
    if isinstance(exc, PodmanError):
        return grpc.StatusCode.INTERNAL, str(exc)
    if isinstance(exc, PodmanUnreadable):
        return grpc.StatusCode.INTERNAL, f"Podman answered something podmand cannot read: {exc}"
    return None


def logged_id(sandbox_id: str) -> str:
    """A request's sandbox id as its RPC line shows it. The line is written before the id
    is checked (the check's refusal is what it reports), so one that is not a valid id is
    escaped and bounded as its error message shows it (``requestchecks.shown``): a
    caller's newline must not start a log line of its own."""
    return sandbox_id if names.is_id(sandbox_id) else requestchecks.shown(sandbox_id)


class Readiness:
    """Start-up as RPCs see it. GetCapabilities waits until the capabilities are known
    (at once when local facts decide them: enforcement.py), ValidateSandboxCreate needs
    nothing more than the driver, every other RPC waits until start-up is done (Podman's
    /info, the state-directory probe, the event stream). A start-up that fails or is
    abandoned answers the waiting RPCs UNAVAILABLE."""

    def __init__(self) -> None:
        self._capabilities: pb.GetCapabilitiesResponse | None = None
        self._known = asyncio.Event()
        self._done = asyncio.Event()
        self._failure = ""

    def advertise(self, capabilities: pb.GetCapabilitiesResponse) -> None:
        self._capabilities = capabilities
        self._known.set()

    def finish(self) -> None:
        self._done.set()

    def abandon(self, why: str) -> None:
        """Start-up ends without serving: release every waiting RPC (no-op once finished)."""
        if not self._done.is_set():
            self._failure = why
            self._known.set()
            self._done.set()

    async def capabilities(self) -> pb.GetCapabilitiesResponse:
        await self._known.wait()
        if self._capabilities is None:
            raise Unavailable(self._failure)
        return self._capabilities

    async def serving(self) -> None:
        await self._done.wait()
        if self._failure:
            raise Unavailable(self._failure)


class ComputeDriverServicer:
    def __init__(self, driver: Driver, hub: Hub, readiness: Readiness) -> None:
        self.driver = driver
        self.hub = hub
        self.readiness = readiness

    async def _run(self, method: str, sandbox_id: str, context: Any, call: Callable[[], Awaitable[T]]) -> T:
        """Run one RPC: a failure answers with ``status_of``'s status; one log line (never
        the request), with the traceback when it was a bug."""
        started = time.monotonic()
        code, message = grpc.StatusCode.OK, ""
        shown = logged_id(sandbox_id) if sandbox_id else None
        unexpected: BaseException | None = None
        try:
            return await call()
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED  # the client went away (or podmand is stopping)
            raise
        except Exception as exc:
            known = status_of(exc)
            if known is None:  # a bug
                known, unexpected = (grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE), exc
            code, message = known
        finally:
            ok = code in (grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.CANCELLED)
            ms = round((time.monotonic() - started) * 1000, 1)
            log.log(
                logging.ERROR if unexpected else logging.INFO if ok else logging.WARNING,
                "rpc=%s sandbox=%s code=%s duration_ms=%.1f%s",
                method,
                shown or "-",
                code.name,
                ms,
                f" error={message!r}" if message else "",
                exc_info=unexpected,
                extra=logs.fields(
                    rpc=method,
                    sandbox=shown,
                    code=code.name,
                    ms=ms,
                    **({"error": message} if message else {}),
                ),
            )
        await context.abort(code, message)
        raise AssertionError("abort returned")  # pragma: no cover

    def _when_ready(self, call: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        """``call`` once start-up is done."""

        async def ready_call() -> T:
            await self.readiness.serving()
            return await call()

        return ready_call

    async def GetCapabilities(self, request: pb.GetCapabilitiesRequest, context: Any) -> pb.GetCapabilitiesResponse:
        async def call() -> pb.GetCapabilitiesResponse:
            capabilities = await self.readiness.capabilities()
            check_gateway(request, capabilities.extension)
            return with_gpus(capabilities, self.driver.gpus.selectable())

        return await self._run("GetCapabilities", "", context, call)

    async def AuthenticateSandbox(
        self, request: pb.AuthenticateSandboxRequest, context: Any
    ) -> pb.AuthenticateSandboxResponse:
        """UNIMPLEMENTED, always: podmand advertises ``supports_sandbox_authentication = false``
        (negotiation.py), so the gateway answers this exchange itself and never calls it
        (Sandbox Protocol contract §1.2, as upstream's Podman driver). podmand mounts no
        credential of its own for it to vouch for: a sandbox's supervisor authenticates with
        the launch bundle's gateway token."""

        async def call() -> pb.AuthenticateSandboxResponse:
            raise Unimplemented(
                "AuthenticateSandbox: podmand issues no sandbox credential of its own (supports_sandbox_authentication "
                "is false): a sandbox's supervisor authenticates with its launch bundle's gateway token"
            )

        return await self._run("AuthenticateSandbox", "", context, call)

    async def ValidateSandboxCreate(
        self, request: pb.ValidateSandboxCreateRequest, context: Any
    ) -> pb.ValidateSandboxCreateResponse:
        async def call() -> pb.ValidateSandboxCreateResponse:
            await self.driver.validate(request.sandbox if request.HasField("sandbox") else None)
            return pb.ValidateSandboxCreateResponse()

        return await self._run("ValidateSandboxCreate", request.sandbox.id, context, call)

    async def CreateSandbox(self, request: pb.CreateSandboxRequest, context: Any) -> pb.CreateSandboxResponse:
        async def call() -> pb.CreateSandboxResponse:
            identity = await self.driver.create(request.sandbox if request.HasField("sandbox") else None)
            return pb.CreateSandboxResponse(runtime_identity=identity)

        return await self._run("CreateSandbox", request.sandbox.id, context, self._when_ready(call))

    async def GetSandbox(self, request: pb.GetSandboxRequest, context: Any) -> pb.GetSandboxResponse:
        async def call() -> pb.GetSandboxResponse:
            return pb.GetSandboxResponse(sandbox=await self.driver.get(request.sandbox_id))

        return await self._run("GetSandbox", request.sandbox_id, context, self._when_ready(call))

    async def ListSandboxes(self, request: pb.ListSandboxesRequest, context: Any) -> pb.ListSandboxesResponse:
        async def call() -> pb.ListSandboxesResponse:
            return pb.ListSandboxesResponse(sandboxes=await self.driver.list_sandboxes())

        return await self._run("ListSandboxes", "", context, self._when_ready(call))

    async def StopSandbox(self, request: pb.StopSandboxRequest, context: Any) -> pb.StopSandboxResponse:
        async def call() -> pb.StopSandboxResponse:
            await self.driver.stop(request.sandbox_id)
            return pb.StopSandboxResponse()

        return await self._run("StopSandbox", request.sandbox_id, context, self._when_ready(call))

    async def StartSandbox(self, request: pb.StartSandboxRequest, context: Any) -> pb.StartSandboxResponse:
        async def call() -> pb.StartSandboxResponse:
            identity = await self.driver.start(
                request.sandbox_id,
                launch_authentication=request.launch_authentication,
                generation_id=request.generation_id,
                expected_runtime_identity=request.expected_runtime_identity,
            )
            return pb.StartSandboxResponse(runtime_identity=identity)

        return await self._run("StartSandbox", request.sandbox_id, context, self._when_ready(call))

    async def DeleteSandbox(self, request: pb.DeleteSandboxRequest, context: Any) -> pb.DeleteSandboxResponse:
        async def call() -> pb.DeleteSandboxResponse:
            return pb.DeleteSandboxResponse(deleted=await self.driver.delete(request.sandbox_id))

        return await self._run("DeleteSandbox", request.sandbox_id, context, self._when_ready(call))

    async def EnsureWorkspace(self, request: pb.EnsureWorkspaceRequest, context: Any) -> pb.EnsureWorkspaceResponse:
        async def call() -> pb.EnsureWorkspaceResponse:
            await self.driver.ensure_workspace(request.workspace)
            return pb.EnsureWorkspaceResponse()

        return await self._run("EnsureWorkspace", "", context, self._when_ready(call))

    async def DeleteWorkspace(self, request: pb.DeleteWorkspaceRequest, context: Any) -> pb.DeleteWorkspaceResponse:
        async def call() -> pb.DeleteWorkspaceResponse:
            await self.driver.delete_workspace(request.workspace)
            return pb.DeleteWorkspaceResponse()

        return await self._run("DeleteWorkspace", "", context, self._when_ready(call))

    async def WatchSandboxes(
        self, request: pb.WatchSandboxesRequest, context: Any
    ) -> AsyncIterator[pb.WatchSandboxesEvent]:
        stream = await self._run("WatchSandboxes", "", context, self._when_ready(self.hub.subscribe))
        try:
            while True:
                item = await stream.get()
                if isinstance(item, End):
                    log.info("rpc=WatchSandboxes ended code=%s message=%r", item.code.name, item.message)
                    await context.abort(item.code, item.message)
                    return
                yield item
        finally:
            self.hub.unsubscribe(stream)
