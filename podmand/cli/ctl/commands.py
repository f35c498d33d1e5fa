"""The commands of ``podmand ctl``: each is one method of :class:`Ctl`, which
makes the calls and hands what it got to ctlview to render. ctl imports this
module only to run a command, so grpc and protobuf load at the top."""

from __future__ import annotations

import argparse
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO

import grpc

from ..._proto import compute_driver_pb2 as pb
from ..._proto import compute_driver_pb2_grpc as pb_grpc
from ...sandbox.pullprogress import HEARTBEAT
from . import launch, podmanfacts, view
from .requests import build_sandbox, gateway_metadata, redact
from .view import emit_json, to_dict

RETRY_CODES = ("UNAVAILABLE", "CANCELLED", "RESOURCE_EXHAUSTED", "INTERNAL", "UNKNOWN")
MAX_BACKOFF = 10.0

# What _pump hands create --wait: an event, None when the stream ended, or the stream's error.
Pumped = pb.WatchSandboxesEvent | Exception | None


class Steps:
    """create --wait's running account on stderr: one line per step, and on a TTY
    one progress bar line for a pull, redrawn in place."""

    def __init__(self, out: TextIO, tty: bool) -> None:
        self.out = out
        self.tty = tty
        self.bar = False
        self.last: tuple[str, str, str] | None = None

    def show(self, event: pb.WatchSandboxesEvent) -> None:
        if view.is_pull_progress(event) and self.tty:
            self.out.write("\r\x1b[K" + view.progress_bar(event.platform_event.event.metadata))
            self.bar = True
            self.out.flush()
            return
        if event.WhichOneof("payload") == "sandbox":
            cond = view.ready_of(event.sandbox.sandbox)
            key = (cond.status, cond.reason, cond.message) if cond is not None else None
            if key is None or key == self.last:
                return
            self.last = key
        line = view.step_line(event)
        if line is not None:
            self.end()
            self.out.write(line + "\n")
            self.out.flush()

    def end(self) -> None:
        if self.bar:
            self.out.write("\n")
            self.bar = False


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM ends a long-running command like Ctrl-C; SIGINT is set too because a
    shell starts background jobs ('ctl watch &') with it ignored."""
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Ctl:
    def __init__(self, args: argparse.Namespace, path: str) -> None:
        self.args = args
        self.path = path
        self.timeout: float = args.timeout
        self.output = "json" if args.json or args.output == "json" else (args.output or "")
        self._channel: grpc.Channel | None = None
        self._default_image: str | None = None

    @property
    def stub(self) -> pb_grpc.ComputeDriverStub:
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{self.path}")
        return pb_grpc.ComputeDriverStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Drop the channel; the next call connects afresh (no inherited reconnect backoff)."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    @property
    def json(self) -> bool:
        return self.output == "json"

    def _caps(self) -> pb.GetCapabilitiesResponse:
        request = pb.GetCapabilitiesRequest(gateway=gateway_metadata())
        answer: pb.GetCapabilitiesResponse = self.stub.GetCapabilities(request, timeout=self.timeout)
        return answer

    def _facts(self) -> dict[str, podmanfacts.Facts]:
        """Podman's facts per sandbox, images defaulted to the driver's."""
        found = podmanfacts.facts(podmanfacts.socket_path(self.args.podman_socket), "")
        for fact in found.values():
            if not fact.image:
                if self._default_image is None:
                    self._default_image = self._caps().default_image
                fact.image = self._default_image or ""
        return found

    def do_caps(self) -> int:
        answer = self._caps()
        if self.json:
            emit_json(to_dict(answer))
        else:
            sys.stdout.write(view.pairs_text(view.flatten(to_dict(answer))))
        return 0

    def do_list(self) -> int:
        from ...host.discovery import NoPodmanSocket
        from ...libpod import PodmanError, PodmanUnavailable, PodmanUnreadable

        answer: pb.ListSandboxesResponse = self.stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=self.timeout)
        boxes = sorted(answer.sandboxes, key=lambda b: (b.workspace, b.name, b.id))
        if self.args.quiet:
            sys.stdout.write("".join(f"{b.id}\n" for b in boxes))
            return 0
        if self.json:
            emit_json([to_dict(redact(b)) for b in boxes])
            return 0
        facts: dict[str, podmanfacts.Facts] = {}
        if boxes:
            try:
                facts = self._facts()
            except (NoPodmanSocket, PodmanError, PodmanUnavailable, PodmanUnreadable) as exc:
                print(f"podmand ctl list: IMAGE and AGE unknown: {str(exc).splitlines()[0]}", file=sys.stderr)
        sys.stdout.write(view.table_text(view.list_rows(boxes, facts, wide=self.output == "wide")))
        return 0

    def do_get(self) -> int:
        answer: pb.GetSandboxResponse = self.stub.GetSandbox(
            pb.GetSandboxRequest(sandbox_id=self.args.id), timeout=self.timeout
        )
        box = redact(answer.sandbox)
        if self.json:
            emit_json(to_dict(box))
        else:
            sys.stdout.write(view.pairs_text(view.sandbox_pairs(box)))
        return 0

    def do_describe(self) -> int:
        from ...host.discovery import NoPodmanSocket
        from ...libpod import PodmanError, PodmanUnavailable, PodmanUnreadable

        answer: pb.GetSandboxResponse = self.stub.GetSandbox(
            pb.GetSandboxRequest(sandbox_id=self.args.id), timeout=self.timeout
        )
        box = redact(answer.sandbox)
        fact: podmanfacts.Facts | None = None
        events: list[podmanfacts.PastEvent] = []
        problem = ""
        try:
            fact = self._facts().get(box.id)
            if fact is not None and fact.container_id:
                path = podmanfacts.socket_path(self.args.podman_socket)
                events = podmanfacts.past_events(path, fact.container_id, fact.created)
        except (NoPodmanSocket, PodmanError, PodmanUnavailable, PodmanUnreadable) as exc:
            problem = str(exc).splitlines()[0]
        if self.json:
            emit_json(view.describe_dict(box, fact, events, problem))
        else:
            sys.stdout.write(view.describe_text(view.describe_sections(box, fact, events, problem)))
        return 0

    def do_logs(self) -> int:
        from ...names import is_id

        if not is_id(self.args.id):
            print(f"podmand ctl logs: {self.args.id!r} is not a sandbox id", file=sys.stderr)
            return 1
        path = podmanfacts.socket_path(self.args.podman_socket)
        fact = podmanfacts.facts(path, "").get(self.args.id)
        if fact is None or not fact.container_id:
            what = "has no container yet" if fact is not None else "is not known to Podman"
            print(f"podmand ctl logs: sandbox {self.args.id} {what}", file=sys.stderr)
            return 1
        with interruptible():
            try:
                podmanfacts.logs(path, fact.container_id, follow=self.args.follow, tail=self.args.tail)
            except KeyboardInterrupt:
                return 130
        return 0

    def do_stop(self) -> int:
        self.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=self.args.id), timeout=self.timeout)
        if self.json:
            emit_json({"id": self.args.id, "stopped": True})
        else:
            print(f"stopped: {self.args.id}")
        return 0

    def do_start(self) -> int:
        request = pb.StartSandboxRequest(sandbox_id=self.args.id)
        if self._needs_bundle():
            request.launch_authentication = launch.mint(self.args.id)
        answer: pb.StartSandboxResponse = self.stub.StartSandbox(request, timeout=self.timeout)
        if self.json:
            emit_json({"id": self.args.id, "runtime_identity": answer.runtime_identity})
        else:
            print(f"started: {self.args.id}\nruntime_identity: {answer.runtime_identity}")
        return 0

    def do_delete(self) -> int:
        answer: pb.DeleteSandboxResponse = self.stub.DeleteSandbox(
            pb.DeleteSandboxRequest(sandbox_id=self.args.id), timeout=self.timeout
        )
        if self.json:
            emit_json({"id": self.args.id, "deleted": answer.deleted})
        else:
            print(f"deleted: {view.scalar(answer.deleted)}")
        return 0

    def _needs_bundle(self) -> bool:
        """Whether the driver expects the gateway's launch bundle (launch.py says why)."""
        return not self._caps().supports_sandbox_authentication

    def do_create(self) -> int:
        box = build_sandbox(self.args)
        if not box.spec.launch_authentication and self._needs_bundle():
            box.spec.launch_authentication = launch.mint(box.id)
        # Opened first so the wait cannot miss an early terminal state (it starts with a snapshot anyway).
        stream = self.stub.WatchSandboxes(pb.WatchSandboxesRequest()) if self.args.wait else None
        try:
            answer: pb.CreateSandboxResponse = self.stub.CreateSandbox(
                pb.CreateSandboxRequest(sandbox=box), timeout=self.timeout
            )
            if self.json and not self.args.wait:
                emit_json({"id": box.id, "runtime_identity": answer.runtime_identity})
            elif not self.json:
                print(f"id: {box.id}\nruntime_identity: {answer.runtime_identity}", flush=True)
            if stream is None:
                return 0
            return self._wait(stream, box.id, answer.runtime_identity)
        finally:
            if stream is not None:
                stream.cancel()

    def _wait(self, stream: Iterable[pb.WatchSandboxesEvent], sandbox_id: str, identity: str) -> int:
        """Follow the sandbox until Ready=True or a Ready=False that will not recover,
        showing each step; give up only after ``timeout`` s without news of it."""
        from ...names import TRANSIENT_REASONS

        events: queue.Queue[Pumped] = queue.Queue()
        threading.Thread(target=_pump, args=(stream, events), daemon=True).start()
        steps = Steps(sys.stderr, sys.stderr.isatty())
        last: pb.DriverCondition | None = None
        outcome = "timeout"
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                item = events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is None:
                outcome = "ended"
                break
            if isinstance(item, Exception):
                raise item
            if _sandbox_of(item) != sandbox_id:
                continue
            kind = item.WhichOneof("payload")
            # While a pull is under way podmand repeats its Pulling event every HEARTBEAT s
            # (Podman is silent while a layer downloads): a shorter --timeout must not cut it.
            pulling = kind == "platform_event" and item.platform_event.event.reason == "Pulling"
            deadline = time.monotonic() + (max(self.timeout, 1.5 * HEARTBEAT) if pulling else self.timeout)
            steps.show(item)
            if kind == "deleted":
                outcome = "deleted"
                break
            if kind != "sandbox" or (cond := view.ready_of(item.sandbox.sandbox)) is None:
                continue
            last = cond
            if cond.status == "True":
                outcome = "ready"
                break
            if cond.status == "False" and cond.reason.lower() not in TRANSIENT_REASONS:
                outcome = "failed"
                break
        steps.end()
        self._wait_result(sandbox_id, identity, outcome, last)
        return 0 if outcome == "ready" else 1

    def _wait_result(self, sandbox_id: str, identity: str, outcome: str, last: pb.DriverCondition | None) -> None:
        if self.json:
            ready = to_dict(last) if last is not None else None
            emit_json({"id": sandbox_id, "runtime_identity": identity, "outcome": outcome, "ready": ready})
            return
        print(f"ready: {last.status if last is not None else '-'}\nreason: {last.reason if last is not None else '-'}")
        if last is not None and last.message:
            print(f"message: {last.message}")
        if outcome == "timeout":
            print(
                f"podmand ctl: nothing new about {sandbox_id} for {self.timeout:g}s (--timeout); it may still be "
                f"provisioning: see 'podmand ctl describe {sandbox_id}'",
                file=sys.stderr,
            )
        elif outcome in ("deleted", "ended"):
            print(f"podmand ctl: sandbox {outcome} while waiting", file=sys.stderr)

    def do_watch(self) -> int:
        from ..unreachable import message

        delay = 0.5
        with interruptible():
            while True:
                stream = self.stub.WatchSandboxes(pb.WatchSandboxesRequest())
                try:
                    for event in stream:
                        delay = 0.5
                        if self.json:
                            emit_json(view.event_dict(event, redact))
                        else:
                            print(view.event_line(event, wide=self.output == "wide"), flush=True)
                    why = "the watch stream ended"
                except KeyboardInterrupt:
                    stream.cancel()
                    return 130
                except grpc.RpcError as exc:
                    if not self.args.retry or exc.code().name not in RETRY_CODES:
                        raise
                    why = message(self.path, exc.code().name, exc.details() or "")
                if not self.args.retry:
                    print(f"podmand ctl: {why}", file=sys.stderr)
                    return 0
                print(f"podmand ctl: watch: {why}; reconnecting in {delay:g}s", file=sys.stderr, flush=True)
                try:
                    time.sleep(delay)
                except KeyboardInterrupt:
                    return 130
                delay = min(delay * 2, MAX_BACKOFF)
                self.close()


def _sandbox_of(event: pb.WatchSandboxesEvent) -> str:
    kind = event.WhichOneof("payload")
    if kind == "sandbox":
        return str(event.sandbox.sandbox.id)
    if kind == "platform_event":
        return str(event.platform_event.sandbox_id)
    if kind == "deleted":
        return str(event.deleted.sandbox_id)
    return ""


def _pump(stream: Iterable[pb.WatchSandboxesEvent], events: queue.Queue[Pumped]) -> None:
    """Move a stream's events into a queue: None when it ends, the error if it fails
    (a cancelled stream is the waiter's own doing and ends quietly)."""
    try:
        for event in stream:
            events.put(event)
        events.put(None)
    except grpc.RpcError as exc:
        events.put(None if exc.code() == grpc.StatusCode.CANCELLED else exc)
