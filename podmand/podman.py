"""A small asyncio client for the libpod REST API over a Unix socket.

HTTP/1.1 with a keep-alive pool, Content-Length and chunked bodies, and a
cancellable line stream for ``/events`` and pulls.  podman-py is sync and
heavy; this is the only Podman client the server uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

import msgspec

API_PREFIX = "/v4.0.0/libpod"
_MAX_HEADER_BYTES = 64 * 1024
_MAX_LINE_BYTES = 4 * 1024 * 1024
_HEAD_BYTES = 64 * 1024  # kept of an over-long line: enough to name its container
_IMPORT_CHUNK = 1024 * 1024  # bytes of a rootfs tar read and sent at a time
_ACTOR_ID = re.compile(rb'"(?:ID|id)"\s*:\s*"([0-9a-f]{12,64})"')


class PodmanError(Exception):
    """Podman answered with a non-2xx status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"podman API error ({status}): {message}")
        self.status = status
        self.message = message

    @property
    def gone(self) -> bool:
        """The object does not exist: Podman says 404, or 500 with "no such ..."
        (removing a container or volume someone else removed a moment ago)."""
        return _says_gone(self.status, self.message)


def _says_gone(status: int, message: str) -> bool:
    return status == 404 or any(f"no such {what}" in message.lower() for what in ("container", "volume", "network"))


class PodmanUnavailable(Exception):
    """The Podman socket could not be reached or the connection broke."""


# ---------------------------------------------------------------- libpod shapes


class HealthState(msgspec.Struct, rename="pascal"):
    status: str = ""


class ContainerState(msgspec.Struct, rename="pascal"):
    status: str = ""
    running: bool = False
    paused: bool = False
    exit_code: int = 0
    oom_killed: bool = msgspec.field(default=False, name="OOMKilled")
    started_at: str = ""
    finished_at: str = ""
    health: HealthState | None = None
    stopped_by_user: bool = False


class HealthConfig(msgspec.Struct, rename="pascal"):
    test: list[str] | None = None


class ContainerConfig(msgspec.Struct, rename="pascal"):
    labels: dict[str, str] | None = None
    healthcheck: HealthConfig | None = None
    user: str = ""


class IDMappings(msgspec.Struct, rename="pascal"):
    uid_map: list[str] | None = None
    gid_map: list[str] | None = None


class HostConfig(msgspec.Struct, rename="pascal"):
    cap_add: list[str] | None = None
    cap_drop: list[str] | None = None
    id_mappings: IDMappings | None = msgspec.field(default=None, name="IDMappings")
    userns_mode: str = ""
    network_mode: str = ""
    security_opt: list[str] | None = None
    privileged: bool = False
    memory: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    pids_limit: int = 0


class MountPoint(msgspec.Struct, rename="pascal"):
    destination: str = ""
    type: str = ""
    rw: bool = msgspec.field(default=True, name="RW")


class NetworkSettings(msgspec.Struct, rename="pascal"):
    networks: dict[str, Any] | None = None


class ContainerInspect(msgspec.Struct, rename="pascal"):
    id: str
    name: str = ""
    created: str = ""
    state: ContainerState = msgspec.field(default_factory=ContainerState)
    config: ContainerConfig = msgspec.field(default_factory=ContainerConfig)
    image: str = ""
    effective_caps: list[str] | None = None
    host_config: HostConfig = msgspec.field(default_factory=HostConfig)
    mounts: list[MountPoint] | None = None
    network_settings: NetworkSettings = msgspec.field(default_factory=NetworkSettings)

    @property
    def labels(self) -> dict[str, str]:
        return self.config.labels or {}


class ContainerListEntry(msgspec.Struct, rename="pascal"):
    id: str
    names: list[str] | None = None
    state: str = ""
    labels: dict[str, str] | None = None
    exit_code: int = 0
    exited: bool = False
    exited_at: int = 0
    started_at: int = 0
    created: str = ""


class ImageConfig(msgspec.Struct, rename="pascal"):
    user: str = ""
    env: list[str] | None = None


class ImageInspect(msgspec.Struct, rename="pascal"):
    id: str = ""
    config: ImageConfig = msgspec.field(default_factory=ImageConfig)


class VolumeInspect(msgspec.Struct, rename="pascal"):
    name: str
    labels: dict[str, str] | None = None
    created_at: str = ""


class NetworkInspect(msgspec.Struct):
    name: str
    labels: dict[str, str] | None = None
    created: str = ""


class EventActor(msgspec.Struct, rename="pascal"):
    id: str = msgspec.field(default="", name="ID")
    attributes: dict[str, str] | None = None


class Event(msgspec.Struct):
    Type: str = ""
    Action: str = ""
    Actor: EventActor = msgspec.field(default_factory=EventActor)
    timeNano: int = 0


@dataclass
class BadEvent:
    """An event line podmand could not read (over-long or undecodable): skipped,
    never a reason to drop the subscription."""

    container_id: str
    reason: str


class PullLine(msgspec.Struct):
    stream: str = ""
    error: str = ""
    id: str = ""
    images: list[str] | None = None


class HostSecurity(msgspec.Struct):
    rootless: bool = False
    selinuxEnabled: bool | None = None  # None: this Podman does not say


class HostInfo(msgspec.Struct):
    cgroupVersion: str = ""
    security: HostSecurity = msgspec.field(default_factory=HostSecurity)
    ociRuntime: dict[str, Any] | None = None


class StoreInfo(msgspec.Struct):
    graphDriverName: str = ""


class VersionInfo(msgspec.Struct, rename="pascal"):
    version: str = ""
    api_version: str = msgspec.field(default="", name="APIVersion")


class Info(msgspec.Struct):
    host: HostInfo = msgspec.field(default_factory=HostInfo)
    store: StoreInfo = msgspec.field(default_factory=StoreInfo)
    version: VersionInfo = msgspec.field(default_factory=VersionInfo)


# ---------------------------------------------------------------- HTTP layer


class Response:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def error_message(self) -> str:
        try:
            data = msgspec.json.decode(self.body)
        except msgspec.DecodeError:
            return self.body.decode("utf-8", "replace").strip()
        if isinstance(data, dict):
            return str(data.get("message") or data.get("cause") or data)
        return str(data)


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise PodmanUnavailable("connection closed by Podman") from exc
    except asyncio.LimitOverrunError as exc:
        raise PodmanUnavailable("response header too large") from exc
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise PodmanUnavailable(f"malformed status line from Podman: {lines[0]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _iter_body(reader: asyncio.StreamReader, status: int, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
    """Yield body chunks; handles chunked, Content-Length and read-to-close."""
    if status in (204, 304) or status < 200:
        return
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            try:
                size_line = await reader.readline()
                size = int(size_line.split(b";", 1)[0].strip() or b"-1", 16)
                if size < 0:
                    raise PodmanUnavailable("connection closed inside a chunked body")
                if size == 0:
                    await reader.readline()  # trailing CRLF (Podman sends no trailers)
                    return
                data = await reader.readexactly(size)
                await reader.readexactly(2)
            except asyncio.IncompleteReadError as exc:
                raise PodmanUnavailable("connection closed inside a chunk") from exc
            except ValueError as exc:
                raise PodmanUnavailable(f"malformed chunk size from Podman: {exc}") from exc
            yield data
    elif "content-length" in headers:
        remaining = int(headers["content-length"])
        while remaining:
            data = await reader.read(min(remaining, 65536))
            if not data:
                raise PodmanUnavailable("connection closed inside a response body")
            remaining -= len(data)
            yield data
    else:
        while data := await reader.read(65536):
            yield data


def _build_request(
    method: str, path: str, body: bytes | None, content_type: str, headers: Mapping[str, str] | None = None
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: d", "User-Agent: podmand"]
    lines += [f"{key}: {value}" for key, value in (headers or {}).items()]
    if body is not None:
        lines += [f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
    elif method in ("POST", "PUT"):
        lines.append("Content-Length: 0")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def _path(path: str, query: Mapping[str, Any] | None) -> str:
    full = path if path.startswith("/_") else API_PREFIX + path
    if query:
        items = []
        for key, value in query.items():
            if value is None:
                continue
            if isinstance(value, list):  # repeated parameter, e.g. condition=a&condition=b
                items += [(key, str(v)) for v in value]
                continue
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif isinstance(value, dict):
                value = msgspec.json.encode(value).decode()
            items.append((key, str(value)))
        if items:
            full += "?" + urllib.parse.urlencode(items, quote_via=urllib.parse.quote)
    return full


def quote(name: str) -> str:
    """Percent-encode one path segment (image references contain '/' and ':')."""
    return urllib.parse.quote(name, safe="")


class PodmanClient:
    """libpod over a Unix socket: one keep-alive pool, one connection per stream."""

    def __init__(self, socket_path: str, *, pool_size: int = 8, timeout: float = 30.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._idle: list[_Conn] = []
        self._pool_size = pool_size
        self._closed = False

    async def _connect(self) -> _Conn:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(self.socket_path, limit=_MAX_LINE_BYTES), 5.0
            )
        except (TimeoutError, OSError) as exc:
            raise PodmanUnavailable(f"cannot connect to Podman at {self.socket_path}: {exc}") from exc
        return _Conn(reader, writer)

    def _release(self, conn: _Conn, headers: Mapping[str, str]) -> None:
        reusable = headers.get("connection", "").lower() != "close"
        if reusable and not self._closed and len(self._idle) < self._pool_size:
            self._idle.append(conn)
        else:
            conn.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        json: Any = None,
        body: bytes | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Response:
        if json is not None:
            body = msgspec.json.encode(json)
        raw = _build_request(method, _path(path, query), body, content_type)
        try:
            return await asyncio.wait_for(self._roundtrip(raw), timeout or self.timeout)
        except TimeoutError as exc:
            raise PodmanUnavailable(f"Podman did not answer {method} {path} in time") from exc

    async def _roundtrip(self, raw: bytes) -> Response:
        # A pooled connection may have been closed by the server while idle:
        # retry once on a fresh connection when the reused one breaks at once.
        for attempt in range(2):
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else await self._connect()
            try:
                conn.writer.write(raw)
                await conn.writer.drain()
                status, headers = await _read_head(conn.reader)
                body = b"".join([chunk async for chunk in _iter_body(conn.reader, status, headers)])
            except (OSError, PodmanUnavailable, asyncio.IncompleteReadError) as exc:
                conn.close()
                if reused and attempt == 0:
                    continue
                raise PodmanUnavailable(f"connection to Podman failed: {exc}") from exc
            except BaseException:
                conn.close()
                raise
            self._release(conn, headers)
            return Response(status, headers, body)
        raise AssertionError("unreachable")

    async def call(self, method: str, path: str, **kwargs: Any) -> Response:
        """Like :meth:`request`, but raise :class:`PodmanError` on non-2xx (304 is fine)."""
        resp = await self.request(method, path, **kwargs)
        if resp.status >= 400:
            raise PodmanError(resp.status, resp.error_message())
        return resp

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Open a dedicated connection and yield an iterator of body lines."""
        async with self._chunks(method, path, query=query, json=json, headers=headers) as chunks:
            yield _lines(chunks)

    @contextlib.asynccontextmanager
    async def _chunks(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Open a dedicated connection and yield an iterator of body chunks."""
        body = msgspec.json.encode(json) if json is not None else None
        conn = await self._connect()
        try:
            conn.writer.write(_build_request(method, _path(path, query), body, "application/json", headers))
            await conn.writer.drain()
            status, headers = await _read_head(conn.reader)
            if status >= 400:
                data = b"".join([c async for c in _iter_body(conn.reader, status, headers)])
                raise PodmanError(status, Response(status, headers, data).error_message())
            yield _iter_body(conn.reader, status, headers)
        except OSError as exc:
            raise PodmanUnavailable(f"connection to Podman failed: {exc}") from exc
        finally:
            conn.close()

    async def close(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()

    # ------------------------------------------------------------ endpoints

    async def ping(self) -> Response:
        return await self.request("GET", "/_ping", timeout=2.0)

    async def info(self) -> Info:
        return msgspec.json.decode((await self.call("GET", "/info")).body, type=Info)

    async def list_containers(self, labels: list[str]) -> list[ContainerListEntry]:
        resp = await self.call("GET", "/containers/json", query={"all": True, "filters": {"label": labels}})
        return msgspec.json.decode(resp.body, type=list[ContainerListEntry] | None) or []

    async def inspect_container(self, name: str) -> ContainerInspect:
        resp = await self.call("GET", f"/containers/{quote(name)}/json")
        return msgspec.json.decode(resp.body, type=ContainerInspect)

    async def create_container(self, spec: Mapping[str, Any]) -> tuple[str, list[str]]:
        resp = await self.call("POST", "/containers/create", json=spec)
        data = msgspec.json.decode(resp.body)
        return str(data["Id"]), list(data.get("Warnings") or [])

    async def start_container(self, name: str) -> None:
        await self.call("POST", f"/containers/{quote(name)}/start", timeout=120.0)

    async def stop_container(self, name: str, timeout: int) -> None:
        await self.call("POST", f"/containers/{quote(name)}/stop", query={"timeout": timeout}, timeout=timeout + 30.0)

    async def remove_container(self, name: str, timeout: int) -> bool:
        """Force-remove; False when it was already gone."""
        resp = await self.request(
            "DELETE",
            f"/containers/{quote(name)}",
            query={"force": True, "timeout": timeout},
            timeout=timeout + 60.0,
        )
        return _removed(resp)

    async def wait_container(self, name: str) -> int:
        """Block until the container stops; its exit code.  Podman answers at once,
        while its file event log lags by up to a quarter of a second."""
        query = {"condition": ["stopped", "exited"]}
        async with self.stream("POST", f"/containers/{quote(name)}/wait", query=query) as lines:
            async for line in lines:
                return int(line.strip() or b"-1")
        raise PodmanUnavailable("Podman closed the wait request without an answer")

    async def healthcheck(self, name: str) -> str:
        resp = await self.call("GET", f"/containers/{quote(name)}/healthcheck", timeout=60.0)
        return str(msgspec.json.decode(resp.body).get("Status", ""))

    async def archive(self, name: str, path: str) -> bytes:
        return (await self.call("GET", f"/containers/{quote(name)}/archive", query={"path": path})).body

    async def list_images(self) -> list[str]:
        """IDs of the local images."""
        resp = await self.call("GET", "/images/json")
        return [str(item["Id"]) for item in msgspec.json.decode(resp.body) or []]

    async def inspect_image(self, ref: str) -> ImageInspect:
        resp = await self.call("GET", f"/images/{quote(ref)}/json")
        return msgspec.json.decode(resp.body, type=ImageInspect)

    async def pull_image(self, ref: str, policy: str, auth: str = "") -> AsyncGenerator[PullLine, None]:
        """Pull, yielding progress lines; raises PodmanError on a failed pull. ``auth``:
        an X-Registry-Auth value (registryauth), sent with this request only.
        No deadline here: the caller abandons a silent pull by closing the iterator."""
        headers = {"X-Registry-Auth": auth} if auth else None
        query = {"reference": ref, "policy": policy}
        async with self.stream("POST", "/images/pull", query=query, headers=headers) as lines:
            async for line in lines:
                item = msgspec.json.decode(line, type=PullLine)
                if item.error:
                    raise PodmanError(500, item.error)
                yield item

    async def import_image(self, file: BinaryIO, size: int, reference: str, inactivity: float | None) -> str:
        """``POST /images/import`` with ``size`` bytes of ``file`` (a rootfs tar) as the
        body, streamed from disk; the new image's ID. ``inactivity``: seconds Podman may
        stop reading (or, once the body is sent, answering) before the import is abandoned."""
        path = _path("/images/import", {"reference": reference})
        head = f"POST {path} HTTP/1.1\r\nHost: d\r\nUser-Agent: podmand\r\n"
        head += f"Content-Type: application/x-tar\r\nContent-Length: {size}\r\n\r\n"
        loop = asyncio.get_running_loop()
        conn = await self._connect()
        try:
            try:
                conn.writer.write(head.encode("latin-1"))
                left = size
                while left:
                    chunk = await loop.run_in_executor(None, file.read, min(left, _IMPORT_CHUNK))
                    if not chunk:
                        raise PodmanError(400, f"the rootfs tar ended {left} bytes short of its size")
                    left -= len(chunk)
                    conn.writer.write(chunk)
                    await asyncio.wait_for(conn.writer.drain(), inactivity)
            except (OSError, TimeoutError):
                pass  # Podman stopped reading: it refused the body; its answer says why
            try:
                status, headers = await asyncio.wait_for(_read_head(conn.reader), inactivity)
                body = b"".join([c async for c in _iter_body(conn.reader, status, headers)])
            except TimeoutError as exc:
                raise PodmanUnavailable(f"Podman did not answer the import of {reference} in time") from exc
        except OSError as exc:
            raise PodmanUnavailable(f"connection to Podman failed: {exc}") from exc
        finally:
            conn.close()
        if status >= 400:
            raise PodmanError(status, Response(status, headers, body).error_message())
        return str(msgspec.json.decode(body).get("Id", ""))

    async def remove_image(self, ref: str) -> bool:
        """Untag ``ref`` and remove the image if nothing else uses it; False when
        there is no such image, PodmanError (409) when a container uses it."""
        return _removed(await self.request("DELETE", f"/images/{quote(ref)}"))

    async def image_names(self, repository: str) -> list[str]:
        """The ``repository:tag`` names of the local images in ``repository``."""
        resp = await self.call("GET", "/images/json", query={"filters": {"reference": [repository]}})
        names = [str(n) for item in msgspec.json.decode(resp.body) or [] for n in item.get("Names") or []]
        return [n for n in names if n.rpartition(":")[0] == repository]

    async def create_volume(self, name: str, labels: Mapping[str, str]) -> None:
        await self.call("POST", "/volumes/create", json={"Name": name, "Label": dict(labels)})

    async def inspect_volume(self, name: str) -> VolumeInspect | None:
        resp = await self.request("GET", f"/volumes/{quote(name)}/json")
        if resp.status >= 400:
            if _says_gone(resp.status, resp.error_message()):
                return None
            raise PodmanError(resp.status, resp.error_message())
        return msgspec.json.decode(resp.body, type=VolumeInspect)

    async def list_volumes(self, labels: list[str]) -> list[VolumeInspect]:
        resp = await self.call("GET", "/volumes/json", query={"filters": {"label": labels}})
        return msgspec.json.decode(resp.body, type=list[VolumeInspect] | None) or []

    async def remove_volume(self, name: str) -> bool:
        resp = await self.request("DELETE", f"/volumes/{quote(name)}", query={"force": True})
        return _removed(resp)

    async def create_network(self, body: Mapping[str, Any]) -> None:
        await self.call("POST", "/networks/create", json=body)

    async def inspect_network(self, name: str) -> NetworkInspect | None:
        resp = await self.request("GET", f"/networks/{quote(name)}/json")
        if resp.status >= 400:
            if _says_gone(resp.status, resp.error_message()):
                return None
            raise PodmanError(resp.status, resp.error_message())
        return msgspec.json.decode(resp.body, type=NetworkInspect)

    async def list_networks(self, labels: list[str]) -> list[NetworkInspect]:
        resp = await self.call("GET", "/networks/json", query={"filters": {"label": labels}})
        return msgspec.json.decode(resp.body, type=list[NetworkInspect] | None) or []

    async def remove_network(self, name: str) -> bool:
        resp = await self.request("DELETE", f"/networks/{quote(name)}")
        return _removed(resp)

    @contextlib.asynccontextmanager
    async def container_logs(self, name: str, *, follow: bool, tail: int | None) -> AsyncIterator[AsyncIterator[bytes]]:
        """Raw body chunks of a container's logs: 8-byte-framed stdout/stderr
        (``[stream, 0, 0, 0, size32be]``) unless the container has a TTY."""
        query = {"stdout": True, "stderr": True, "follow": follow, "tail": "all" if tail is None else tail}
        async with self._chunks("GET", f"/containers/{quote(name)}/logs", query=query) as chunks:
            yield chunks

    async def past_events(self, container_id: str, since: int) -> list[Event]:
        """The container's events in Podman's event log since ``since`` (Unix seconds), not streamed."""
        query = {"stream": False, "since": str(since), "filters": {"container": [container_id], "type": ["container"]}}
        resp = await self.call("GET", "/events", query=query, timeout=10.0)
        return [msgspec.json.decode(line, type=Event) for line in resp.body.splitlines() if line.strip()]

    @contextlib.asynccontextmanager
    async def events(self, labels: list[str]) -> AsyncIterator[AsyncIterator[Event | BadEvent]]:
        query = {"stream": True, "filters": {"label": labels, "type": ["container"]}}
        async with self._chunks("GET", "/events", query=query) as chunks:
            yield _decode_events(_split_lines(chunks))


def _removed(resp: Response) -> bool:
    """True when a DELETE removed something, False when it was already gone."""
    if resp.status < 400:
        return True
    message = resp.error_message()
    if _says_gone(resp.status, message):
        return False
    raise PodmanError(resp.status, message)


@dataclass
class Oversized:
    """A line longer than the limit: its head, and how long it was."""

    head: bytes
    size: int


def _actor_id(data: bytes) -> str:
    match = _ACTOR_ID.search(data[:_HEAD_BYTES])
    return match.group(1).decode() if match else ""


async def _decode_events(lines: AsyncIterator[bytes | Oversized]) -> AsyncIterator[Event | BadEvent]:
    async for line in lines:
        if isinstance(line, Oversized):
            yield BadEvent(_actor_id(line.head), f"event of {line.size} bytes is over the {_MAX_LINE_BYTES}-byte limit")
            continue
        try:
            yield msgspec.json.decode(line, type=Event)
        except msgspec.DecodeError as exc:  # ValidationError included
            yield BadEvent(_actor_id(line), f"undecodable event: {exc}")


async def _split_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes | Oversized]:
    """Non-empty lines; one longer than the limit comes as :class:`Oversized`,
    its body dropped as it arrives (memory stays bounded)."""
    buf = b""
    skipping: Oversized | None = None
    async for chunk in chunks:
        if skipping is not None:
            end = chunk.find(b"\n")
            if end < 0:
                skipping.size += len(chunk)
                continue
            skipping.size += end
            yield skipping
            skipping, chunk = None, chunk[end + 1 :]
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if len(line) > _MAX_LINE_BYTES:
                yield Oversized(line[:_HEAD_BYTES], len(line))
            elif line.strip():
                yield line
        if len(buf) > _MAX_LINE_BYTES:
            skipping, buf = Oversized(buf[:_HEAD_BYTES], len(buf)), b""
    if skipping is not None:
        yield skipping
    elif buf.strip():
        yield buf


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Lines of a pull or wait answer, where an over-long one means a broken Podman."""
    async for line in _split_lines(chunks):
        if isinstance(line, Oversized):
            raise PodmanUnavailable("Podman sent an over-long line")
        yield line
