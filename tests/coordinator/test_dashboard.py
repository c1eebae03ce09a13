"""The dashboard at /: served without a token, holding no data; everything it
shows comes from documented API routes."""

from __future__ import annotations

import re

import aiohttp
import pytest

from coordinator.server._routes import ROUTES
from tests.coordinator.server_fixtures import serve


def _api_paths(html: str) -> set[str]:
    """Every /v1 path the page's script calls, with ${...} as a path parameter."""
    found = re.findall(r"[`\"'}](/v1/[^`\"'?]*)", html)
    return {re.sub(r"\$\{[^}]*\}", "{x}", p) for p in found}


def _matches(path: str) -> bool:
    for route in ROUTES:
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", route.path) + "$"
        if re.match(pattern, path.replace("{x}", "x")):
            return True
    return False


@pytest.mark.slow
async def test_dashboard_is_served_and_uses_only_documented_routes(tmp_path, sample_repo):
    async with serve(tmp_path / "s", sample_repo) as srv, aiohttp.ClientSession() as http:
        async with http.get(srv.url + "/") as r:
            assert r.status == 200
            assert r.content_type == "text/html"
            assert "default-src 'self'" in r.headers["Content-Security-Policy"]
            html = await r.text()
        assert "<title>Corral</title>" in html
        assert "innerHTML" not in html  # data goes in with textContent only
        paths = _api_paths(html)
        assert {"/v1/graph", "/v1/gate/pending", "/v1/events", "/v1/health"} <= paths
        for path in paths:
            assert _matches(path), f"the dashboard calls {path}, which is no route"
        async with http.get(srv.url + "/openapi.json") as r:
            assert "/" in (await r.json())["paths"]


@pytest.mark.slow
async def test_event_stream_carries_the_summary_the_dashboard_shows(tmp_path, sample_repo):
    async with serve(tmp_path / "s", sample_repo) as srv:
        c = srv.client
        await c.fork("root", "a")
        async with c.subscribe(types=["effect"]) as stream:
            await c.write("a", "src/x.py", b"x = 1\n")
            event = await stream.__anext__()
        assert event["summary"] == "fs.write src/x.py"
        assert event["effect"]["intent"]["path"] == "src/x.py"
