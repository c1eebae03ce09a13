"""An MCP client (the official SDK's) works in a supervised scope: over stdio against the
real `corral mcp` subprocess, and over streamable HTTP on the server itself."""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agents.mcp_server import MCP_TOOLS
from tests.agents._helpers import CALC
from tests.conftest import make_repo
from tests.coordinator.server_fixtures import Served, serve

ALICE = CALC + "\n\ndef multiply(a, b):\n    return a * b\n"
BOB = CALC + "\n\ndef power(a, b):\n    return a ** b\n"


def _corral() -> str:
    found = shutil.which("corral", path=str(Path(sys.executable).parent))
    assert found, "the corral console script is installed next to this python"
    return found


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


@asynccontextmanager
async def _stdio(srv: Served, scope: str, token: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=_corral(), args=["mcp", "--scope", scope, "--url", srv.url, "--token", token],
    )
    async with Client(params) as client:
        yield client


@asynccontextmanager
async def _http(srv: Served, scope: str, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{srv.url}/v1/scopes/{scope}/mcp",
                                                   http_client=http)) as client:
        yield client


async def _session(srv: Served, client: Client) -> None:
    """A task with one blocked edit and one rewind, the same over any transport."""
    c = srv.client
    tools = await client.list_tools()
    assert sorted(t.name for t in tools.tools) == sorted(MCP_TOOLS)

    listing = await client.call_tool("list_files", {"path": ""})
    assert not listing.is_error and "calc.py" in _text(listing).splitlines()

    wrote = await client.call_tool("write_file", {"path": "notes.md", "content": "plan\n"})
    assert not wrote.is_error, _text(wrote)
    assert await c.read("bob", "notes.md") == b"plan\n"

    # alice owns the end of calc.py: the guard blocks bob's edit there, as a tool error.
    blocked = await client.call_tool("edit", {"path": "calc.py", "old": CALC, "new": BOB})
    assert blocked.is_error
    assert "BLOCKED by the supervisor (conflict-guard)" in _text(blocked)
    assert "alice" in _text(blocked)
    assert await c.read("bob", "calc.py") == CALC.encode()

    ran = await client.call_tool("run", {"command": "cat notes.md && echo hi > out.txt"})
    assert not ran.is_error and "plan" in _text(ran) and "exit code 0" in _text(ran)
    assert await c.read("bob", "out.txt") == b"hi\n"
    failed = await client.call_tool("run", {"command": "exit 3"})
    assert failed.is_error and "exit code 3" in _text(failed)

    # The supervisor rewinds bob to before the command: its file is gone from the scope.
    log = (await c.log("bob")).entries
    run_commit = next(e for e in log if e.effect and e.effect.kind == "exec"
                      and e.effect.status == "materialized")
    assert (await c.rewind("bob", to=run_commit.parents[0])).ok
    gone = await client.call_tool("read_file", {"path": "out.txt"})
    assert gone.is_error and "FileNotFoundError" in _text(gone)
    kept = await client.call_tool("read_file", {"path": "notes.md"})
    assert _text(kept) == "plan\n"

    sent = await client.call_tool("send_message", {"to": "alice", "text": "calc.py is yours"})
    assert not sent.is_error
    assert [m.text for m in await c.take_messages("alice")] == ["calc.py is yours"]
    await c.inject("bob", "power() goes into power.py")
    box = await client.call_tool("inbox", {})
    assert "power() goes into power.py" in _text(box)

    done = await client.call_tool("finish", {"summary": "notes written"})
    assert not done.is_error
    assert [m.text for m in await c.take_messages("root")] == ["finished: notes written"]
    after = await client.call_tool("write_file", {"path": "late.md", "content": "x"})
    assert after.is_error and "finished" in _text(after)

    kinds = [(e.effect.kind, e.effect.status) for e in (await c.log("bob")).entries
             if e.effect]
    assert ("fs.write", "blocked") in kinds and ("scope.rewind", "materialized") in kinds


async def _scopes(srv: Served) -> str:
    c = srv.client
    alice = (await c.fork("root", "alice")).token
    token = (await c.fork("root", "bob")).token
    assert (await c.with_token(alice).write("alice", "calc.py", ALICE.encode())).ok
    return token


@pytest.fixture
def calc_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"calc.py": CALC})


@pytest.mark.slow
@pytest.mark.slow
async def test_mcp_stdio_session_blocks_and_rewinds(tmp_path: Path, calc_repo: Path) -> None:
    """Over stdio, `corral mcp` acting through a running server: a blocked edit comes back
    as a tool error with the guard's reason, and a supervisor's rewind shows in the tools."""
    async with serve(tmp_path / "state", calc_repo) as srv:
        token = await _scopes(srv)
        async with _stdio(srv, "bob", token) as client:
            await _session(srv, client)


@pytest.mark.slow
async def test_mcp_http_session_blocks_and_rewinds(tmp_path: Path, calc_repo: Path) -> None:
    """Over streamable HTTP at /v1/scopes/bob/mcp on the server, with bob's token: the same
    task, the same block and rewind."""
    async with serve(tmp_path / "state", calc_repo) as srv:
        token = await _scopes(srv)
        async with _http(srv, "bob", token) as client:
            await _session(srv, client)


@pytest.mark.slow
async def test_mcp_http_needs_the_scopes_token(tmp_path: Path, calc_repo: Path) -> None:
    """The HTTP transport refuses a missing token (401) and another scope's token (403); a
    discarded scope's token no longer reaches its tools, and the others keep working."""
    async with serve(tmp_path / "state", calc_repo) as srv:
        bob = await _scopes(srv)
        other = (await srv.client.fork("root", "carol")).token
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        session = srv.client.session
        url = f"{srv.url}/v1/scopes/bob/mcp"
        async with session.post(url, json=body) as r:
            assert r.status == 401
        async with session.post(url, json=body,
                                headers={"Authorization": f"Bearer {other}"}) as r:
            assert r.status == 403
        async with _http(srv, "bob", bob) as client:
            assert len((await client.list_tools()).tools) == len(MCP_TOOLS)
        assert (await srv.client.discard("bob")).ok
        async with _http(srv, "carol", other) as client:
            wrote = await client.call_tool("write_file", {"path": "c.txt", "content": "c"})
            assert not wrote.is_error
        async with session.post(url, json=body,
                                headers={"Authorization": f"Bearer {bob}"}) as r:
            assert r.status == 401


@pytest.mark.slow
async def test_mcp_in_process_stdio(tmp_path: Path, calc_repo: Path) -> None:
    """`corral mcp --state DIR` opens the coordinator itself and forks the scope."""
    from coordinator import Coordinator

    state = tmp_path / "state"
    async with Coordinator.open(state, repo=calc_repo, base="HEAD"):
        pass
    params = StdioServerParameters(command=_corral(),
                                   args=["mcp", "--scope", "dave", "--state", str(state)])
    async with Client(params) as client:
        wrote = await client.call_tool("write_file", {"path": "d.txt", "content": "d\n"})
        assert not wrote.is_error
    async with Coordinator.open(state) as coord:
        assert await coord.scope("dave").read("d.txt") == b"d\n"
