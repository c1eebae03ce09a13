"""The event WebSocket: filtered streams, and observers that never perturb the trace."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from tests.conftest import SAMPLE, make_repo

from .server_fixtures import serve


async def _script(c) -> None:
    """A fixed run: two agents, writes, a blocked conflict, a rewind, merges."""
    await c.fork("root", "a")
    await c.fork("root", "b")
    for i in range(5):
        await c.write("a", f"a/{i}.txt", f"a {i}\n".encode())
        await c.write("b", f"b/{i}.txt", f"b {i}\n".encode())
    await c.write("a", "src/util.py", b"def helper():\n    return 2\n")
    blocked = await c.write("b", "src/util.py", b"def helper():\n    return 3\n")
    assert blocked.status == "blocked"
    await c.rewind("b", steps=2)
    await c.merge("root", "a")
    await c.merge("root", "b")
    await c.discard("b")


def _refs(state) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(state / "trace.git"), "for-each-ref",
         "--format=%(refname) %(objectname)"], capture_output=True, text=True, check=True,
    ).stdout


async def _watch(c, counts: list[int], i: int, ready: asyncio.Event) -> None:
    """An observer, until it sees the script's last effect (b discarded); the second
    one is slow."""
    async with c.subscribe() as stream:
        ready.set()
        async for event in stream:
            counts[i] += 1
            if i == 1:
                await asyncio.sleep(0.002)  # the slowness under test
            if event["type"] == "effect" and event["effect"]["intent"]["kind"] == "scope.discard":
                return


@pytest.mark.slow
async def test_events_stream_filters_by_scope_kind_and_type(tmp_path, sample_repo):
    """A subscriber sees intents, decisions and effects of the scopes and kinds it asked for."""
    async with serve(tmp_path / "state", sample_repo) as srv:
        c = srv.client
        await c.fork("root", "a")
        await c.fork("root", "b")
        got: list[dict] = []
        async with c.subscribe(scopes=["a"], kinds=["fs.write"]) as stream:
            await c.write("b", "bx.txt", b"b")
            await c.delete("a", "README.md")
            await c.write("a", "x.txt", b"a")
            async for event in stream:
                got.append(event)
                if event["type"] == "effect":
                    break
        assert [e["type"] for e in got] == ["intent", "decision", "effect"]
        assert {e["effect"]["scope"] for e in got} == {"a"}
        assert got[1]["effect"]["decision"]["verdict"] == "allow"
        assert got[2]["commit"] == (await c.scope("a")).head
        async with c.subscribe(types=["effect"]) as stream:
            await c.write("b", "y.txt", b"b")
            first = await stream.__anext__()
        assert first["type"] == "effect" and first["effect"]["intent"]["path"] == "y.txt"


@pytest.mark.slow
async def test_scope_token_streams_only_its_scope(tmp_path, sample_repo):
    """A scope token may subscribe to its own scope, not to another's."""
    from coordinator import Forbidden
    from coordinator.server import STATUS

    async with serve(tmp_path / "state", sample_repo) as srv:
        c = srv.client
        a = c.with_token((await c.fork("root", "a")).token)
        await c.fork("root", "b")
        import aiohttp
        with pytest.raises(aiohttp.WSServerHandshakeError) as e:
            async with a.subscribe(scopes=["b"]):
                pass
        assert e.value.status == STATUS[Forbidden] == 403
        async with a.subscribe() as stream:
            await c.write("b", "bx.txt", b"b")
            await c.write("a", "x.txt", b"a")
            event = await stream.__anext__()
        assert event["effect"]["scope"] == "a"


@pytest.mark.slow
async def test_observers_never_perturb_the_trace(tmp_path):
    """The same deterministic run with and without WebSocket observers (one of
    them slow) yields byte-identical refs and commit ids."""
    results = []
    for observed in (False, True):
        base = tmp_path / str(observed)
        repo = make_repo(base / "repo", SAMPLE)
        async with serve(base / "state", repo, clock=lambda: 1_700_000_000) as srv:
            c = srv.client
            if not observed:
                await _script(c)
            else:
                counts = [0, 0]
                readies = [asyncio.Event(), asyncio.Event()]
                try:
                    async with asyncio.timeout(30), asyncio.TaskGroup() as tg:
                        for i in (0, 1):
                            tg.create_task(_watch(c, counts, i, readies[i]))
                        for r in readies:
                            await r.wait()
                        await _script(c)
                except TimeoutError:
                    raise AssertionError(f"observers saw {counts} events and not the "
                                         "run's last effect within 30 s") from None
                assert counts[0] == counts[1] > 20
        results.append(_refs(base / "state"))  # closed: the trace is checkpointed
    assert results[0] == results[1]
    assert "refs/corral/scopes/a" in results[0]
