"""A team's tools over MCP, through the official SDK's client: on the server's streamable
HTTP transport (a scope in one team has them) and over stdio (`corral mcp --team`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from agents.mcp_server import MCP_TEAM_TOOLS, MCP_TOOLS
from tests.agents.test_mcp import _corral, _http, _text
from tests.conftest import make_repo
from tests.coordinator.server_fixtures import Served, serve

pytestmark = pytest.mark.asyncio


async def _team(srv: Served) -> dict[str, str]:
    """lead and ui in team dev; their tokens."""
    c = srv.client
    tokens = {n: (await c.fork("root", n)).token for n in ("lead", "ui")}
    await c.create_team("dev", ["lead", "ui"], lead="lead")
    return tokens


async def _as_ui(srv: Served, client: Any) -> None:
    """ui's part, the same over any transport: the lead has added t1 for ui and t2 for
    itself, and written plan.md."""
    lead = srv.client.team("lead", "dev")
    names = {t.name for t in (await client.list_tools()).tools}
    assert names == set(MCP_TOOLS) | set(MCP_TEAM_TOOLS)

    listed = await client.call_tool("tasks", {})
    assert not listed.is_error
    assert _text(listed).splitlines() == ["t1 [open] for=ui build the form",
                                          "t2 [open] for=lead wire the route"]
    lost = await client.call_tool("task_claim", {"task": "t2"})
    assert lost.is_error and "you did not get t2: lead has it" in _text(lost)
    won = await client.call_tool("task_claim", {"task": "t1"})
    assert not won.is_error and _text(won) == "you own t1"
    refused = await client.call_tool("task_release", {"task": "t2"})
    assert refused.is_error and "only its owner or the lead" in _text(refused)

    plan = await client.call_tool("pad_read", {"path": "plan.md"})
    assert _text(plan) == "ui: the form\n"
    wrote = await client.call_tool("pad_write", {"path": "plan.md",
                                                 "content": "ui: the form (done)\n"})
    assert not wrote.is_error, _text(wrote)
    # the lead's write over the version it had: the guard blocks the lost update
    assert (await lead.write("plan.md", b"lead: rewrote it\n")).blocked
    assert await lead.read("plan.md") == b"ui: the form (done)\n"

    asked = await client.call_tool("request", {"to": "lead", "kind": "review",
                                               "body": "the form?"})
    assert _text(asked).startswith("sent request r1 to lead")
    assert (await lead.respond("r1", "merge it")).ok
    got = await client.call_tool("wait_response", {"request": "r1", "timeout": 5})
    assert _text(got) == "response from lead: merge it"
    done = await client.call_tool("task_complete", {"task": "t1", "note": "form.py"})
    assert not done.is_error
    assert [t.status for t in await lead.tasks()] == ["done", "open"]
    assert (await client.call_tool("finish", {"summary": "form done"})).is_error is False
    late = await client.call_tool("task_add", {"title": "more"})
    assert late.is_error and "finished" in _text(late)


async def _plan(srv: Served) -> None:
    lead = srv.client.team("lead", "dev")
    assert (await lead.add("build the form", assignee="ui")).ok
    assert (await lead.add("wire the route", assignee="lead")).ok
    assert (await lead.write("plan.md", b"ui: the form\n")).ok


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": "# team\n"})


@pytest.mark.slow
async def test_team_tools_over_mcp_http(tmp_path: Path, repo: Path) -> None:
    """At /v1/scopes/ui/mcp, with ui's token: the team's tools act as ui, a lost claim
    and a refused release are tool errors, a request is answered and waited for."""
    async with serve(tmp_path / "state", repo) as srv:
        tokens = await _team(srv)
        await _plan(srv)
        async with _http(srv, "ui", tokens["ui"]) as client:
            await _as_ui(srv, client)
        log = (await srv.client.log("ui")).entries
        kinds = [(e.effect.kind, e.effect.status) for e in log if e.effect]
        assert ("team.task", "failed") in kinds and ("team.write", "materialized") in kinds


@pytest.mark.slow
async def test_team_tools_over_mcp_stdio(tmp_path: Path, repo: Path) -> None:
    """`corral mcp --scope ui --url URL --token T --team dev`: the same tools, through
    the HTTP client in the subprocess."""
    async with serve(tmp_path / "state", repo) as srv:
        tokens = await _team(srv)
        await _plan(srv)
        # The whole environment: the SDK passes a minimal one, without PYTHONPATH, which
        # says which checkout of Corral the subprocess runs.
        params = StdioServerParameters(command=_corral(), env=dict(os.environ), args=[
            "mcp", "--scope", "ui", "--url", srv.url, "--token", tokens["ui"], "--team", "dev"])
        async with Client(params) as client:
            await _as_ui(srv, client)
