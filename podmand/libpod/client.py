"""The libpod endpoints podmand uses, over a :class:`Transport`.

Requests are built here (their targets by ``routes``) and answers decoded into
models; moving bytes is the transport's job, and each call is told to ``observe``
(``calls``).  Nothing but :class:`PodmanError`, :class:`PodmanUnavailable`
and :class:`PodmanUnreadable` leaves a method (and ``CancelledError``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, BinaryIO, TypeVar

import msgspec

from . import lines as ndjson
from .calls import Observer, unobserved
from .errors import PodmanError, PodmanUnavailable, PodmanUnreadable
from .models import (
    BadEvent,
    ContainerCreated,
    ContainerInspect,
    ContainerListEntry,
    Event,
    HealthcheckResult,
    ImageImported,
    ImageInspect,
    ImageSummary,
    Info,
    NetworkInspect,
    PullLine,
    VolumeInspect,
)
from .routes import quote, template
from .routes import target as _target
from .timeouts import Timeouts
from .transport import Request, Response, Transport, Upload
from .unixsocket import UnixTransport

_IMPORT_CHUNK = 1024 * 1024  # bytes of a rootfs tar read and sent at a time
T = TypeVar("T")
LOG_DRIVER = "k8s-file"  # every container's log, whatever containers.conf says


def log_configuration(size_max: int) -> dict[str, Any]:
    """A file of at most ``size_max`` bytes (conmon's --log-size-max; 0: containers.conf's ``log_size_max``)."""
    return {"driver": LOG_DRIVER, **({"size": size_max} if size_max > 0 else {})}


def _decode(data: bytes, kind: type[T], what: str) -> T:
    """``data`` as ``kind``, or :class:`PodmanUnreadable` saying which answer it was."""
    decoded: T = _decode_any(data, kind, what)
    return decoded


def _decode_list(data: bytes, kind: type[T], what: str) -> list[T]:
    """A JSON array of ``kind``; libpod sends ``null`` for none."""
    items: list[T] | None = _decode_any(data, list[kind] | None, what)  # type: ignore[valid-type]
    return items or []


def _decode_any(data: bytes, kind: Any, what: str) -> Any:
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise PodmanUnreadable(f"Podman's answer to {what} is not what libpod sends: {exc}") from None


def _error(resp: Response) -> PodmanError:
    return PodmanError(resp.status, resp.error_message())


def _removed(resp: Response) -> bool:
    """True when a DELETE removed something, False when it was already gone."""
    if resp.status < 400:
        return True
    error = _error(resp)
    if error.gone:
        return False
    raise error


class PodmanClient:
    """libpod over ``transport``, or over the Unix socket at ``socket_path`` (then
    ``socket_path`` also names it, e.g. among podmand's own paths)."""

    def __init__(
        self, socket_path: str | None = None, *, transport: Transport | None = None, timeouts: Timeouts | None = None,
        log_size_max: int = 0,  # the bound on each created container's log file
    ) -> None:
        timeouts = timeouts or Timeouts()
        if transport is None:
            if socket_path is None:
                raise TypeError("PodmanClient needs a socket_path or a transport")
            transport = UnixTransport(socket_path, connect_timeout=timeouts.connect)
        self.socket_path = socket_path or ""
        self.transport = transport
        self.timeouts = timeouts
        self.log_configuration = log_configuration(log_size_max)
        self._served_info: Info | None = None
        self.observe: Observer = unobserved  # told of every call (calls.py): tracing, when on

    async def close(self) -> None:
        await self.transport.close()

    # ------------------------------------------------------------ requests

    async def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, json: Any = None,
                      timeout: float | None = None, tar: bytes | None = None) -> Response:
        """Any answer, errors included; PodmanUnavailable when there is none within
        ``timeout`` seconds (default: ``timeouts.request``)."""
        headers: dict[str, str] = {}
        body = None
        if json is not None:
            headers["Content-Type"] = "application/json"
            body = msgspec.json.encode(json)
        elif tar is not None:
            headers["Content-Type"], body = "application/x-tar", tar
        request = Request(method, _target(path, query), headers, body)
        return await self._send(request, timeout or self.timeouts.request, f"{method} {path}")

    async def call(self, method: str, path: str, **kwargs: Any) -> Response:
        """Like :meth:`request`, but raise :class:`PodmanError` on non-2xx (304 is fine)."""
        resp = await self.request(method, path, **kwargs)
        if resp.status >= 400:
            raise _error(resp)
        return resp

    async def _send(self, request: Request, timeout: float | None, what: str) -> Response:
        with self.observe(request.method, template(request.method, request.target)) as answered:
            try:
                resp = await asyncio.wait_for(self.transport.send(request), timeout)
            except TimeoutError as exc:
                raise PodmanUnavailable(f"Podman did not answer {what} in time") from exc
            answered(resp.status)
            return resp

    @contextlib.asynccontextmanager
    async def _chunks(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """The body of a 2xx answer as it arrives, on a connection of its own."""
        request = Request(method, _target(path, query), headers or {})
        with self.observe(method, template(method, request.target)) as answered:
            async with self.transport.stream(request) as answer:
                answered(answer.status)
                if answer.status >= 400:
                    raise _error(await answer.read())
                yield answer.chunks

    # ------------------------------------------------------------ system

    async def ping(self) -> Response:
        return await self.request("GET", "/_ping", timeout=self.timeouts.ping)

    async def info(self) -> Info:
        return _decode((await self.call("GET", "/info")).body, Info, "GET /info")

    async def served_info(self) -> Info:
        """``/info`` as first answered, for what does not change while the service serves
        (its version, storage paths, SELinux): one call for every reader of those."""
        if self._served_info is None:
            self._served_info = await self.info()
        return self._served_info

    # ------------------------------------------------------------ containers

    async def list_containers(self, labels: list[str], *, name: str = "") -> list[ContainerListEntry]:
        """Containers with every label of ``labels`` (and a name matching the regular
        expression ``name``: Podman filters on names before it reads each container's
        state, so a narrow name makes a cheap list)."""
        filters: dict[str, list[str]] = {"label": labels}
        if name:
            filters["name"] = [name]
        resp = await self.call("GET", "/containers/json", query={"all": True, "filters": filters})
        return _decode_list(resp.body, ContainerListEntry, "GET /containers/json")

    async def inspect_container(self, name: str) -> ContainerInspect:
        resp = await self.call("GET", f"/containers/{quote(name)}/json")
        return _decode(resp.body, ContainerInspect, "a container inspect")

    async def inspect_container_or_none(self, name: str) -> ContainerInspect | None:
        """None when there is no such container (any more)."""
        return await self._inspect_or_none(f"/containers/{quote(name)}/json", ContainerInspect, "a container inspect")

    async def create_container(self, spec: Mapping[str, Any]) -> tuple[str, list[str]]:
        """The new container's ID and Podman's warnings. Unless ``spec`` says otherwise it logs to a file
        (k8s-file) bounded by ``log_size_max``, not journald: that hides the output from a user who cannot
        read the journal (containers/podman#26910), and Podman 4 refuses it where no journal runs."""
        resp = await self.call("POST", "/containers/create", json={"log_configuration": self.log_configuration, **spec},
                               timeout=self.timeouts.create)
        created = _decode(resp.body, ContainerCreated, "POST /containers/create")
        return created.id, list(created.warnings or [])

    async def start_container(self, name: str) -> None:
        await self.call("POST", f"/containers/{quote(name)}/start", timeout=self.timeouts.start)

    async def init_container(self, name: str) -> None:
        """Set a container up (network, /etc/hosts) without running its process."""
        await self.call("POST", f"/containers/{quote(name)}/init", timeout=self.timeouts.start)

    async def stop_container(self, name: str, timeout: int) -> None:
        """Stop, with ``timeout`` seconds from SIGTERM to SIGKILL."""
        await self.call("POST", f"/containers/{quote(name)}/stop", query={"timeout": timeout},
                        timeout=timeout + self.timeouts.stop_grace)

    async def unpause_container(self, name: str) -> None:
        await self.call("POST", f"/containers/{quote(name)}/unpause")

    async def remove_container(self, name: str, timeout: int) -> bool:
        """Force-remove, with its anonymous volumes (an image's VOLUMEs, never a named one:
        libpod's ``volumes``, 4.3.1 and 5.x alike); False when it was already gone."""
        resp = await self.request(
            "DELETE",
            f"/containers/{quote(name)}",
            query={"force": True, "timeout": timeout, "volumes": True},
            timeout=timeout + self.timeouts.remove_grace,
        )
        return _removed(resp)

    async def wait_container(self, name: str) -> int:
        """Block until the container stops; its exit code.  Podman answers at once,
        while its file event log lags by up to a quarter of a second."""
        query = {"condition": ["stopped", "exited"]}
        async with self._chunks("POST", f"/containers/{quote(name)}/wait", query=query) as chunks:
            async for line in ndjson.strict_lines(chunks):
                try:
                    return int(line.strip())
                except ValueError:
                    answer = line[:80]
                    raise PodmanUnreadable(f"Podman's answer to a container wait is no exit code: {answer!r}") from None
        raise PodmanUnavailable("Podman closed the wait request without an answer")

    async def healthcheck(self, name: str) -> str:
        resp = await self.call("GET", f"/containers/{quote(name)}/healthcheck", timeout=self.timeouts.healthcheck)
        return _decode(resp.body, HealthcheckResult, "a healthcheck").status

    def archive(self, name: str, path: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """A tar of ``path`` in the container, as it arrives (its reader decides how much
        to hold); PodmanError 404 when there is no such path."""
        return self._chunks("GET", f"/containers/{quote(name)}/archive", query={"path": path})

    async def put_archive(self, name: str, path: str, tar: bytes) -> None:
        """Unpack ``tar`` into the (possibly stopped) container at ``path``, keeping the tar's
        owners: libpod's default (``copyUIDGID``) chowns every entry to the container's user."""
        await self.call("PUT", f"/containers/{quote(name)}/archive", query={"path": path, "copyUIDGID": False}, tar=tar)

    @contextlib.asynccontextmanager
    async def container_logs(
        self, name: str, *, follow: bool, tail: int | None
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Raw body chunks of a container's logs: 8-byte-framed stdout/stderr
        (``[stream, 0, 0, 0, size32be]``) unless the container has a TTY."""
        query = {"stdout": True, "stderr": True, "follow": follow, "tail": "all" if tail is None else tail}
        async with self._chunks("GET", f"/containers/{quote(name)}/logs", query=query) as chunks:
            yield chunks

    # ------------------------------------------------------------ images

    async def list_images(self) -> list[str]:
        """IDs of the local images."""
        resp = await self.call("GET", "/images/json")
        return [image.id for image in _decode_list(resp.body, ImageSummary, "GET /images/json")]

    async def image_names(self, repository: str) -> list[str]:
        """The ``repository:tag`` names of the local images in ``repository``."""
        resp = await self.call("GET", "/images/json", query={"filters": {"reference": [repository]}})
        images = _decode_list(resp.body, ImageSummary, "GET /images/json")
        return [n for image in images for n in image.names or [] if n.rpartition(":")[0] == repository]

    async def inspect_image(self, ref: str) -> ImageInspect:
        resp = await self.call("GET", f"/images/{quote(ref)}/json")
        return _decode(resp.body, ImageInspect, "an image inspect")

    async def image_exists(self, ref: str) -> bool:
        """Whether the image is local; PodmanError for any answer but yes or no."""
        resp = await self.request("GET", f"/images/{quote(ref)}/exists")
        if resp.status in (204, 404):
            return resp.status == 204
        raise _error(resp)

    async def pull_image(self, ref: str, policy: str, auth: str = "") -> AsyncGenerator[PullLine, None]:
        """Pull, yielding progress lines; raises PodmanError on a failed pull. ``auth``:
        an X-Registry-Auth value (registryauth), sent with this request only.
        No deadline here: the caller abandons a silent pull by closing the iterator."""
        headers = {"X-Registry-Auth": auth} if auth else None
        query = {"reference": ref, "policy": policy}
        async with self._chunks("POST", "/images/pull", query=query, headers=headers) as chunks:
            async for line in ndjson.strict_lines(chunks):
                item = _decode(line, PullLine, "an image pull")
                if item.error:
                    raise PodmanError(500, item.error)
                yield item

    async def import_image(self, file: BinaryIO, size: int, reference: str, inactivity: float | None) -> str:
        """``POST /images/import`` with ``size`` bytes of ``file`` (a rootfs tar) as the
        body, streamed from disk; the new image's ID. ``inactivity``: seconds Podman may
        stop reading (or, once the body is sent, answering) before the import is abandoned."""
        upload = Upload(_read(file, size), size, inactivity)
        request = Request("POST", _target("/images/import", {"reference": reference}),
                          {"Content-Type": "application/x-tar"}, upload)
        resp = await self._send(request, None, f"the import of {reference}")
        if resp.status >= 400:
            raise _error(resp)
        return _decode(resp.body, ImageImported, "an image import").id

    async def remove_image(self, ref: str) -> bool:
        """Untag ``ref`` and remove the image if nothing else uses it; False when
        there is no such image, PodmanError (409) when a container uses it."""
        return _removed(await self.request("DELETE", f"/images/{quote(ref)}"))

    # ------------------------------------------------------------ volumes

    async def create_volume(self, name: str, labels: Mapping[str, str]) -> None:
        await self.call("POST", "/volumes/create", json={"Name": name, "Label": dict(labels)})

    async def inspect_volume(self, name: str) -> VolumeInspect | None:
        """None when there is no such volume."""
        return await self._inspect_or_none(f"/volumes/{quote(name)}/json", VolumeInspect, "a volume inspect")

    async def list_volumes(self, labels: list[str]) -> list[VolumeInspect]:
        resp = await self.call("GET", "/volumes/json", query={"filters": {"label": labels}})
        return _decode_list(resp.body, VolumeInspect, "GET /volumes/json")

    async def remove_volume(self, name: str) -> bool:
        return _removed(await self.request("DELETE", f"/volumes/{quote(name)}", query={"force": True}))

    # ------------------------------------------------------------ networks

    async def create_network(self, body: Mapping[str, Any]) -> None:
        await self.call("POST", "/networks/create", json=body)

    async def inspect_network(self, name: str) -> NetworkInspect | None:
        """None when there is no such network."""
        return await self._inspect_or_none(f"/networks/{quote(name)}/json", NetworkInspect, "a network inspect")

    async def _inspect_or_none(self, path: str, shape: type[T], what: str) -> T | None:
        resp = await self.request("GET", path)
        if resp.status >= 400:
            error = _error(resp)
            if error.gone:
                return None
            raise error
        return _decode(resp.body, shape, what)

    async def list_networks(self, labels: list[str] | None = None) -> list[NetworkInspect]:
        """Networks with all of ``labels`` (every network when None)."""
        query = {"filters": {"label": labels}} if labels is not None else None
        resp = await self.call("GET", "/networks/json", query=query)
        return _decode_list(resp.body, NetworkInspect, "GET /networks/json")

    async def remove_network(self, name: str) -> bool:
        return _removed(await self.request("DELETE", f"/networks/{quote(name)}"))

    # ------------------------------------------------------------ events

    async def past_events(self, container_id: str, since: int) -> list[Event]:
        """The container's events in Podman's event log since ``since`` (Unix seconds), not streamed."""
        filters = {"container": [container_id], "type": ["container"]}
        query = {"stream": False, "since": str(since), "filters": filters}
        resp = await self.call("GET", "/events", query=query, timeout=self.timeouts.past_events)
        return [_decode(line, Event, "GET /events") for line in resp.body.splitlines() if line.strip()]

    def events(self, labels: list[str]) -> AbstractAsyncContextManager[AsyncIterator[Event | BadEvent]]:
        """Podman's live container events of containers with any of ``labels`` (Podman
        ORs the values of one filter key); a line that cannot be read is a BadEvent."""
        return self._live_events({"label": labels, "type": ["container"]})

    def image_events(self) -> AbstractAsyncContextManager[AsyncIterator[Event | BadEvent]]:
        """Podman's live image events (pull, tag, untag, remove...): what moves a tag or
        removes an image; the subscription is up once this context is entered."""
        return self._live_events({"type": ["image"]})

    @contextlib.asynccontextmanager
    async def _live_events(self, filters: Mapping[str, list[str]]) -> AsyncIterator[AsyncIterator[Event | BadEvent]]:
        async with self._chunks("GET", "/events", query={"stream": True, "filters": filters}) as chunks:
            yield ndjson.decode_events(ndjson.split_lines(chunks))


async def _read(file: BinaryIO, size: int) -> AsyncIterator[bytes]:
    """``size`` bytes of ``file``, read off the event loop; PodmanError when it is shorter."""
    loop = asyncio.get_running_loop()
    left = size
    while left:
        chunk = await loop.run_in_executor(None, file.read, min(left, _IMPORT_CHUNK))
        if not chunk:
            raise PodmanError(400, f"the rootfs tar ended {left} bytes short of its size")
        left -= len(chunk)
        yield chunk
