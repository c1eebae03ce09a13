"""The human gate: matching intents wait for a person's answer over the API."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.policies import GateRule

from .server_fixtures import held_at_gate, serve


@pytest.mark.slow
async def test_gate_holds_matching_writes_until_approved_or_rejected(tmp_path, sample_repo):
    """A write under src/ waits at the gate; approval lets it land (noted in the
    decision), rejection blocks it with the reason; other paths pass untouched."""
    async with serve(tmp_path / "state", sample_repo,
                     gate=[GateRule.parse("fs.write:src/*")]) as srv:
        c = srv.client
        await c.fork("root", "a")
        assert (await c.write("a", "docs/free.md", b"free")).ok
        async with c.subscribe(types="decision") as events:
            pending = asyncio.create_task(c.write("a", "src/held.py", b"x = 1\n"))
            item = await held_at_gate(c, events)
            [listed] = await c.gate_pending()
        assert listed == item
        assert item.rule == "fs.write:src/*" and item.effect.intent.path == "src/held.py"
        assert item.summary == "fs.write src/held.py"
        assert not pending.done()
        await c.approve(item.id, "looks fine")
        r = await pending
        assert r.ok and "approved at the gate (fs.write:src/*): looks fine" in r.reason
        async with c.subscribe(types="decision") as events:
            pending = asyncio.create_task(c.write("a", "src/evil.py", b"rm -rf /\n"))
            item = await held_at_gate(c, events)
        await c.reject(item.id, "no")
        r = await pending
        assert r.status == "blocked" and r.reason == "rejected at the gate (fs.write:src/*): no"
        assert await c.gate_pending() == []
        import pytest

        from coordinator import NotFound
        with pytest.raises(NotFound):
            await c.approve(item.id)


async def test_a_hold_is_announced_as_a_defer_decision_once_listed(tmp_path, sample_repo):
    """Holding an intent publishes a `decision` event (verdict defer, policy
    human-gate, the rule in its reason) between the intent and the final decision,
    and the item is already listed when it arrives; `next_held` returns that item
    and raises ClientError when the stream ends first."""
    from coordinator.client import ClientError

    async with serve(tmp_path / "state", sample_repo, gate=[GateRule("exec")]) as srv:
        c = srv.client
        await c.fork("root", "a")
        async with c.subscribe(scopes="a") as events:
            run = asyncio.create_task(c.exec("a", ["true"]))
            seen: list[dict] = []
            async with asyncio.timeout(10):
                async for event in events:
                    seen.append(event)
                    if event["type"] == "decision":
                        break
            [listed] = await c.gate_pending()
            await c.approve(listed.id)
            async with asyncio.timeout(10):
                async for event in events:
                    seen.append(event)
                    if event["type"] == "effect":
                        break
        assert (await run).ok
        assert [e["type"] for e in seen] == ["intent", "decision", "decision", "effect"]
        hold, final = seen[1]["effect"], seen[2]["effect"]
        assert hold["id"] == listed.effect.id == final["id"]
        assert hold["decision"] == {**hold["decision"], "verdict": "defer",
                                    "policy": "human-gate", "reason": "held at the gate (exec)"}
        assert final["decision"]["verdict"] == "allow"

        async with c.subscribe(types="decision") as events:
            run = asyncio.create_task(c.exec("a", ["true"]))
            item = await held_at_gate(c, events)
            assert [i.id for i in await c.gate_pending()] == [item.id]
            await c.approve(item.id)
        assert (await run).ok

        async def nothing():
            return
            yield
        with pytest.raises(ClientError, match="ended before anything was held"):
            await c.next_held(nothing())


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
