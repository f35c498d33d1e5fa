"""How ``podmand serve`` is told to stop, and how hard.

The first SIGTERM or SIGINT asks for a graceful stop: in-flight RPCs get a grace,
background work a deadline. A second one forces it: every wait still pending is cut
short, and only the steps that leave no mess behind (sockets, lock) still run.
SIGUSR1 logs every task's stack. The handlers podmand replaced are put back when it
is done, so the process is left as it was found.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Iterator

log = logging.getLogger("podmand")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stop:
    """Whether a stop was asked for (first signal, or a crash) or forced (second signal),
    and the exit status it leaves: 0 for a stop asked by a signal, 1 otherwise."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.forced = asyncio.Event()
        self.status = 0
        self._signalled = False  # a crash asks too; only a second *signal* forces

    def on_signal(self, sig: signal.Signals) -> None:
        if not self._signalled:
            self._signalled = True
            self.asked.set()
            return
        if not self.forced.is_set():
            log.warning("second signal (%s): exiting without finishing", sig.name)
            self.status = 1
            self.forced.set()

    def fail(self, message: str, exc: BaseException) -> None:
        """Something podmand cannot serve without broke: stop, and exit 1."""
        log.critical("%s", message, exc_info=exc)
        self.status = 1
        self.asked.set()

    async def unless_asked(self, work: Awaitable[None]) -> bool:
        """Run ``work`` unless a stop is asked for first (it is then cancelled): True when it ran."""
        return await until(work, self.asked)

    async def unless_forced(self, work: Awaitable[None], deadline: float | None = None) -> bool:
        """Wait for ``work`` until it is done, ``deadline`` seconds passed or the stop is
        forced (then it is cancelled): True when it finished."""
        return await until(work, self.forced, deadline)


async def until(work: Awaitable[None], event: asyncio.Event, deadline: float | None = None) -> bool:
    """Await ``work`` until it is done (True; its exception is raised), ``event`` is set or
    ``deadline`` passed (False, after cancelling it and waiting for it to end)."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait((task, waiter), timeout=deadline, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # we are cancelled ourselves: the work goes with us
        task.cancel()
        raise
    finally:
        waiter.cancel()
    if task in done:
        task.result()
        return True
    task.cancel()
    await asyncio.wait((task,))
    failure = None if task.cancelled() else task.exception()
    if failure is not None:  # it failed while being cancelled
        raise failure
    return False


@contextlib.contextmanager
def capture_signals(on_stop: Callable[[signal.Signals], None]) -> Iterator[None]:
    """While the block runs, SIGTERM and SIGINT call ``on_stop`` on the running loop and
    SIGUSR1 dumps the tasks; afterwards the handlers found before are back in place."""
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in (*STOP_SIGNALS, signal.SIGUSR1)}
    try:
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, on_stop, sig)
        loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
        yield
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            if handler is not None:  # None: installed outside Python, nothing we can put back
                signal.signal(sig, handler)


def dump_tasks() -> None:
    """SIGUSR1: log every asyncio task's stack, for diagnosing a stuck daemon."""
    for task in asyncio.all_tasks():
        frames = task.get_stack(limit=8)
        where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in reversed(frames))
        log.warning("task %s: %s", task.get_name(), where or "(not started)")
