"""The human gate: matching intents wait for a person's answer over the API."""

from __future__ import annotations

import asyncio

import pytest

from coordinator import GateRule

from .server_fixtures import serve


async def _held(client, n: int = 1):
    for _ in range(200):
        items = await client.gate_pending()
        if len(items) >= n:
            return items
        await asyncio.sleep(0.01)
    raise AssertionError("nothing was held at the gate")


@pytest.mark.slow
async def test_gate_holds_matching_writes_until_approved_or_rejected(tmp_path, sample_repo):
    """A write under src/ waits at the gate; approval lets it land (noted in the
    decision), rejection blocks it with the reason; other paths pass untouched."""
    async with serve(tmp_path / "state", sample_repo,
                     gate=[GateRule.parse("fs.write:src/*")]) as srv:
        c = srv.client
        await c.fork("root", "a")
        assert (await c.write("a", "docs/free.md", b"free")).ok
        pending = asyncio.create_task(c.write("a", "src/held.py", b"x = 1\n"))
        [item] = await _held(c)
        assert item.rule == "fs.write:src/*" and item.effect.intent.path == "src/held.py"
        assert item.summary == "fs.write src/held.py"
        assert not pending.done()
        await c.approve(item.id, "looks fine")
        r = await pending
        assert r.ok and "approved at the gate (fs.write:src/*): looks fine" in r.reason
        pending = asyncio.create_task(c.write("a", "src/evil.py", b"rm -rf /\n"))
        [item] = await _held(c)
        await c.reject(item.id, "no")
        r = await pending
        assert r.status == "blocked" and r.reason == "rejected at the gate (fs.write:src/*): no"
        assert await c.gate_pending() == []
        import pytest

        from coordinator import NotFound
        with pytest.raises(NotFound):
            await c.approve(item.id)


@pytest.mark.slow
async def test_gate_timeout_blocks(tmp_path, sample_repo):
    """An intent nobody answers within the gate's timeout is blocked."""
    async with serve(tmp_path / "state", sample_repo, gate=[GateRule("exec")],
                     gate_timeout=0.2) as srv:
        await srv.client.fork("root", "a")
        r = await srv.client.exec("a", ["true"])
        assert r.status == "blocked" and "not answered within 0.2s" in r.reason


def test_gate_rule_parse_and_match():
    """KIND, KIND:GLOB and *:GLOB rules."""
    from coordinator import FsWrite

    w = FsWrite(path="src/a.py", blob="0" * 40)
    assert GateRule.parse("fs.write").matches(w)
    assert GateRule.parse("fs.write:src/*").matches(w)
    assert not GateRule.parse("fs.write:docs/*").matches(w)
    assert GateRule.parse("*:*.py").matches(w)
    assert not GateRule.parse("exec").matches(w)
