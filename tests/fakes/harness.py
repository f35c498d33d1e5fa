"""An in-process Driver on a fake libpod, in the test's own event loop.

:func:`libpod` is the one place tests build a Podman client for in-process
driver, observer, provisioning and hub tests.  :class:`Containers` is a small
model of sandbox containers (each sandbox's workload and supervisor: what a pair's
create, start, stop and delete ask of Podman) that the fake serves, so those tests
can stage states Podman reaches on its own (an exit, an OOM kill, a container
removed out of band).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.driver import Driver
from podmand.driver.events import EventSink
from podmand.libpod import PodmanClient, times
from podmand.pair import documents
from podmand.watch.hub import Hub
from podmand.watch.inbox import Inbox, Lost
from tests.fakes import filters
from tests.fakes.libpod import FakeLibpod, Feed, Reply, Request, Stream, tar_with


class Sink:
    """An event sink that keeps what it is given (podmand's is the hub's inbox)."""

    def __init__(self) -> None:
        self.events: list[pb.WatchSandboxesEvent] = []
        self.refreshes: list[tuple[str, str]] = []

    def publish(self, event: pb.WatchSandboxesEvent) -> None:
        self.events.append(event)

    def refresh(self, container_id: str, sandbox_id: str, *, started: bool = False) -> None:
        self.refreshes.append((container_id, sandbox_id))

    def reasons(self) -> list[str]:
        """The reasons of the platform events published, in order."""
        return [e.platform_event.event.reason for e in self.events if e.WhichOneof("payload") == "platform_event"]

    def sandbox_reasons(self) -> list[str]:
        """The Ready reasons of the sandbox events published, in order."""
        return [e.sandbox.sandbox.status.conditions[0].reason for e in self.events
                if e.WhichOneof("payload") == "sandbox"]


def name_for(sandbox_id: str, workspace: str = "ws") -> str:
    """The name podmand gives the container of ``labels_for(sandbox_id, workspace)``."""
    return names.container_name(workspace, f"name-{sandbox_id}", sandbox_id)


def labels_for(sandbox_id: str, workspace: str = "ws") -> dict[str, str]:
    return {
        names.MANAGED: "true",
        names.OWNER: names.OWNER_VALUE,
        names.SANDBOX_ID: sandbox_id,
        names.SANDBOX_NAME: f"name-{sandbox_id}",
        names.SANDBOX_WORKSPACE: workspace,
        names.INSTANCE: f"inst-{sandbox_id}",
        names.DRIVER_CONFIG_USED: "false",
    }


class Containers:
    """Sandbox containers as the fake libpod reports them: each sandbox a pair, its workload
    (``<id>-cid…``) and its supervisor (``<id>-sup…``), found by ID or by name as Podman
    finds them. It models every call a pair's create, start, stop and delete makes
    (podmand/pair/lifecycle.py): creates (the workload's network mode from its spec's
    netns, for the outer fence), uploads (``PUT …/archive``, kept by container and path),
    the supervisor's restart metadata read back from what was uploaded, starts, stops and
    waits (a stopped container's wait is answered at once), removals."""

    def __init__(self, fake: FakeLibpod) -> None:
        self.fake = fake
        self.boxes: dict[str, dict[str, Any]] = {}  # container id -> inspect JSON
        self.uploads: dict[str, dict[str, bytes]] = {}  # container id -> destination -> the tar
        self.waits = Feed(fake)  # one line answers every /wait open at that moment
        fake.route("POST", "/containers/create", self.create)
        fake.route("GET", "/containers/json", self._list)
        fake.route("GET", "/containers/(?P<c>[^/]+)/json", self._inspect)
        fake.route("DELETE", "/containers/(?P<c>[^/]+)", self.remove)
        fake.route("POST", "/containers/(?P<c>[^/]+)/wait", self._wait)
        fake.route("POST", "/containers/(?P<c>[^/]+)/stop", lambda req: self._set(req, "exited", running=False))
        fake.route("POST", "/containers/(?P<c>[^/]+)/start", self.start)
        fake.route("PUT", "/containers/(?P<c>[^/]+)/archive", self._upload)
        fake.route("GET", "/containers/(?P<c>[^/]+)/archive", self._download)

    def add(self, sandbox_id: str, status: str = "running", *, exit_code: int = 0, oom: bool = False,
            finished_at: str = "", workspace: str = "ws", role: str = "") -> str:
        """A container of ``sandbox_id`` (the workload, or the supervisor for that ``role``)."""
        supervisor = role == names.ROLE_SUPERVISOR
        cid = f"{sandbox_id}-{'sup' if supervisor else 'cid'}".ljust(64, "0")
        labels = labels_for(sandbox_id, workspace)
        if role:
            labels[names.ISOLATION_ROLE] = role
        self.boxes[cid] = {
            "Id": cid,
            "Name": names.supervisor_name(sandbox_id) if supervisor else name_for(sandbox_id, workspace),
            "Created": "2026-11-29T17:00:00Z",
            "State": {"Status": status, "Running": status == "running", "ExitCode": exit_code, "OOMKilled": oom,
                      "StartedAt": "2026-11-29T17:00:01Z", "FinishedAt": finished_at or "0001-01-01T00:00:00Z"},
            "Config": {"Labels": labels},
            "HostConfig": {"NetworkMode": "host" if supervisor else "none"},
        }
        return cid

    def add_pair(self, sandbox_id: str, status: str = "running", *, workspace: str = "ws") -> str:
        """A pair an earlier podmand made, both containers in ``status``, the supervisor holding
        the restart metadata a start reads back; the workload's ID."""
        cid = self.add(sandbox_id, status, workspace=workspace, role=names.ROLE_WORKLOAD)
        sup = self.add(sandbox_id, status, workspace=workspace, role=names.ROLE_SUPERVISOR)
        meta = documents.RestartMetadata("g0000000000000001", documents.workload_identity(
            1000, 1000, (), "image", "sha256:" + "7e" * 32), {"PATH": "/usr/bin:/bin"})
        self.uploads[sup] = {"/": _tar({names.RESTART_METADATA_PATH.lstrip("/"): msgspec.json.encode(meta)})}
        return cid

    def of(self, sandbox_id: str, role: str = names.ROLE_WORKLOAD) -> str:
        """The ID of ``sandbox_id``'s workload (or supervisor), as made."""
        [cid] = [c for c, box in self.boxes.items() if box["Config"]["Labels"].get(names.SANDBOX_ID) == sandbox_id
                 and box["Config"]["Labels"].get(names.ISOLATION_ROLE) == role]
        return cid

    def create(self, req: Request) -> Reply:
        """A sandbox container joins the model (created, not started); an image reader does not.
        A name in use is refused, as Podman refuses it."""
        spec = req.json()
        labels = spec.get("labels") or {}
        sandbox_id = labels.get(names.SANDBOX_ID)
        if not sandbox_id:
            return 201, {}, {"Id": "reader", "Warnings": []}
        if self._find(spec["name"]) is not None:
            message = f"creating container storage: the container name {spec['name']!r} is already in use"
            return 500, {}, {"cause": "that name is already in use", "message": message, "response": 500}
        cid = self.add(sandbox_id, "created", role=labels.get(names.ISOLATION_ROLE, ""))
        box = self.boxes[cid]
        box["Config"]["Labels"], box["Name"] = labels, spec["name"]
        box["HostConfig"]["NetworkMode"] = (spec.get("netns") or {}).get("nsmode", "")
        box["Mounts"] = [{"Type": "bind", "Source": m["source"], "Destination": m["destination"]}
                         for m in spec.get("mounts") or () if m.get("type") == "bind"]
        return 201, {}, {"Id": cid, "Warnings": []}

    def end(self, cid: str, exit_code: int, *, oom: bool = False) -> None:
        """The container's process ended (Podman's view; no event is sent). Its OOM flag, once
        set, stays set through every later start and end, as Podman keeps it (snapshots.oom_of_this_run)."""
        state = self.boxes[cid]["State"]
        ns = time.time_ns()  # Podman's FinishedAt keeps nanoseconds: no two ends read alike
        now = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns % 10**9:09d}Z"
        state.update(Status="exited", Running=False, ExitCode=exit_code, OOMKilled=state["OOMKilled"] or oom,
                     FinishedAt=now)

    def _find(self, key: str) -> dict[str, Any] | None:
        """A container by ID or by name, as Podman resolves either."""
        box = self.boxes.get(key)
        if box is None:
            box = next((b for b in self.boxes.values() if b["Name"].removeprefix("/") == key), None)
        return box

    @staticmethod
    def _key(req: Request, tail: bool = True) -> str:
        return req.path.rsplit("/", 2)[-2] if tail else req.path.rsplit("/", 1)[-1]

    def _list(self, req: Request) -> Reply:
        wanted = filters.requested(req.query)
        out = []
        for box in self.boxes.values():
            labels = box["Config"]["Labels"]
            if filters.container_kept(wanted, box["Name"], labels, podman6=self.fake.podman6_filters):
                state = box["State"]
                exited_at = max(0, int(times.epoch(state["FinishedAt"]) or 0))  # whole seconds, as Podman
                started_at = max(0, int(times.epoch(state["StartedAt"]) or 0))
                # ``Status``: the health check's status, for a container that has one (pkg/ps/ps.go)
                checked = bool((box["Config"].get("Healthcheck") or {}).get("Test"))
                health = (state.get("Health") or {}).get("Status", "") if checked else ""
                out.append({"Id": box["Id"], "Names": [box["Name"]], "State": state["Status"], "Labels": labels,
                            "Status": health,
                            "ExitCode": state["ExitCode"], "ExitedAt": exited_at, "StartedAt": started_at,
                            "Created": box["Created"]})
        return 200, {}, out

    def _inspect(self, req: Request) -> Reply:
        box = self._find(self._key(req))
        return (200, {}, box) if box else (404, {}, {"message": "no such container"})

    def remove(self, req: Request) -> Reply:
        """A container's removal (a test answering removals its own way may let this do it)."""
        box = self._find(self._key(req, tail=False))
        if box is None:
            return 404, {}, {"message": "no such container"}
        del self.boxes[box["Id"]]
        self.uploads.pop(box["Id"], None)
        return 200, {}, [{"Id": box["Id"]}]

    def start(self, req: Request) -> Reply:
        """A container's start (a test holding starts answers through this once it lets go)."""
        return self._set(req, "running", running=True)

    def _set(self, req: Request, status: str, *, running: bool) -> Reply:
        box = self._find(self._key(req))
        if box is None:
            return 404, {}, {"message": "no such container"}
        box["State"].update(Status=status, Running=running)
        return 204, {}, b""

    def _wait(self, req: Request) -> Reply | Stream:
        """A running container's wait stays open (the test answers it through :attr:`waits`);
        a stopped one's is answered at once with its exit code, as Podman does."""
        box = self._find(self._key(req))
        if box is None:
            return 404, {}, {"message": "no such container"}
        return Stream(self.waits) if box["State"]["Running"] else (200, {}, f"{box['State']['ExitCode']}\n")

    def _upload(self, req: Request) -> Reply:
        box = self._find(self._key(req))
        if box is None:
            return 404, {}, {"message": "no such container"}
        self.uploads.setdefault(box["Id"], {})[req.query["path"]] = req.body
        return 200, {}, b""

    def _download(self, req: Request) -> Reply:
        """A file uploaded earlier, as Podman's archive endpoint sends it (a tar of that one
        file); a container the model does not hold (an image reader) has the runtime binary."""
        box = self._find(self._key(req))
        if box is None:
            return 200, {"Content-Type": "application/x-tar"}, tar_with("openshell-sandbox", b"#!/bin/true\n")
        path = req.query.get("path", "")
        for root, tar in self.uploads.get(box["Id"], {}).items():
            with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
                member = path.removeprefix(root.rstrip("/") + "/") if path.startswith(root.rstrip("/") + "/") else ""
                found = next((m for m in archive.getmembers() if m.name == member and m.isfile()), None)
                if found is not None and (data := archive.extractfile(found)) is not None:
                    return 200, {"Content-Type": "application/x-tar"}, tar_with(path.rsplit("/", 1)[-1], data.read())
        return 404, {}, {"message": f"{path}: no such file or directory"}


def _tar(files: dict[str, bytes]) -> bytes:
    """A tar of ``files`` (path -> content), as podmand uploads them."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@contextlib.asynccontextmanager
async def libpod() -> AsyncIterator[tuple[FakeLibpod, PodmanClient]]:
    """A fake libpod and a client talking to it in memory, through its transport seam
    (no socket: the byte-level door is for tests/faults)."""
    fake = FakeLibpod()
    client = PodmanClient(transport=fake.transport())
    try:
        yield fake, client
    finally:
        await client.close()
        await fake.close()


class HeldCreate:
    """A container create the fake holds until :attr:`release` is set (Podman still making it
    while its caller gives up), and the removal after it: ``seen`` says "made <name>" and
    "removed <name>" in the order Podman carried them out."""

    def __init__(self, fake: FakeLibpod, container_id: str) -> None:
        self.arrived, self.release = asyncio.Event(), asyncio.Event()
        self.seen: list[str] = []

        async def create(req: Request) -> Reply:
            self.arrived.set()
            await self.release.wait()
            self.seen.append(f"made {req.json()['name']}")
            return 201, {}, {"Id": container_id, "Warnings": []}

        def remove(req: Request) -> Reply:
            self.seen.append(f"removed {req.path.rsplit('/', 1)[-1]}")
            return 200, {}, [{"Id": container_id}]

        fake.route("POST", "/containers/create", create)
        fake.route("DELETE", "/containers/[^/]+", remove)


@dataclass
class Rig:
    driver: Driver
    fake: FakeLibpod
    sink: Sink
    boxes: Containers
    tmp: Path


@contextlib.asynccontextmanager
async def driver_on(
    settings: Callable[[Path], Settings] = lambda _tmp: Settings(), sink: EventSink | None = None
) -> AsyncIterator[Rig]:
    """A Driver (state directory set up) on a fake libpod; ``settings`` gets a scratch
    directory; events go to ``sink`` (the hub's inbox) or to a :class:`Sink` (``rig.sink``)."""
    with tempfile.TemporaryDirectory(prefix="pdd-", dir="/tmp") as tmp:
        async with libpod() as (fake, client):
            recorder = Sink()
            driver = Driver(settings(Path(tmp)), client, Path(tmp) / "state", sink or recorder)
            driver.files.setup()
            try:
                yield Rig(driver, fake, recorder, Containers(fake), Path(tmp))
            finally:
                await driver.close()


async def eventually(predicate: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """Yield to the loop until ``predicate()`` is truthy; fail at the deadline naming ``what``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not (value := predicate()):
        if loop.time() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)
    return value


async def settle(hub: Hub, inbox: Inbox) -> None:
    """Handle every inbox message as the hub's loop would, and wait for the looks and
    lists those start, until nothing is left (the hub's loop itself is not run)."""
    while True:
        while (message := inbox.get_nowait()) is not None:
            assert not isinstance(message, Lost), message
            hub._handle(message)
        busy = [*hub.looks._looking.values(), *hub.lists._work]
        if not busy:
            return
        await asyncio.wait(busy)
