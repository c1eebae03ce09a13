"""External reviewers over the WebSocket: they decide, rewrite, or abstain on timeout."""

from __future__ import annotations

import asyncio
import base64

import pytest

from coordinator import Forbidden

from .server_fixtures import serve


@pytest.fixture
async def srv(tmp_path, sample_repo):
    async with serve(tmp_path / "state", sample_repo) as s:
        await s.client.fork("root", "a")
        yield s


async def test_reviewer_blocks_and_allows(srv):
    """A reviewer of fs.write sees each write intent; its verdict is the decision."""
    c = srv.client
    seen = []

    async def review():
        async with c.reviewer("lint", ["fs.write"], timeout=5) as r:
            ready.set()
            async for req in r:
                seen.append(req["effect"]["intent"]["path"])
                path = req["effect"]["intent"]["path"]
                await r.answer(req, "block" if path.endswith(".exe") else "allow", "checked")
                if len(seen) == 2:
                    return

    ready = asyncio.Event()
    task = asyncio.create_task(review())
    await ready.wait()
    ok = await c.write("a", "fine.txt", b"ok")
    bad = await c.write("a", "virus.exe", b"MZ")
    await task
    assert ok.ok and ok.effect.decision.policy == "reviewer:lint"
    assert bad.status == "blocked" and bad.reason == "checked"
    # a kind it does not review passes without asking
    assert (await c.delete("a", "fine.txt")).ok
    assert seen == ["fine.txt", "virus.exe"]


@pytest.mark.slow
async def test_reviewer_rewrites_content(srv):
    """A rewrite answer with new content lands the reviewer's version."""
    c = srv.client

    async def review():
        async with c.reviewer("fmt", ["fs.write"]) as r:
            ready.set()
            async for req in r:
                await r.answer(req, "rewrite", "formatted", content=b"x = 1\n")
                return

    ready = asyncio.Event()
    task = asyncio.create_task(review())
    await ready.wait()
    r = await c.write("a", "m.py", b"x=1")
    await task
    assert r.ok and r.verdict == "rewrite"
    assert await c.read("a", "m.py") == b"x = 1\n"


@pytest.mark.slow
async def test_silent_reviewer_abstains_and_it_is_recorded(srv):
    """A reviewer that does not answer in time abstains; the decision's reason says so."""
    c = srv.client
    async with c.reviewer("sleepy", timeout=0.1):
        r = await c.write("a", "x.txt", b"x")
    assert r.ok and r.effect.decision.policy == "default"
    assert "reviewer sleepy abstained: no answer within 0.1s" in r.reason
    log = await c.log("a")
    assert "sleepy abstained" in log.entries[-1].effect.decision.reason


@pytest.mark.slow
async def test_reviewers_need_the_admin_token(srv):
    """A scope token cannot connect as a reviewer."""
    token = (await srv.client.fork("root", "b")).token
    with pytest.raises(Forbidden):
        async with srv.client.with_token(token).reviewer("x"):
            pass


@pytest.mark.slow
async def test_reviewer_may_answer_abstain(srv):
    """`abstain` passes the intent on down the chain (default allow)."""
    c = srv.client

    async def review():
        async with c.reviewer("meh") as r:
            ready.set()
            async for req in r:
                await r.answer(req, "abstain")
                return

    ready = asyncio.Event()
    task = asyncio.create_task(review())
    await ready.wait()
    r = await c.write("a", "y.txt", base64.b64encode(b"y"))
    await task
    assert r.ok and r.effect.decision.policy == "default"


async def test_an_answer_that_is_not_valid_is_refused(srv):
    """A malformed answer is refused with an error and its review goes on waiting; a
    rewrite whose content_b64 is not base64 is refused and blocks the intent."""
    c = srv.client
    headers = {"Authorization": f"Bearer {c.token}"}
    url = srv.url.replace("http://", "ws://") + "/v1/reviewers?name=raw&kind=fs.write"
    async with c.session.ws_connect(url, headers=headers) as ws:
        assert (await ws.receive_json())["type"] == "registered"
        write = asyncio.create_task(c.write("a", "m.py", b"x=1"))
        req = await asyncio.wait_for(ws.receive_json(), 10)
        await ws.send_json({"type": "answer", "id": req["id"], "verdict": "maybe"})
        error = await asyncio.wait_for(ws.receive_json(), 10)
        assert error["type"] == "error" and "verdict" in error["detail"]
        assert not write.done()
        await ws.send_json({"type": "answer", "id": req["id"], "verdict": "rewrite",
                            "content_b64": "%%%not base64"})
        error = await asyncio.wait_for(ws.receive_json(), 10)
        assert error["type"] == "error" and "not valid base64" in error["detail"]
        r = await asyncio.wait_for(write, 10)
    assert r.status == "blocked" and r.reason == "reviewer raw sent invalid base64"
    assert r.effect.decision.policy == "reviewer:raw"
    with pytest.raises(FileNotFoundError):
        await c.read("a", "m.py")
