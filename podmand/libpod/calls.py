"""What the client tells an observer of its calls: a neutral hook, for tracing.

Each call to libpod (a buffered answer, or a streamed one for as long as it is
read) runs inside the observer's context manager, given the method and the
route template (``routes.template``: never a name, a query or a header); the
client reports the answer's status to what the context yields, and an exception
leaves through the context. The package knows nothing of who observes: the
edge sets :attr:`PodmanClient.observe <podmand.libpod.client.PodmanClient>`
when traces are on. By default nothing is observed, at the cost of one call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

Answered = Callable[[int], None]  # told the HTTP status of the answer
Observer = Callable[[str, str], AbstractContextManager[Answered]]  # (method, route template)


def _ignore(_status: int) -> None:
    return None


_UNOBSERVED = contextlib.nullcontext(_ignore)  # reusable: nullcontext holds no state


def unobserved(_method: str, _route: str) -> AbstractContextManager[Answered]:
    """The default observer: nothing."""
    return _UNOBSERVED
