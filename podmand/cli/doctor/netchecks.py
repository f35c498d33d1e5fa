"""The checks of ``podmand doctor`` for what sandboxes dial: the gateway, at the endpoint
they are given (host/gatewayreach.py decides from the facts host/netfacts.py gathers on
this host, whose network the supervisor shares), and the corporate proxy (it
accepts connections; for ``https://`` a TLS handshake verifies it as the supervisor
would, against the system roots plus ``proxy_ca_bundle``).

``check_proxy`` is pure; :func:`checks` gathers the facts, for report.py.
"""

from __future__ import annotations

import asyncio

from ... import config
from ...host import gatewayreach, netfacts
from ...sandbox import proxy
from .hostchecks import Check, fail, ok, warn

REACH = "gateway reach"
PROXY = "corporate proxy"


def check_proxy(url: str | None, ca_bundle: str | None, auth: bool, problem: str) -> Check:
    """What connecting to the proxy (and, for https://, verifying it) found: ``problem`` is
    netfacts.proxy_handshake's answer, "" when it worked."""
    if url is None:
        return ok(PROXY, "no https_proxy: supervisors dial out directly")
    shown = proxy.trim(url)
    if problem.startswith("TLS handshake"):
        return fail(PROXY, f"{shown}: {problem}; every sandbox's supervisor would refuse the proxy the same way",
                    f"set {config.describe('proxy_ca_bundle')} to the PEM of the CA that signed the proxy's "
                    "certificate, whose names must include the proxy URL's host")
    if problem:
        return warn(PROXY, f"{shown}: {problem} (from this host)",
                    f"check {config.describe('https_proxy')}'s host and port; a proxy only sandboxes can reach "
                    "cannot be checked from here")
    if proxy.secure(url):
        roots = "the system roots and proxy_ca_bundle" if ca_bundle else "the system roots"
        sent = "; proxy_auth_file's credential travels inside that TLS session" if auth else ""
        return ok(PROXY, f"{shown} completes a TLS handshake verified against {roots}{sent}")
    sent = "; proxy_auth_file's credential travels as cleartext Basic auth (acknowledged)" if auth else ""
    return ok(PROXY, f"{shown} accepts connections (plain TCP to the proxy){sent}")


async def checks(settings: config.Settings) -> list[Check]:
    """The gateway's reach from a sandbox's supervisor, then the corporate proxy. Neither
    asks Podman: the supervisor dials from this host's network."""
    reach = gatewayreach.decide(await asyncio.to_thread(netfacts.facts, settings))
    found = [Check(REACH, reach.status, reach.finding, reach.fix)]
    problem = ""
    if settings.https_proxy is not None:
        problem = await asyncio.to_thread(netfacts.proxy_handshake, settings.https_proxy,
                                          settings.proxy_ca_bundle or "")
    found.append(check_proxy(settings.https_proxy, settings.proxy_ca_bundle, bool(settings.proxy_auth_file), problem))
    return found
