"""The one table bench/scale.py prints: figure | podmand | raw | ratio | goal.

Each sandbox is a pair on both sides (bench/_pair.py): the raw column's calls are the
pair's (two volumes, two containers), and a raw read of a sandbox is two inspects."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def times(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b else "—"


@dataclass
class Measured:
    """Everything one run measured (seconds, sandboxes/s, CPU seconds, MB)."""

    n: int
    create: tuple[float, float]  # one at a time, medians: podmand, raw
    rate: tuple[float, float]  # batches of 32, median sandboxes/s
    cpu: tuple[float, float]  # Podman service CPU seconds per created sandbox
    get: tuple[float, float]  # GetSandbox, raw inspects of its workload and supervisor: medians
    stop: tuple[float, float]  # StopSandbox, raw stops (supervisor, workload)
    start: tuple[float, float]  # StartSandbox, raw starts (workload, supervisor)
    delete: tuple[float, float]  # all N, totals
    snapshot: tuple[float, float, float]  # new stream to the N-th sandbox; raw list; list + an inspect per container
    live: list[float]  # podmand's exit event minus the earliest raw observer, during new snapshots
    idle: tuple[int, float, float]  # sandboxes, Podman CPU (cores) with podmand, without
    exits: tuple[list[float], list[float], list[float]]  # after FinishedAt: podmand, raw /wait, raw event
    started: tuple[float, float]  # warm start to accepting, to SERVING: medians
    rss: tuple[float, float]  # podmand's RSS at 0 and at N sandboxes
    inspect: float  # one raw inspect (a workload's), median: the unit of Stop/Start's overhead
    # restart with that many sandboxes: exec to SERVING; raw /info and a list, alongside
    restarted: tuple[int, float, float] = (0, 0.0, 0.0)


def rows(m: Measured) -> list[tuple[str, str, str, str, str]]:
    med = statistics.median
    n = m.n
    inspect = m.inspect
    over_stop, over_start = m.stop[0] - m.stop[1], m.start[0] - m.start[1]
    podmand_exit = med(m.exits[0])
    earliest = med([min(w, e) for w, e in zip(m.exits[1], m.exits[2], strict=True)])
    count, with_, without = m.idle
    return [
        (
            "create → Ready, one at a time (median)",
            ms(m.create[0]),
            f"{ms(m.create[1])} (2 volumes, 2 creates, 2 starts)",
            times(*m.create),
            "≤ 1.10×",
        ),
        (
            "32 parallel creates → all Ready (median batch)",
            f"{m.rate[0]:.1f} /s",
            f"{m.rate[1]:.1f} /s",
            times(*m.rate),
            "≥ 1.0×",
        ),
        ("Podman service CPU per created sandbox", ms(m.cpu[0]), ms(m.cpu[1]), times(*m.cpu), "≤ 1.05×"),
        (f"GetSandbox at {n} (median)", ms(m.get[0]), f"{ms(m.get[1])} (2 inspects: workload, supervisor)",
         times(*m.get), "≤ 1.5×"),
        (
            f"StopSandbox at {n} (median)",
            ms(m.stop[0]),
            f"{ms(m.stop[1])} (2 stops)",
            f"{times(*m.stop)}; +{ms(over_stop)} = {over_stop / inspect:.1f} inspects",
            "overhead ≤ 1.5 inspects",
        ),
        (
            f"StartSandbox at {n} (median)",
            ms(m.start[0]),
            f"{ms(m.start[1])} (2 starts)",
            f"{times(*m.start)}; +{ms(over_start)} = {over_start / inspect:.1f} inspects",
            "overhead ≤ 1.5 inspects",
        ),
        (
            f"delete all {n} (8 in flight)",
            f"{m.delete[0]:.1f} s",
            f"{m.delete[1]:.1f} s (2 removes + 2 volumes each)",
            times(*m.delete),
            "≤ 1.2×",
        ),
        (
            f"new stream's snapshot at {n} (median)",
            ms(m.snapshot[0]),
            f"{ms(m.snapshot[2])} (list + {2 * n} inspects)",
            times(m.snapshot[0], m.snapshot[2]),
            "≤ 1.2×",
        ),
        (
            f"new stream's snapshot at {n} vs one list",
            ms(m.snapshot[0]),
            f"{ms(m.snapshot[1])} (one list)",
            times(m.snapshot[0], m.snapshot[1]),
            "—",
        ),
        (
            "exit event during 4 new snapshots, after earliest raw (median)",
            ms(med(m.live)),
            "0 (earliest raw)",
            f"max {ms(max(m.live))}",
            "≤ 50 ms",
        ),
        (
            f"Podman service CPU, {count} idle sandboxes",
            f"{with_ * 100:.1f} % of a core",
            f"{without * 100:.1f} % (podmand stopped)",
            f"+{(with_ - without) * 100:.1f} points",
            "≤ +1 point",
        ),
        (
            "exit → watch event after FinishedAt (median)",
            ms(podmand_exit),
            f"{ms(earliest)} (earliest of /wait, event)",
            f"+{ms(podmand_exit - earliest)}",
            "≤ +5 ms",
        ),
        ("warm start → accepting (GetCapabilities)", ms(m.started[0]), "—", "—", "≤ 300 ms"),
        ("warm start → SERVING (health)", ms(m.started[1]), "—", "—", "—"),
        (
            f"restart with {m.restarted[0]} sandboxes → SERVING",
            ms(m.restarted[1]),
            f"{ms(m.restarted[2])} (/info + list, raw); warm start with none {ms(m.started[1])}",
            f"+{ms(m.restarted[1] - m.restarted[2])} over raw",
            "≤ 500 ms",
        ),
        (f"podmand RSS idle: 0 / {n} sandboxes", f"{m.rss[0]:.0f} / {m.rss[1]:.0f} MB", "—", "—", "≤ 60 MB"),
    ]


def table(m: Measured) -> str:
    head = ("figure", "podmand", "raw", "ratio", "goal")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(m)]
    return "\n".join(lines)
