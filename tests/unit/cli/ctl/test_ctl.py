"""ctl's command line, its socket-error words and its log demultiplexer."""

from __future__ import annotations

import ast
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

import podmand.cli
from podmand._proto import compute_driver_pb2 as pb
from podmand.cli import unreachable
from podmand.cli.ctl.commands import Ctl
from podmand.cli.ctl.podmanfacts import Demux
from podmand.cli.parser import parser


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return parser().parse_args(list(argv))


def test_output_flags_and_booleans() -> None:
    assert parse("ctl", "--json", "list").json is True
    assert parse("ctl", "list", "-o", "wide").output == "wide"
    args = parse("ctl", "-o", "json", "list", "-q")
    assert (args.output, args.quiet) == ("json", True)
    args = parse("ctl", "logs", "-f", "--tail", "5", "sb-1")
    assert (args.follow, args.tail, args.id) == (True, 5, "sb-1")
    assert parse("ctl", "watch", "--retry").retry is True
    assert parse("ctl", "describe", "sb-1").id == "sb-1"
    assert parse("ctl", "--podman-socket", "/p.sock", "logs", "x").podman_socket == "/p.sock"


def test_a_bad_flag_prints_the_commands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse("ctl", "logs", "--bogus", "sb-1")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: podmand ctl logs ") and "unrecognized arguments: --bogus" in err


def test_missing_socket_is_named(tmp_path: Path) -> None:
    path = str(tmp_path / "none.sock")
    text = unreachable.message(path, "UNAVAILABLE", "failed to connect to all addresses")
    assert text.startswith(f"no podmand is listening on {path} (") and "podmand serve" in text


def test_stale_socket_is_named(tmp_path: Path) -> None:
    path = str(tmp_path / "stale.sock")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(path)
    text = unreachable.message(path, "UNAVAILABLE", f"unix:{path}: connect failed: error: Connection refused")
    assert text.startswith(f"no podmand is listening on {path} (connection refused")


def test_http1_socket_is_named(tmp_path: Path) -> None:
    """Podman's API socket answers HTTP/1.1, which gRPC reports as 'Failed parsing HTTP/2'."""
    path = str(tmp_path / "podman.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    details = "failed to connect to all addresses; last error: UNAVAILABLE: Failed parsing HTTP/2 (Expected SETTINGS)"
    text = unreachable.message(path, "UNAVAILABLE", details)
    server.close()
    assert text == f"{path} is not a podmand driver socket (it speaks HTTP/1.1: Podman's API socket?)"


def test_not_a_socket_and_other_errors(tmp_path: Path) -> None:
    plain = tmp_path / "file"
    plain.write_text("")
    assert unreachable.message(str(plain), "UNAVAILABLE", "x").startswith(f"{plain} is not a socket")
    assert unreachable.message(str(plain), "NOT_FOUND", "sandbox x not found") == "NOT_FOUND: sandbox x not found"


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def test_demux_splits_frames_across_chunks() -> None:
    got: list[tuple[int, bytes]] = []
    demux = Demux(lambda stream, data: got.append((stream, data)))
    data = frame(2, b"openshell-sandbox: ready\n") + frame(1, b"out\n")
    for i in range(0, len(data), 5):
        demux.feed(data[i : i + 5])
    demux.close()
    assert got == [(2, b"openshell-sandbox: ready\n"), (1, b"out\n")]


def test_demux_passes_a_tty_stream_through() -> None:
    got: list[tuple[int, bytes]] = []
    demux = Demux(lambda stream, data: got.append((stream, data)))
    demux.feed(b"plain terminal output\n")
    demux.close()
    assert b"".join(d for _, d in got) == b"plain terminal output\n" and {s for s, _ in got} == {1}


def wait_with(events: list[Any], timeout: float, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Ctl._wait over a stream that yields ``events`` and then stays open until cancelled."""
    args = parser().parse_args(["ctl", "--timeout", str(timeout), "create", "--name", "x", "--wait"])
    done = threading.Event()

    class Stream:
        def __iter__(self) -> Any:
            yield from events
            done.wait(30)

    code = Ctl(args, "/nowhere.sock")._wait(Stream(), "sb-1", "podmand:i/g")
    done.set()
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(sandbox_id: str, status: str, reason: str) -> pb.WatchSandboxesEvent:
    box = pb.DriverSandbox(id=sandbox_id)
    box.status.conditions.add(type="Ready", status=status, reason=reason, message=reason)
    return pb.WatchSandboxesEvent(sandbox=pb.WatchSandboxesSandboxEvent(sandbox=box))


def test_wait_ends_on_ready_and_on_terminal_failure(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = wait_with([snapshot("sb-1", "False", "Starting"), snapshot("sb-1", "True", "Up")], 30, capsys)
    assert code == 0 and "ready: True" in out and "Ready=False" in err and "Ready=True" in err
    code, out, _ = wait_with([snapshot("sb-1", "False", "ImagePullFailed")], 30, capsys)
    assert code == 1 and "reason: ImagePullFailed" in out


def test_wait_times_out_on_silence_about_its_sandbox(capsys: pytest.CaptureFixture[str]) -> None:
    """Only news of this sandbox counts: others' events do not keep the wait alive."""
    others = [snapshot("other", "False", "Starting")] * 3
    code, out, err = wait_with([snapshot("sb-1", "False", "Starting"), *others], 0.2, capsys)
    assert code == 1 and "ready: False" in out
    assert "nothing new about sb-1 for 0.2s" in err and "other" not in err


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "soon"])
def test_timeout_must_be_finite_and_positive(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse("ctl", "--timeout", value, "list")
    assert exit_.value.code == 2 and "--timeout" in capsys.readouterr().err
    assert parse("ctl", "--timeout", "0.5", "list").timeout == 0.5


def test_a_launch_file_that_is_not_text_is_a_usage_error(tmp_path: Path) -> None:
    from podmand.cli.ctl.requests import Usage, build_sandbox

    bad = tmp_path / "bundle"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(Usage, match="not UTF-8 text"):
        build_sandbox(parse("ctl", "create", "--name", "d", "--launch-file", str(bad)))


def test_a_launch_file_is_sent_as_the_bundle(tmp_path: Path) -> None:
    """The gateway's bundle from a file (never an argument), as it is; empty is a usage error."""
    from podmand.cli.ctl.requests import Usage, build_sandbox

    bundle = tmp_path / "bundle.json"
    bundle.write_text('{"gateway_id":"gw"}\n')
    box = build_sandbox(parse("ctl", "create", "--name", "d", "--launch-file", str(bundle)))
    assert box.spec.launch_authentication == b'{"gateway_id":"gw"}' and not box.spec.sandbox_token
    bundle.write_text("\n")
    with pytest.raises(Usage, match="empty"):
        build_sandbox(parse("ctl", "create", "--name", "d", "--launch-file", str(bundle)))


def test_a_relative_socket_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gRPC reads unix://rel.sock as a host name; clients resolve it against their directory."""
    from podmand.config import driver_socket

    monkeypatch.chdir(tmp_path)
    assert driver_socket("rel.sock") == str(tmp_path / "rel.sock")
    assert driver_socket("unix:///abs/d.sock") == "/abs/d.sock"


def test_a_pull_under_way_outlasts_a_short_timeout(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """podmand repeats Pulling only every HEARTBEAT s while Podman downloads a layer in
    silence: after a Pulling event the wait allows 1.5 heartbeats even with a shorter --timeout."""
    from podmand.cli.ctl import commands

    monkeypatch.setattr(commands, "HEARTBEAT", 0.4)
    pulling = pb.WatchSandboxesEvent(platform_event=pb.WatchSandboxesPlatformEvent(
        sandbox_id="sb-1", event=pb.DriverPlatformEvent(reason="Pulling", message="Pulling image img: 0 of 1 layers")))
    args = parser().parse_args(["ctl", "--timeout", "0.05", "create", "--name", "x", "--wait"])
    silence = threading.Event()

    class Stream:
        def __iter__(self) -> Any:
            yield pulling
            silence.wait(0.3)  # Podman says nothing for longer than --timeout, less than 1.5 heartbeats
            yield snapshot("sb-1", "True", "Up")
            silence.wait(30)

    code = Ctl(args, "/nowhere.sock")._wait(Stream(), "sb-1", "podmand:i/g")
    silence.set()
    assert code == 0, capsys.readouterr()


def test_ctl_modules_never_fall_back_to_any() -> None:
    """Strict mypy checks ctl only as far as its types are real: typing.Any appears in none of cli/ctl/*.py."""
    paths = sorted((Path(podmand.cli.__file__).parent / "ctl").glob("*.py"))
    assert len(paths) >= 6
    for path in paths:
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert "Any" not in names, f"{path.name} uses typing.Any"


def test_a_pairs_channel_volume_does_not_hide_its_record() -> None:
    """A sandbox has two volumes: its record (the intent: image, command) and the pair's channel
    volume (no intent). Listed in either order, the record's command stays (Podman 5.4.2 listed
    the channel volume second, and describe said "(the image's)")."""
    import asyncio

    from podmand import names
    from podmand.cli.ctl import podmanfacts
    from podmand.sandbox.spec import encode_intent
    from tests.fakes.harness import libpod
    from tests.jwt import make_launch

    box = pb.DriverSandbox(id="sb-1", name="n", workspace="ws", spec=pb.DriverSandboxSpec(
        command=["sleep", "600"], launch_authentication=make_launch("sb-1", "g1")))
    record = {"Name": names.volume_name("sb-1"), "Labels": {
        names.OWNER: names.OWNER_VALUE, names.SANDBOX_ID: "sb-1", names.INTENT: encode_intent(box)[1]}}
    channel = {"Name": names.channel_volume_name("sb-1"), "Labels": {
        names.OWNER: names.OWNER_VALUE, names.SANDBOX_ID: "sb-1"}}

    async def main(volumes: list[dict[str, Any]]) -> list[str]:
        async with libpod() as (fake, client):
            fake.route("GET", "/volumes/json", (200, {}, volumes))
            return (await podmanfacts._facts("", "default", client))["sb-1"].command

    for order in ([record, channel], [channel, record]):
        assert asyncio.run(main(order)) == ["sleep", "600"]
