"""``podmand doctor``'s ``traces`` line: whether the OTLP collector ``otlp_endpoint``
names takes an export.

Without an endpoint traces are off, which is fine. With one, an empty export is sent
(``tracing.probe``): a collector that refuses it or does not answer is a warning, not
a failure, since podmand serves without it (its spans are dropped, one log line per
failed batch).
"""

from __future__ import annotations

import asyncio

from ... import tracing
from .hostchecks import Check, ok, warn


def check_traces(endpoint: str, problem: str, gateway_name: str = "") -> Check:
    if not endpoint:
        return ok("traces", "off (no otlp_endpoint)")
    if not problem:
        named = f", openshell.gateway.name {gateway_name.strip()}" if gateway_name.strip() else ""
        return ok("traces", f"the OTLP collector at {endpoint} takes exports (service.name {tracing.SERVICE_NAME}"
                            f"{named})")
    return warn(
        "traces",
        f"the OTLP collector at {endpoint} did not take an export ({problem}): spans would be dropped",
        "start the collector, or correct --otlp-endpoint / OPENSHELL_OTLP_ENDPOINT (its OTLP/gRPC port, "
        "often 4317)",
    )


async def traces(endpoint: str, gateway_name: str = "") -> Check:
    problem = await asyncio.to_thread(tracing.probe, endpoint) if endpoint else ""
    return check_traces(endpoint, problem, gateway_name)
