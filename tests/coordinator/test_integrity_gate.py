"""The human gate and a command that changes files (issue 9, finding 16): it is
held twice, the second hold shows the changed files and says it is the second
review, and both answers are recorded."""

from __future__ import annotations

import asyncio

from coordinator.policies import GateRule

from .server_fixtures import held_at_gate, serve


async def test_an_exec_that_changes_files_is_held_twice_and_both_answers_recorded(
        tmp_path, sample_repo):
    async with serve(tmp_path / "state", sample_repo, gate=[GateRule.parse("exec")]) as srv:
        c = srv.client
        await c.fork("root", "a")
        argv = ["sh", "-c", "echo 1 > one.txt && echo 2 > two.txt"]
        async with c.subscribe(types="decision") as events:
            run = asyncio.create_task(c.exec("a", argv))
            first = await held_at_gate(c, events)
            assert first.review == "intent" and first.changes is None
            await c.approve(first.id, "may run")
            second = await held_at_gate(c, events)
        assert second.review == "changes" and second.id != first.id
        assert sorted(ch.path for ch in second.changes or []) == ["one.txt", "two.txt"]
        assert second.summary != first.summary and "one.txt" in second.summary
        await c.approve(second.id, "changes look right")
        r = await run
        assert r.ok and await c.read("a", "two.txt") == b"2\n"
        assert "may run" in r.reason
        review = r.effect.outcome.review  # type: ignore[union-attr]
        assert review is not None and "changes look right" in review.reason
        # as the trace stores it
        stored = (await c.show(r.commit)).effect
        assert stored is not None and stored.outcome.review == review  # type: ignore[union-attr]

        # Rejecting the second review blocks, and the first answer stays in the record.
        async with c.subscribe(types="decision") as events:
            run = asyncio.create_task(c.exec("a", ["sh", "-c", "echo 3 > three.txt"]))
            await c.approve((await held_at_gate(c, events)).id, "may run again")
            await c.reject((await held_at_gate(c, events)).id, "not this file")
        r = await run
        assert r.status == "blocked"
        assert "not this file" in r.reason and "may run again" in r.reason
        import pytest
        with pytest.raises(FileNotFoundError):
            await c.read("a", "three.txt")


async def test_a_command_that_changes_nothing_is_held_once(tmp_path, sample_repo):
    async with serve(tmp_path / "state", sample_repo, gate=[GateRule.parse("exec")]) as srv:
        c = srv.client
        await c.fork("root", "a")
        async with c.subscribe(types="decision") as events:
            run = asyncio.create_task(c.exec("a", ["true"]))
            item = await held_at_gate(c, events)
            await c.approve(item.id)
        r = await run
        assert r.ok and r.effect.outcome.review is None  # type: ignore[union-attr]
        assert await c.gate_pending() == []
