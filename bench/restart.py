"""A podmand restart at N sandboxes, alone: what bench/scale.py's restart row measures once,
repeated, with the restarted process's own account of where the time went.

    flock -o /tmp/podmand-e2e.lock python3 bench/restart.py [--pex dist/podmand.pex] [-n 200] [-k 5]
        [--user podmand] [--podman /run/user/1001/podman/podman.sock]

Run as root against the rootless Podman of tests/setup-podman.sh (or, as bench/scale.py
says, inside the Debian 13 tree for Podman 5.4.2).  Builds N sleeping sandboxes through
podmand (each a pair, with its launch bundle: bench/scale.py's creates), waits until a
stream has each Ready, then restarts podmand K times (SIGTERM, then a new process): for
each, the seconds from exec to the first answered
GetCapabilities ("accepting") and to health SERVING, next to the anchor a restart
cannot beat, Podman's ``/info`` with one list alongside, made raw while podmand is
stopped.  Each restart runs at debug level; the last one's log lines up to its ready
line are printed with their offsets from the first, to show the steps.  Everything
made is deleted at the end (bench/scale.py's clean-up).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import datetime
import os
import sys
from pathlib import Path
from statistics import median as med

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._scale_host import HostLimits, rootless_target
from bench._scale_report import ms
from bench._scale_watch import Watch
from bench.scale import PREFIX, Bench, measure_with

ROOT = Path(__file__).resolve().parents[1]


def steps(log: str) -> list[str]:
    """A start's lines up to its ready line, each with its offset from the first."""
    out, begin = [], None
    for line in log.splitlines():
        try:
            at = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        begin = at if begin is None else begin
        out.append(f"  +{(at - begin) * 1000:6.0f} ms {line[24:160]}")
        if " ready: serving " in line:
            break
    return out


async def restarts(bench: Bench, k: int) -> None:
    bench.version = await bench.podman_version()
    print(f"Podman {bench.version} on {bench.args.podman}; podmand: building {bench.n}", flush=True)
    bench.daemon.start()
    stub = await bench.connect()
    await bench.build(Watch(stub).start())
    await bench.watch.close()
    print(f"podmand: {len(bench.sids)} Ready; {k} restarts", flush=True)
    rows = []
    for _ in range(k):
        bench.daemon.stop()
        floor = med([await bench.info_and_list() for _ in range(3)])
        bench.daemon.log.write_bytes(b"")
        accepting, serving = bench.daemon.start()
        rows.append((accepting, serving, floor))
        print(f"  accepting {ms(accepting)}, SERVING {ms(serving)}; raw /info + list {ms(floor)}", flush=True)
    print("the last restart's log:")
    print("\n".join(steps(bench.daemon.log.read_text(errors="replace"))))
    accepting, serving, floor = (med(col) for col in zip(*rows, strict=True))
    print(f"\nrestart with {len(bench.sids)} sandboxes, median of {k} (Podman {bench.version}): accepting "
          f"{ms(accepting)}, SERVING {ms(serving)}; raw /info + list {ms(floor)} (SERVING {serving / floor:.2f}x)")
    stub = await bench.connect()
    bench.watch = Watch(stub).start()
    await bench.watch.until(lambda: all(s in bench.watch.ready for s in bench.sids), 300, "the snapshot after")
    print("podmand: deleting all", flush=True)
    await bench.delete_all()
    await bench.watch.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pex", default=str(ROOT / "dist" / "podmand.pex"))
    parser.add_argument("--source", default="", help="a checkout to run as `python -m podmand` instead of a pex")
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("-k", type=int, default=5, help="restarts measured")
    parser.add_argument("--user", default=os.environ.get("PODMAND_TEST_USER", "podmand"))
    parser.add_argument("--podman", default="")
    args = parser.parse_args()
    uid = rootless_target(args, "host limits, the rootless user's podmand")
    args.idle = args.n + 1  # no idle window
    limits = HostLimits(args.user, uid, args.podman)
    atexit.register(limits.restore)
    bench: Bench | None = None
    try:
        limits.apply(args.n)
        bench = Bench(args)
        bench.daemon.env["OPENSHELL_LOG_LEVEL"] = "debug"
        print(f"sandbox ids {PREFIX}*", flush=True)
        asyncio.run(measure_with(bench, restarts(bench, args.k)))
    finally:
        if bench is not None:
            bench.daemon.cleanup()
        limits.restore()


if __name__ == "__main__":
    main()
