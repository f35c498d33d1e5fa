"""A scripted libpod, for fault paths and in-process tests of podmand's own code.

Real behaviour is tested against real Podman (tests/e2e); this fake exists to
make Podman misbehave on cue: a 500 mid-create, a dropped event stream, a
pull that never finishes, a socket that accepts and never answers, a server
that goes away.  Defaults are just enough for ``podmand serve`` to start.

Two doors lead to the same routes: a Unix socket (``start``/``start_in_thread``),
for byte-level faults and podmand subprocesses, and :meth:`FakeLibpod.transport`,
a MockTransport answering in memory on the caller's loop (no socket, no thread).

Routes are ``(METHOD, regex on the path without the query)``; the last route
registered wins, so tests override defaults with :meth:`FakeLibpod.route`.
A handler gets a :class:`Request` and returns ``(status, headers, body)``
(body: bytes, str, or anything JSON-encodable) or a :class:`Stream` /
:class:`Hang`.  Handlers may be coroutines.

As Podman's event log does, the fake announces ``create`` and ``remove`` of
podmand's own helper containers (image readers, probes: no sandbox id, so no hub
acts on them) on the container event feed; a sandbox container's events are the
test's to send.  Two switches play Podman versions and hosts whose event streams
say nothing: :attr:`FakeLibpod.late_event_head` and :attr:`FakeLibpod.silent_events`;
two more play Podman 6: :attr:`FakeLibpod.pull_head_hold` and :attr:`FakeLibpod.podman6_filters`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import tarfile
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from podmand import names
from podmand.host import eventproof
from podmand.libpod import MockTransport, Response, Streamed
from podmand.libpod import Request as LibpodRequest
from tests.fakes import filters
from tests.wait import wait_until

PREFIX = r"/v[\d.]+/libpod"
INFO = {  # rootless on cgroup v2 with cpu, io, memory and pids delegated (tests/fakes/infos.py has real ones)
    "host": {"cgroupVersion": "v2", "cgroupManager": "systemd", "cgroupControllers": ["cpu", "io", "memory", "pids"],
             "security": {"rootless": True}},
    "store": {"graphDriverName": "overlay"},
    "version": {"Version": "4.3.1", "APIVersion": "4.3.1"},
}


@dataclass
class Request:
    method: str
    path: str  # without the query, percent-decoded
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Stream:
    """A chunked response whose lines the test pushes through a :class:`Feed`.
    ``late_head``: the answer's head goes out only with the first line (or the end)."""

    feed: Feed
    status: int = 200
    late_head: bool = False


@dataclass
class Hang:
    """Accept the request and never answer (until the fake closes)."""


class Feed:
    """Lines for one or more chunked streams, pushed from the test thread."""

    def __init__(self, fake: FakeLibpod) -> None:
        self._fake = fake
        self._queues: list[asyncio.Queue[bytes | str | None]] = []
        self._backlog: list[bytes | str | None] = []
        self.opened = 0

    def _attach(self) -> asyncio.Queue[bytes | str | None]:
        q: asyncio.Queue[bytes | str | None] = asyncio.Queue()
        for item in self._backlog:
            q.put_nowait(item)
        self._queues.append(q)
        self.opened += 1
        return q

    def _detach(self, q: asyncio.Queue[bytes | str | None]) -> None:
        with contextlib.suppress(ValueError):
            self._queues.remove(q)

    def _put(self, item: bytes | str | None, *, sticky: bool = False) -> None:
        def put() -> None:
            if sticky:
                self._backlog.append(item)
            for q in list(self._queues):
                q.put_nowait(item)

        self._fake.call(put)

    def send(self, line: Any, *, sticky: bool = False) -> None:
        """Send one JSON line to every open stream (``sticky``: and to later ones)."""
        data = line if isinstance(line, bytes) else json.dumps(line).encode()
        self._put(data + b"\n", sticky=sticky)

    def end(self) -> None:
        """Finish every open stream cleanly (terminating zero-length chunk)."""
        self._put(None)

    def drop(self) -> None:
        """Close every open stream's connection between chunks, no terminator."""
        self._put("drop")

    def cut(self) -> None:
        """Close every open stream's connection in the middle of a chunk."""
        self._put("cut")


Reply = tuple[int, dict[str, str], Any]
Handler = Callable[[Request], "Reply | Stream | Hang | Awaitable[Reply | Stream | Hang]"]


@dataclass
class _Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler


def tar_with(name: str, data: bytes) -> bytes:
    """An in-memory tar holding one regular file, as Podman's archive endpoint sends."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass
class FakeLibpod:
    """The fake server.  Runs on its own loop in a thread (``start_in_thread``)
    or on the caller's loop (``await start(path)``)."""

    requests: list[str] = field(default_factory=list)
    bodies: list[tuple[str, bytes]] = field(default_factory=list)
    volumes: dict[str, dict[str, Any]] = field(default_factory=dict)
    connections: int = 0
    disconnects: int = 0

    def __post_init__(self) -> None:
        self._routes: list[_Route] = []
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.path = ""
        self._hangs: set[asyncio.Future[None]] = set()  # in-memory Hang answers
        self._memory_queues: set[asyncio.Queue[bytes | str | None]] = set()  # in-memory streams
        self.events = Feed(self)  # container events (the hub's subscription)
        self.image_events = Feed(self)  # image events (podmand.driver.images)
        # Podman 5.1.0-5.2.x: GET /events sends its 200 head only with the first event it
        # streams (pkg/api/handlers/compat/events.go; containers/podman#23712, fixed in 5.3.0).
        self.late_event_head = False
        # A journald event logger the user cannot read (containers/podman#26910): event
        # streams open (200) and never send a line; ``silent`` is their feed, which nothing
        # feeds (a test may end or drop it).
        self.silent_events = False
        self.silent = Feed(self)
        self._helpers: dict[str, dict[str, Any]] = {}  # announced helper containers, by name and by id
        self.pull_gate: asyncio.Event | None = None  # set => pulls wait for it
        # Podman 6.0 and later: a pull's answer (head and lines) is held until the first blob
        # moves or 5 s have passed (pkg/api/handlers/libpod/images_pull.go:27,181-241 at
        # v6.0.0-rc1). The fake moves no blob, so it holds this many seconds (its own timer,
        # as Podman's), then answers as 6.x does, every line with a ``status``.
        self.pull_head_hold = 0.0
        # Podman 6.0's list filters (tests/fakes/filters.py): /volumes/json ANDs its filter
        # keys (5.8 ORs them) and ``label!`` drops what matches any of its values (5.8: all).
        self.podman6_filters = False
        # Sent on every response, as Podman does; clear it to play a Docker socket.
        self.common_headers: dict[str, str] = {"Api-Version": "1.41", "Libpod-Api-Version": "4.3.1"}
        self._install_defaults()

    # ------------------------------------------------------------ routes

    def route(self, method: str, pattern: str, handler: Handler | Reply) -> None:
        """Add a route; ``pattern`` is a regex for the path after the API prefix
        (or a full path starting with ``/_``).  A plain tuple is a fixed reply."""
        if not callable(handler):
            fixed = handler
            handler = lambda _req: fixed  # noqa: E731
        full = pattern if pattern.startswith("/_") else PREFIX + pattern
        self._routes.append(_Route(method, re.compile(f"^{full}$"), handler))

    def _install_defaults(self) -> None:
        ok: Reply = (200, {}, b"OK")
        self.route("GET", "/_ping", (200, {"Content-Type": "text/plain"}, b"OK"))
        self.route("GET", "/info", (200, {}, INFO))
        self.route("GET", "/containers/json", (200, {}, []))
        self.route("POST", "/containers/create", (201, {}, {"Id": "cid", "Warnings": []}))
        self.route("DELETE", "/containers/[^/]+", (200, {}, [{"Id": "cid"}]))
        self.route("GET", "/containers/[^/]+/archive", (200, {"Content-Type": "application/x-tar"},
                                                       tar_with("openshell-sandbox", b"#!/bin/true\n")))
        # The stat of a path (HEAD: no body): none is there, so none is a symbolic link.
        self.route("HEAD", "/containers/[^/]+/archive", (404, {}, {"message": "no such file or directory"}))
        self.route("GET", "/images/.+/json", (200, {}, {"Id": "sha256:img", "Config": {"User": "1000:1000"}}))
        self.route("POST", "/images/pull", self._pull)
        # No local images: podmand skips its start-up state-dir visibility probe.
        self.route("GET", "/images/json", (200, {}, []))
        self.route("GET", "/events", self._events)
        self.route("GET", "/volumes/json", self._list_volumes)
        self.route("POST", "/volumes/create", self._create_volume)
        self.route("GET", "/volumes/(?P<n>[^/]+)/json", self._inspect_volume)
        self.route("DELETE", "/volumes/(?P<n>[^/]+)", self._remove_volume)
        self.route("GET", "/networks/json", (200, {}, []))
        self.route("POST", "/networks/create", (201, {}, {}))
        self.route("GET", "/networks/[^/]+/json", (404, {}, {"message": "no such network"}))
        self.route("DELETE", "/networks/[^/]+", ok)

    def _events(self, req: Request) -> Stream:
        """A subscription to image events has a feed of its own: a test that ends the
        container event streams leaves it be."""
        types = json.loads(req.query.get("filters") or "{}").get("type") or []
        feed = self.image_events if types == ["image"] else self.events
        return Stream(self.silent if self.silent_events else feed, late_head=self.late_event_head)

    def _announce(self, req: Request, result: Reply | Stream | Hang) -> None:
        """Podman's ``create`` and ``remove`` events of podmand's helper containers, on the
        container event feed, as Podman logs them: the name and labels as attributes."""
        if not isinstance(result, tuple) or result[0] >= 300:
            return
        if req.method == "POST" and req.path.endswith("/containers/create"):
            try:
                spec = req.json()
            except ValueError:
                return
            labels = spec.get("labels") or {}
            if labels.get(names.SANDBOX_ID) or not isinstance(result[2], dict):
                return
            helper = {"ID": result[2].get("Id", ""), "Attributes": {**labels, "name": spec.get("name", "")}}
            self._helpers[helper["Attributes"]["name"]] = self._helpers[helper["ID"]] = helper
            action = "create"
        elif req.method == "DELETE" and req.path.rsplit("/", 2)[-2] == "containers":
            found = self._helpers.get(req.path.rsplit("/", 1)[-1])
            if found is None:
                return
            for key in (found["ID"], found["Attributes"]["name"]):
                self._helpers.pop(key, None)
            helper, action = found, "remove"
        else:
            return
        self.events.send({"Type": "container", "Action": action, "Actor": helper, "timeNano": time.time_ns()})

    async def _pull(self, req: Request) -> Reply:
        if self.pull_gate is not None:
            await self.pull_gate.wait()
        if self.pull_head_hold:
            await asyncio.sleep(self.pull_head_hold)
            reference = req.query.get("reference", "")
            lines = [{"status": "pulling", "stream": text} for text in (
                f"Trying to pull {reference}...\n", "Getting image source signatures\n",
                f"Copying blob sha256:{'ab' * 32}\n", f"Copying config sha256:{'cd' * 32}\n",
                "Writing manifest to image destination\n")]
            lines.append({"status": "success", "images": ["sha256:abc"], "id": "sha256:abc"})
            return 200, {"Transfer-Encoding": "chunked"}, b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        return 200, {"Transfer-Encoding": "chunked"}, b'{"stream":"pulling"}\n{"id":"sha256:abc"}\n'

    def _list_volumes(self, req: Request) -> Reply:
        wanted, podman6 = filters.requested(req.query), self.podman6_filters
        return 200, {}, [v for v in self.volumes.values() if filters.volume_kept(wanted, v, podman6=podman6)]

    def _create_volume(self, req: Request) -> Reply:
        body = req.json()
        if body["Name"] in self.volumes:  # as Podman 4.3.1 says it
            message = f"volume with name {body['Name']} already exists: volume already exists"
            return 500, {}, {"cause": "volume already exists", "message": message, "response": 500}
        self.volumes[body["Name"]] = {"Name": body["Name"], "Labels": body.get("Label") or {}}
        return 201, {}, self.volumes[body["Name"]]

    def _inspect_volume(self, req: Request) -> Reply:
        name = req.path.rsplit("/", 2)[-2]
        if name in self.volumes:
            return 200, {}, self.volumes[name]
        return 404, {}, {"message": "no such volume"}

    def _remove_volume(self, req: Request) -> Reply:
        name = req.path.rsplit("/", 1)[-1]
        if self.volumes.pop(name, None) is None:
            return 404, {}, {"message": "no such volume"}
        return 204, {}, b""

    def block_pulls(self) -> None:
        """Make image pulls wait until :meth:`release_pulls`."""
        self.call(lambda: setattr(self, "pull_gate", asyncio.Event()))

    def release_pulls(self) -> None:
        def release() -> None:
            if self.pull_gate is not None:
                self.pull_gate.set()

        self.call(release)

    # ------------------------------------------------------------ lifecycle

    async def start(self, path: str) -> None:
        self.path = path
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_unix_server(self._serve, path)

    async def close(self) -> None:
        """Stop listening, drop every connection (in-memory ones too) and unlink the socket."""
        for hang in list(self._hangs):
            if not hang.done():
                hang.set_exception(ConnectionResetError("fake libpod closed"))
        for q in list(self._memory_queues):
            q.put_nowait("drop")
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def start_in_thread(self, path: str) -> FakeLibpod:
        """Serve from a private loop in a daemon thread (for sync gRPC tests)."""
        started = threading.Event()
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.start(path))
            started.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-libpod", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("fake libpod did not start")
        return self

    def stop_thread(self) -> None:
        if self._thread is None or self._loop is None:
            return
        loop = self._loop
        if loop.is_running():
            asyncio.run_coroutine_threadsafe(self.close(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        self._thread = None

    def call(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the fake's loop (safe from any thread)."""
        if self._thread is None or threading.current_thread() is self._thread:
            fn()  # same loop: started with ``await start``, or the in-memory door
            return
        loop = self._loop
        if loop is None:
            raise RuntimeError("fake libpod is not running")
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        loop.call_soon_threadsafe(run)
        if not done.wait(10):
            raise RuntimeError("fake libpod loop is stuck")

    # ------------------------------------------------------------ queries

    def count(self, pattern: str) -> int:
        """How many recorded requests match ``pattern`` (regex, searched)."""
        rx = re.compile(pattern)
        return sum(1 for r in list(self.requests) if rx.search(r))

    def created(self) -> list[str]:
        """The names in the container creates asked for, but for the event proofs podmand
        makes with every event subscription (podmand.host.eventproof)."""
        made = [json.loads(body or b"{}").get("name", "") for what, body in list(self.bodies)
                if what.startswith("POST ") and what.endswith("/containers/create")]
        return [name for name in made if not name.startswith(eventproof.PREFIX)]

    def calls(self, start: int = 0) -> list[str]:
        """The requests from the ``start``-th on, as ``METHOD /path`` (no API prefix, no query)."""
        return [re.sub(f"^(\\S+) {PREFIX}", r"\1 ", r.partition("?")[0]) for r in list(self.requests)[start:]]

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
        """Poll (from a non-fake thread) until ``predicate()`` is truthy."""
        return wait_until(predicate, timeout, what, detail=lambda: f"requests: {self.requests}")

    # ------------------------------------------------------------ HTTP

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        self._writers.add(writer)
        self.connections += 1
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # close(): end quietly (asyncio logs a cancelled client_connected_cb)
        finally:
            self.disconnects += 1
            self._writers.discard(writer)
            self._tasks.discard(task)  # type: ignore[arg-type]
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        result = await self._dispatch(self._record(method, target, headers, body))

        if isinstance(result, Hang):
            await reader.read()  # until the client gives up and closes
            return False
        if isinstance(result, Stream):
            return await self._stream(result, reader, writer)
        status, extra, payload = result
        data = _encode(status, payload)
        out = [f"HTTP/1.1 {status} {_REASONS.get(status, 'X')}"]
        chunked = extra.get("Transfer-Encoding", "").lower() == "chunked"
        for k, v in self._headers(status, extra).items():
            out.append(f"{k}: {v}")
        if not chunked and "Content-Length" not in extra and status not in (204, 304):
            out.append(f"Content-Length: {len(data)}")
        writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
        if method == "HEAD":  # the head alone, its Content-Length the GET's, as Go's server answers
            pass
        elif chunked:
            for piece in _pieces(data):
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            writer.write(b"0\r\n\r\n")
        else:
            writer.write(data)
        await writer.drain()
        return extra.get("Connection", "").lower() != "close"

    def _record(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Request:
        raw_path, _, raw_query = target.partition("?")
        path = urllib.parse.unquote(raw_path)
        query = dict(urllib.parse.parse_qsl(raw_query))
        self.requests.append(f"{method} {path}" + (f"?{urllib.parse.unquote(raw_query)}" if raw_query else ""))
        self.bodies.append((f"{method} {path}", body))
        return Request(method, path, query, headers, body)

    async def _dispatch(self, req: Request) -> Reply | Stream | Hang:
        for route in reversed(self._routes):
            if route.method == req.method and route.pattern.match(req.path):
                result = route.handler(req)
                if asyncio.iscoroutine(result):
                    result = await result
                self._announce(req, result)  # type: ignore[arg-type]
                return result  # type: ignore[return-value]
        return 404, {}, {"cause": "no such route", "message": f"fake libpod: no route for {req.method} {req.path}"}

    def _headers(self, status: int, extra: dict[str, str]) -> dict[str, str]:
        headers = {**self.common_headers, **extra}
        if "Content-Type" not in extra and status not in (204, 304):
            headers["Content-Type"] = "application/json"
        return headers

    # ------------------------------------------------------------ in memory

    def transport(self) -> MockTransport:
        """The in-memory door: the same routes (Stream and Hang included), answered on
        the caller's loop with no socket, for driver and hub tests in-process."""
        if self._loop is None:  # not also serving a socket: Feed and call() use this loop
            self._loop = asyncio.get_running_loop()
        return MockTransport(self._answer)

    async def _answer(self, request: LibpodRequest) -> Response | Streamed:
        headers = {k.lower(): v for k, v in request.headers.items()}
        body = request.body if isinstance(request.body, bytes) else b""
        result = await self._dispatch(self._record(request.method, request.target, headers, body))
        if isinstance(result, Hang):
            return await self._hang()
        if isinstance(result, Stream):
            q = result.feed._attach()
            self._memory_queues.add(q)
            head = {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
            first: list[bytes | str | None] = []
            if result.late_head:  # no head, so no answer, before the first line
                try:
                    first.append(await q.get())
                finally:
                    if not first:  # the client gave up waiting
                        self._memory_queues.discard(q)
                        result.feed._detach(q)
                if isinstance(first[0], str):  # broken before the head: no answer at all
                    self._memory_queues.discard(q)
                    result.feed._detach(q)
                    raise ConnectionResetError(f"fake libpod: stream {first[0]} before its head")
            return Streamed(result.status, head, self._feed_chunks(result.feed, q, first))
        status, extra, payload = result  # type: ignore[misc]
        data = _encode(status, payload)
        if extra.get("Transfer-Encoding", "").lower() == "chunked":
            return Streamed(status, self._headers(status, extra), _chunks_of(data))
        return Response(status, self._headers(status, extra), data)

    async def _hang(self) -> Response:
        """Never answer: until the client gives up (cancels), or the fake closes (a broken connection)."""
        hang: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._hangs.add(hang)
        try:
            await hang
        finally:
            self._hangs.discard(hang)
        raise AssertionError("a hang only ends in an exception")

    async def _feed_chunks(self, feed: Feed, q: asyncio.Queue[bytes | str | None],
                           first: list[bytes | str | None]) -> AsyncIterator[bytes]:
        """The lines of ``q``, after ``first`` (what was taken before the head was sent)."""
        try:
            while (item := first.pop() if first else await q.get()) is not None:
                if isinstance(item, str):  # "drop" or "cut": the connection breaks
                    raise ConnectionResetError(f"fake libpod: stream {item}")
                yield item
        finally:
            self._memory_queues.discard(q)
            feed._detach(q)

    async def _stream(self, stream: Stream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        q = stream.feed._attach()  # before the head: the client may push lines as soon as it sees it
        head = (f"HTTP/1.1 {stream.status} OK\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n").encode()
        if not stream.late_head:
            writer.write(head)
            await writer.drain()
            head = b""
        # The client sends nothing more on a stream connection: EOF means it left.
        eof = asyncio.ensure_future(reader.read())
        get: asyncio.Future[bytes | str | None] | None = None
        try:
            while True:
                get = asyncio.ensure_future(q.get())
                done, _ = await asyncio.wait({get, eof}, return_when=asyncio.FIRST_COMPLETED)
                if get not in done:
                    get.cancel()
                    return False
                item = get.result()
                if head and not isinstance(item, str):  # a late head goes out with the first line (or the end)
                    writer.write(head)
                    head = b""
                if item is None:
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    return True
                if item == "drop":
                    return False
                if item == "cut":
                    writer.write(b"100\r\n{\"Type\":")
                    await writer.drain()
                    return False
                assert isinstance(item, bytes)
                writer.write(b"%x\r\n%s\r\n" % (len(item), item))
                await writer.drain()
        finally:
            eof.cancel()
            if get is not None:
                get.cancel()
            stream.feed._detach(q)


def _encode(status: int, payload: Any) -> bytes:
    if status in (204, 304):
        return b""
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, str):
        return payload.encode()
    return json.dumps(payload).encode()


def _pieces(data: bytes) -> list[bytes]:
    """Small chunks, to exercise reassembly."""
    return [data[i:i + 7] for i in range(0, len(data), 7)]


async def _chunks_of(data: bytes) -> AsyncIterator[bytes]:
    for piece in _pieces(data):
        yield piece


_REASONS = {200: "OK", 201: "Created", 204: "No Content", 304: "Not Modified", 404: "Not Found",
            409: "Conflict", 500: "Internal Server Error"}
