"""libpod/routes.py: request targets, and the route templates an observer is told."""

from __future__ import annotations

import pytest

from podmand.libpod import MockTransport, PodmanClient, routes
from podmand.libpod.transport import Request, Response


@pytest.mark.parametrize(("method", "target", "route"), [
    ("GET", "/v4.0.0/libpod/containers/openshell-sandbox-a%2Fb/json", "/libpod/containers/{name}/json"),
    ("POST", "/v4.0.0/libpod/containers/create", "/libpod/containers/create"),
    ("GET", "/v4.0.0/libpod/containers/json?all=true&filters=%7B%7D", "/libpod/containers/json"),
    ("DELETE", "/v4.0.0/libpod/containers/abc?force=true", "/libpod/containers/{name}"),
    ("DELETE", "/v4.0.0/libpod/images/json", "/libpod/images/{name}"),  # an image called json
    ("POST", "/v4.0.0/libpod/images/pull?reference=reg.example%2Fimg%3A1&policy=missing", "/libpod/images/pull"),
    ("GET", "/v4.0.0/libpod/images/reg.example%2Fimg%3A1/exists", "/libpod/images/{name}/exists"),
    ("GET", "/v4.0.0/libpod/volumes/openshell-ws/json", "/libpod/volumes/{name}/json"),
    ("GET", "/v4.0.0/libpod/info", "/libpod/info"),
    ("GET", "/v4.0.0/libpod/events?stream=true", "/libpod/events"),
    ("GET", "/_ping", "/_ping"),
])
def test_a_route_template_holds_no_name_and_no_query(method: str, target: str, route: str) -> None:
    assert routes.template(method, target) == route


def test_the_client_tells_its_observer_each_call_and_its_status() -> None:
    """Buffered and streamed calls alike: method, template, then the answer's status."""
    seen: list[tuple[str, str, int]] = []

    def observe(method: str, route: str):  # type: ignore[no-untyped-def]
        import contextlib

        @contextlib.contextmanager
        def call():  # type: ignore[no-untyped-def]
            yield lambda status: seen.append((method, route, status))

        return call()

    def answer(req: Request) -> Response:
        if "/images/pull" in req.target:
            return Response(200, {}, b'{"id":"x"}\n')
        return Response(404, {}, b'{"message":"no such container"}')

    async def main() -> None:
        client = PodmanClient(transport=MockTransport(answer))
        client.observe = observe
        assert await client.inspect_container_or_none("sb/1") is None
        async for _line in client.pull_image("reg.example/img:1", "missing", auth="c2VjcmV0"):
            pass

    import asyncio

    asyncio.run(main())
    assert seen == [("GET", "/libpod/containers/{name}/json", 404), ("POST", "/libpod/images/pull", 200)]
