"""The dashboard at /: served without a token, holding no data; everything it
shows comes from documented API routes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import aiohttp
import pytest

from coordinator import GateRule
from coordinator._routes import ROUTES
from tests.coordinator.server_fixtures import ADMIN, serve

PAGE = (__import__("coordinator").__path__[0]) + "/_static/dashboard.html"


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
        assert {"/v1/scopes", "/v1/gate/pending", "/v1/events", "/v1/health"} <= paths
        for path in paths:
            assert _matches(path), f"the dashboard calls {path}, which is no route"
        async with http.get(srv.url + "/openapi.json") as r:
            assert "/" in (await r.json())["paths"]


async def test_event_stream_carries_the_summary_the_dashboard_shows(tmp_path, sample_repo):
    async with serve(tmp_path / "s", sample_repo) as srv:
        c = srv.client
        await c.fork("root", "a")
        async with c.subscribe(types=["effect"]) as stream:
            await c.write("a", "src/x.py", b"x = 1\n")
            event = await stream.__anext__()
        assert event["summary"] == "fs.write src/x.py"
        assert event["effect"]["intent"]["path"] == "src/x.py"


def test_dashboard_script_parses():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the script's syntax is not checked here")
    html = open(PAGE, encoding="utf-8").read()
    script = html.split("<script>", 1)[1].split("</script>", 1)[0]
    proc = subprocess.run([node, "--check", "--input-type=commonjs", "-"], input=script,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _jsdom() -> str | None:
    node = shutil.which("node")
    if node is None:
        return None
    probe = subprocess.run([node, "-e", "require.resolve('jsdom')"], capture_output=True)
    return node if probe.returncode == 0 else None


async def test_dashboard_in_a_dom_shows_scopes_and_answers_the_gate(tmp_path, sample_repo):
    """The page's script run in jsdom against a real server: it lists the scopes,
    shows the held intent, its reject button blocks it, and live events arrive.
    Needs node with jsdom resolvable (e.g. NODE_PATH=<dir>/node_modules after
    `npm install jsdom` in <dir>); skips otherwise."""
    node = _jsdom()
    if node is None:
        pytest.skip("node with jsdom is not available (npm install jsdom; set NODE_PATH)")
    script = Path(__file__).with_name("dashboard_check.js")
    async with serve(tmp_path / "s", sample_repo,
                     gate=[GateRule.parse("fs.write:held/*")]) as srv:
        c = srv.client
        await c.fork("root", "alice")
        await c.fork("root", "bob")
        await c.write("alice", "a.txt", b"a\n")
        held = asyncio.create_task(c.write("bob", "held/x.txt", b"x\n"))
        await asyncio.sleep(0.3)
        proc = await asyncio.create_subprocess_exec(
            node, "--experimental-websocket", str(script), srv.url, ADMIN,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ})
        await asyncio.sleep(2.0)
        await c.write("alice", "b.txt", b"b\n")
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        first, after = (json.loads(line) for line in out.decode().splitlines()[:2])
        r = await asyncio.wait_for(held, 10)
    assert first["status"] == "live"
    assert first["scopes"] == ["root", "alice", "bob"]
    assert first["gate"] == ["fs.write held/x.txt"]
    assert not r.ok and "rejected at the gate" in r.reason
    assert after["gate_after"] == 0
    assert any("alice#2 | fs.write b.txt" in e for e in after["events"])
