"""The pair's lifecycle (podmand/pair/lifecycle.py) on its fault paths, through MockTransport:
what a failure undoes and in which order. Its behaviour on real Podman is
tests/e2e/test_pair_lifecycle.py; here only what real Podman cannot be made to do on cue
(a 500 at one step)."""

from __future__ import annotations

import asyncio
import io
import json
import re
import tarfile
from typing import Any

import msgspec
import pytest

from podmand.errors import FailedPrecondition
from podmand.libpod import MockTransport, PodmanClient, PodmanError, PodmanUnavailable, Request, Response
from podmand.pair import lifecycle
from tests.unit.pair.launches import SANDBOX, bundle, identity

WORKLOAD = "openshell-ws--box-box-1"
SUPERVISOR = "openshell-supervisor-box-1"
CHANNEL = "openshell-channel-box-1"
WORKSPACE = "openshell-sandbox-box-1-workspace"


class Podman:
    """Answers every call the lifecycle makes; ``fail`` maps "METHOD path-regex" to a status."""

    def __init__(self, fail: dict[str, int | tuple[int, str]] | None = None, network: str = "none",
                 status: str = "created") -> None:
        self.fail = fail or {}
        self.network = network
        self.status = status
        self.seen: list[str] = []

    def __call__(self, request: Request) -> Response:
        path = request.target.removeprefix("/v4.0.0/libpod").partition("?")[0]
        call = f"{request.method} {path}"
        self.seen.append(call)
        for pattern, answer in self.fail.items():
            if re.fullmatch(pattern, call):
                status, message = answer if isinstance(answer, tuple) else (answer, f"injected {answer}")
                return Response(status, {}, json.dumps({"message": message, "response": status}).encode())
        if call.endswith("/json") and request.method == "GET":
            name = path.split("/")[2]
            return self.answer({"Id": "9a" * 32, "Name": name, "State": {"Status": self.status},
                                "HostConfig": {"NetworkMode": self.network}})
        if call.endswith("/wait"):
            return Response(200, {}, b"0\n")
        if call == "POST /containers/create":
            return self.answer({"Id": "9a" * 32, "Warnings": []}, 201)
        return Response(204 if request.method != "PUT" else 200, {}, b"")

    @staticmethod
    def answer(body: Any, status: int = 200) -> Response:
        return Response(status, {}, json.dumps(body).encode())


def pair() -> lifecycle.Pair:
    return lifecycle.Pair(sandbox_id=SANDBOX, workload={"name": WORKLOAD}, supervisor={"name": SUPERVISOR},
                          workspace_volume=WORKSPACE, channel_labels={"k": "v"}, stop_timeout=3)


def create(podman: Podman, *, start: bool = True) -> None:
    async def main() -> None:
        client = PodmanClient(transport=MockTransport(podman))
        session = lifecycle.Session(bundle=bundle(), host_gateway_ip="127.0.0.1", userns="auto")
        await lifecycle.create(client, pair(), session, identity(), {"PATH": "/bin"}, start=lambda: start)

    asyncio.run(main())


def test_create_in_order() -> None:
    podman = Podman()
    create(podman)
    assert podman.seen == [
        "POST /volumes/create", "POST /containers/create", f"GET /containers/{WORKLOAD}/json",
        f"PUT /containers/{WORKLOAD}/archive", f"PUT /containers/{WORKLOAD}/archive",
        "POST /containers/create", f"PUT /containers/{SUPERVISOR}/archive",
        f"POST /containers/{WORKLOAD}/start", f"POST /containers/{SUPERVISOR}/start",
    ]


def test_a_create_told_not_to_start_leaves_the_pair_made_and_stopped() -> None:
    """A stop while Podman makes the pair: everything is made and filled, nothing started."""
    podman = Podman()
    create(podman, start=False)
    assert podman.seen[-1] == f"PUT /containers/{SUPERVISOR}/archive"
    assert not [call for call in podman.seen if call.endswith("/start") or call.startswith("DELETE")]


def test_a_failed_create_removes_what_it_made_supervisor_first() -> None:
    podman = Podman(fail={f"PUT /containers/{SUPERVISOR}/archive": 500})
    with pytest.raises(PodmanError, match=f"upload the supervisor archive to {SUPERVISOR}:/: injected 500") as exc:
        create(podman)
    assert exc.value.status == 500
    assert podman.seen[-3:] == [f"DELETE /containers/{SUPERVISOR}", f"DELETE /containers/{WORKLOAD}",
                                f"DELETE /volumes/{CHANNEL}"]
    assert f"DELETE /volumes/{WORKSPACE}" not in podman.seen, "the caller's workspace volume is the caller's"


def test_a_refused_fence_uploads_nothing_and_removes_the_workload() -> None:
    podman = Podman(network="slirp4netns")
    with pytest.raises(FailedPrecondition, match="network mode is 'slirp4netns'"):
        create(podman)
    assert not any("archive" in call or "start" in call for call in podman.seen)
    assert podman.seen[-2:] == [f"DELETE /containers/{WORKLOAD}", f"DELETE /volumes/{CHANNEL}"]


def test_a_supervisor_that_does_not_start_stops_the_workload() -> None:
    podman = Podman(fail={f"POST /containers/{SUPERVISOR}/start": 500})
    with pytest.raises(PodmanError, match=f"start the supervisor {SUPERVISOR}"):
        create(podman)
    stop = podman.seen.index(f"POST /containers/{WORKLOAD}/stop")
    assert stop < podman.seen.index(f"DELETE /containers/{WORKLOAD}")


def test_stop_is_supervisor_first_and_skips_what_does_not_run() -> None:
    podman = Podman(status="exited")

    async def main() -> bool:
        return await lifecycle.stop(PodmanClient(transport=MockTransport(podman)), pair())

    assert asyncio.run(main()) is True
    assert podman.seen == [f"GET /containers/{SUPERVISOR}/json", f"GET /containers/{WORKLOAD}/json"]


@pytest.mark.parametrize("at", [f"POST /containers/{SUPERVISOR}/stop", f"POST /containers/{SUPERVISOR}/wait"])
@pytest.mark.parametrize("answer", [404, (500, "no such container")], ids=["404", "500-no-such"])
def test_a_container_removed_while_it_is_stopped_has_ended_all_the_same(at: str, answer: int | tuple[int, str]) -> None:
    """Running at the inspect, gone at the stop or its wait (removed out of band; 4.3.1 and 5.4.2
    answer 500 "no such container"): the stop goes on to the workload, not an error (an RPC
    answered INTERNAL on it once)."""
    podman = Podman(fail={at: answer}, status="running")

    async def main() -> bool:
        return await lifecycle.stop(PodmanClient(transport=MockTransport(podman)), pair())

    assert asyncio.run(main()) is True
    assert podman.seen[-3:] == [f"GET /containers/{WORKLOAD}/json", f"POST /containers/{WORKLOAD}/stop",
                                f"POST /containers/{WORKLOAD}/wait"]


def test_a_stop_podman_fails_otherwise_is_still_an_error() -> None:
    podman = Podman(fail={f"POST /containers/{SUPERVISOR}/stop": 500}, status="running")

    async def main() -> bool:
        return await lifecycle.stop(PodmanClient(transport=MockTransport(podman)), pair())

    with pytest.raises(PodmanError, match="injected 500"):
        asyncio.run(main())


def restart_metadata() -> bytes:
    """The tar Podman's archive endpoint answers for restart-metadata.json."""
    doc = json.dumps({"generation": "g1", "workload_identity": msgspec.to_builtins(identity()),
                      "child_env": {"PATH": "/bin"}}).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("restart-metadata.json")
        info.size = len(doc)
        tar.addfile(info, io.BytesIO(doc))
    return out.getvalue()


def test_a_start_whose_fence_does_not_hold_uploads_and_starts_nothing() -> None:
    """The fence is checked before every start, not only the first (contract §6): a workload
    that now has a network (no Podman here can give a stopped one that: the fake does) is
    refused before any file of the new launch is written or either container started."""
    podman = Podman(network="bridge", status="exited")
    tar = restart_metadata()

    def answer(request: Request) -> Response:
        if request.method == "GET" and "/archive" in request.target:
            podman.seen.append("GET archive")
            return Response(200, {}, tar)
        return podman(request)

    async def main() -> None:
        client = PodmanClient(transport=MockTransport(answer))
        session = lifecycle.Session(bundle=bundle(), host_gateway_ip="127.0.0.1", userns="auto")
        await lifecycle.start(client, pair(), session, "g2")

    with pytest.raises(FailedPrecondition, match="the outer fence does not hold: network mode is 'bridge'"):
        asyncio.run(main())
    assert "GET archive" in podman.seen, "it got as far as the restart metadata"
    assert not [call for call in podman.seen if call.startswith("PUT") or call.endswith("/start")], podman.seen


class Uncleaned(Podman):
    """Podman whose cleanup of the ended pair comes ``looks`` inspects of each container late
    (its state "stopped" until then); an archive read before it answers 200 and nothing, as
    Podman's copy whose mount the cleanup took away does."""

    def __init__(self, looks: int) -> None:
        super().__init__(status="stopped")
        self.looks = {WORKLOAD: looks, SUPERVISOR: looks}

    def __call__(self, request: Request) -> Response:
        path = request.target.removeprefix("/v4.0.0/libpod").partition("?")[0]
        name = path.split("/")[2] if path.startswith("/containers/") else ""
        if request.method == "GET" and path.endswith("/archive"):
            self.seen.append(f"GET archive ({'after' if not self.looks[name] else 'before'} the cleanup)")
            return Response(200, {}, restart_metadata() if not self.looks[name] else b"")
        if request.method == "GET" and path.endswith("/json") and name in self.looks:
            self.status = "stopped" if self.looks[name] else "exited"
            self.looks[name] = max(0, self.looks[name] - 1)
        return super().__call__(request)


def start(podman: Podman) -> None:
    async def main() -> None:
        client = PodmanClient(transport=MockTransport(podman))
        session = lifecycle.Session(bundle=bundle(), host_gateway_ip="127.0.0.1", userns="auto")
        await lifecycle.start(client, pair(), session, "g2")

    asyncio.run(main())


def test_a_start_waits_for_podmans_cleanup_of_the_ended_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen in the VM lane on 5.4.2: a start just after the pair ended read the restart
    metadata while Podman's cleanup unmounted the supervisor, and got an empty archive."""
    podman = Uncleaned(looks=3)
    start(podman)
    assert "GET archive (after the cleanup)" in podman.seen and "GET archive (before the cleanup)" not in podman.seen
    assert podman.seen[-1].endswith("/start"), podman.seen
    monkeypatch.setattr(lifecycle, "CLEANUP_WAIT", 0.2)  # a cleanup that never comes: the start goes on
    with pytest.raises(PodmanUnavailable, match="Podman answered an empty archive; its log says why"):
        start(Uncleaned(looks=10**6))


class BrokenPipes(Podman):
    """Podman whose archive extraction dies mid-stream the first ``times`` uploads to the supervisor."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times = times

    def __call__(self, request: Request) -> Response:
        if request.method == "PUT" and f"/containers/{SUPERVISOR}/archive" in request.target and self.times:
            self.times -= 1
            self.seen.append(f"PUT /containers/{SUPERVISOR}/archive")
            message = "passing bulk input to subprocess: write |1: broken pipe"
            return Response(500, {}, json.dumps({"message": message, "response": 500}).encode())
        return super().__call__(request)


def test_an_upload_whose_extraction_broke_is_sent_again_a_bounded_few_times() -> None:
    """Seen on 4.3.1 and 5.8.6 under load: the same archive again; the third break stands."""
    podman = BrokenPipes(times=2)
    create(podman)
    assert podman.seen.count(f"PUT /containers/{SUPERVISOR}/archive") == 3
    assert podman.seen[-1].startswith("POST /containers/") and podman.seen[-1].endswith("/start")
    broken = BrokenPipes(times=lifecycle.UPLOAD_TRIES)
    with pytest.raises(PodmanError, match="broken pipe"):
        create(broken)
    assert broken.seen.count(f"PUT /containers/{SUPERVISOR}/archive") == lifecycle.UPLOAD_TRIES
