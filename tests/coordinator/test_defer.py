"""defer(until=X): the intent is held until scope X merges (or is discarded),
then decided again; a second deferral or no merge in time blocks."""

from __future__ import annotations

import asyncio

import pytest

from coordinator import ConflictGuard, Coordinator, Event, Subscription, defer

pytestmark = pytest.mark.asyncio


class WaitForMerge:
    """Defers writes to `path` until `owner`'s head is in the writer's parent (root)."""

    def __init__(self, path: str, owner: str) -> None:
        self.path, self.owner, self.asked = path, owner, 0

    async def __call__(self, intent, view):
        if getattr(intent, "path", None) != self.path or view.scope == self.owner:
            return None
        self.asked += 1
        owner = next((s for s in view.scopes() if s.name == self.owner), None)
        if owner is None:
            return None
        if view.trace.is_ancestor(owner.head, view.head("root")):
            return None
        return defer(self.owner, f"{self.owner} is changing {self.path}")


async def _deferred(sub: Subscription, task: asyncio.Task) -> Event:
    """Waits for the write's deferral on the event bus (subscribed before the write
    started); the write must then still be held. Returns the deferral."""
    async with asyncio.timeout(30):
        while (event := await sub.get()) is not None:
            if event.effect.decision is not None and event.effect.decision.verdict == "defer":
                break
    assert event is not None and not task.done(), "the deferred write should still be held"
    return event


@pytest.mark.slow
async def test_deferred_write_waits_for_the_merge_then_goes_through(tmp_path, sample_repo):
    policy = WaitForMerge("shared.txt", "bob")
    async with Coordinator.open(tmp_path / "s", sample_repo, policies=[policy]) as coord:
        a = await coord.root.fork("alice")
        b = await coord.root.fork("bob")
        await b.write("shared.txt", b"bob's\n")
        async with coord.events.subscribe(scopes={"alice"}, types={"decision"}) as sub:
            task = asyncio.create_task(a.write("shared.txt", b"alice's\n"))
            deferral = await _deferred(sub, task)
            merged = await coord.root.merge(b)
            assert merged.commit is not None
            r = await task
            decisions = [deferral, *sub.drain()]
        assert r.ok and policy.asked == 2
        assert "deferred until 'bob' merged; it merged after" in r.reason
        # observers saw the deferral, then the decision that let it through
        assert [e.effect.decision.verdict for e in decisions] == ["defer", "allow"]
        assert await a.read("shared.txt") == b"alice's\n"


@pytest.mark.slow
async def test_deferral_ends_blocked_after_the_timeout(tmp_path, sample_repo):
    async with Coordinator.open(tmp_path / "s", sample_repo,
                                policies=[WaitForMerge("shared.txt", "bob")]) as coord:
        coord.runtime.with_settings(defer_timeout=0.2)
        a = await coord.root.fork("alice")
        await coord.root.fork("bob")
        r = await a.write("shared.txt", b"alice's\n")
        assert r.blocked and r.decision.verdict == "block"
        assert "bob is changing shared.txt" in r.reason and "still not merged after" in r.reason
        assert r.decision.until == "bob"


async def test_discarding_the_awaited_scope_ends_the_wait(tmp_path, sample_repo):
    async with Coordinator.open(tmp_path / "s", sample_repo,
                                policies=[WaitForMerge("shared.txt", "bob")]) as coord:
        a = await coord.root.fork("alice")
        b = await coord.root.fork("bob")
        async with coord.events.subscribe(scopes={"alice"}, types={"decision"}) as sub:
            task = asyncio.create_task(a.write("shared.txt", b"alice's\n"))
            await _deferred(sub, task)
        await b.discard()
        r = await task
        assert r.ok and "it was discarded" in r.reason


async def test_guard_in_defer_mode_blocks_when_still_conflicting_after_the_merge(
    tmp_path, sample_repo
):
    """The guard defers to the owner of the lines; after the owner merges into
    root, the writer's branch still lacks that work, so the second answer is
    another deferral, and that blocks with both reasons."""
    app = (sample_repo / "src" / "app.py").read_text().splitlines(keepends=True)
    mine, theirs = app.copy(), app.copy()
    mine[2], theirs[2] = "alice\n", "bob\n"
    async with Coordinator.open(tmp_path / "s", sample_repo,
                                policies=[ConflictGuard(mode="defer")]) as coord:
        a = await coord.root.fork("alice")
        b = await coord.root.fork("bob")
        assert (await b.write("src/app.py", "".join(theirs).encode())).ok
        async with coord.events.subscribe(scopes={"alice"}, types={"decision"}) as sub:
            task = asyncio.create_task(a.write("src/app.py", "".join(mine).encode()))
            await _deferred(sub, task)
        assert (await coord.root.merge(b)).commit is not None
        r = await task
        assert r.blocked
        assert "lines 3-3 of src/app.py" in r.reason and "bob" in r.reason
        assert "it merged after" in r.reason and "still deferred" in r.reason


async def test_deferring_a_scope_on_itself_blocks_at_once(tmp_path, sample_repo):
    async def self_defer(intent, view):
        return defer(view.scope, "wait for yourself")

    async with Coordinator.open(tmp_path / "s", sample_repo, policies=[self_defer]) as coord:
        a = await coord.root.fork("alice")
        r = await asyncio.wait_for(a.write("x.txt", b"x"), 5)
        assert r.blocked and "its own scope" in r.reason


async def test_server_defer_timeout_blocks_over_http(tmp_path, sample_repo):
    from tests.coordinator.server_fixtures import serve

    async with serve(tmp_path / "s", sample_repo, defer_timeout=0.2,
                     policies=[WaitForMerge("shared.txt", "bob")]) as srv:
        c = srv.client
        await c.fork("root", "alice")
        await c.fork("root", "bob")
        r = await c.write("alice", "shared.txt", b"alice's\n")
        assert not r.ok and r.verdict == "block" and "still not merged" in r.reason
