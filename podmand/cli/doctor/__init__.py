"""``podmand doctor``: check what real hosts get wrong, and say how to fix each.

``report`` gathers the facts and prints the findings; the decisions are pure
functions of those facts: ``hostchecks``, ``servicechecks`` (the Podman service),
``versionchecks`` (what depends on its version), ``eventchecks`` (its event
stream) and ``capacitychecks``.
"""

__all__ = [
    "report",
]
