"""Pulls that never finish: a registry that accepts and then says nothing must not
hang a create forever. With ``pull_inactivity_timeout`` podmand abandons a pull
that has been silent that long (closing the stream, which makes libpod cancel it)
and fails the sandbox with a terminal reason. The fake libpod plays both silences:
answer headers then nothing, and no answer at all. (That a slow pull which keeps
talking is never cut is a fake-clock unit test: tests/unit/sandbox/test_pullprogress.py.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from podmand._proto import compute_driver_pb2 as pb
from tests.fakes.libpod import FakeLibpod, Feed, Hang, Request, Stream

# The launch fixture and helpers of the main fault tests, shared (tmp and fake: tests/conftest.py).
from tests.faults.test_faults import Podmand, launch, ready, sandbox, wait_until  # noqa: F401


def get_ready(d: Podmand, sandbox_id: str) -> pb.DriverCondition:
    return ready(d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=sandbox_id), timeout=5).sandbox)


@pytest.mark.parametrize("silence", ["after-headers", "no-answer"])
def test_silent_pull_is_abandoned_with_a_terminal_reason(
        silence: str, fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:  # noqa: F811
    feed = Feed(fake)
    default_pull = fake._pull

    def pull(req: Request) -> Any:
        if req.query.get("reference") != "img:1":
            return default_pull(req)  # the supervisor image pulls as usual
        return Stream(feed) if silence == "after-headers" else Hang()

    fake.route("POST", "/images/pull", pull)
    d = launch(PODMAND_PULL_INACTIVITY_TIMEOUT="1").wait_ready()
    d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
    fake.wait_for(lambda: fake.count(r"POST .*/images/pull\?.*reference=img:1") == 1, what="the sandbox image pull")
    if silence == "after-headers":
        fake.wait_for(lambda: feed.opened == 1, what="the pull stream")
        feed.send({"stream": "Trying to pull img:1...\n"})  # one line, then nothing

    cond = wait_until(lambda: (c := get_ready(d, "sb1")).reason == "ImagePullFailed" and c, "ImagePullFailed")
    assert cond.status == "False"
    # Before the first line Podman 6 may be silent for 5 s by design: the wait for it is at
    # least pullprogress.HEAD_HOLD (6 s); after it, the setting alone counts.
    waited = 1 if silence == "after-headers" else 6
    assert cond.message == f"no progress from Podman for {waited} s pulling 'img:1' (pull_inactivity_timeout)"
    # Nothing is left behind: the pull's connection is closed (for libpod: cancel the pull),
    # it is not retried, and no sandbox container was made (only the image readers).
    if silence == "after-headers":
        fake.wait_for(lambda: not feed._queues, what="podmand to close the pull stream")
        assert feed.opened == 1
    assert fake.count(r"POST .*/images/pull\?.*reference=img:1") == 1
    readers = fake.count(r"GET .*/containers/podmand-read-[^/]+/archive")
    assert len(fake.created()) == readers
    # The failure's log line may follow the snapshot that reported it.
    wait_until(lambda: "no progress from Podman" in d.log, "the failure's log line")
    assert get_ready(d, "sb1").reason == "ImagePullFailed"



def test_a_pull_line_podman_should_never_send_fails_the_sandbox(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:  # noqa: F811
    """An answer podmand cannot read (a pull line that is not JSON) is a bug somewhere, but
    it must end as a Ready=False condition, never as a provisioning task that died silently
    and left the sandbox "Starting" forever."""
    feed = Feed(fake)
    default_pull = fake._pull
    fake.route("POST", "/images/pull",
               lambda req: Stream(feed) if req.query.get("reference") == "img:1" else default_pull(req))
    d = launch().wait_ready()
    d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
    fake.wait_for(lambda: feed.opened == 1, what="the pull stream")
    feed.send(b"{not json")
    cond = wait_until(lambda: (c := get_ready(d, "sb1")).reason == "ProvisioningFailed" and c, "ProvisioningFailed")
    assert cond.status == "False" and cond.message.startswith("unexpected error: "), cond
    assert "unexpected error while provisioning" in d.log
    assert len(fake.created()) == fake.count(r"GET .*/containers/podmand-read-[^/]+/archive")
