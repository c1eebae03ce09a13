"""The conflict guard under concurrent writers: a write it approved that has not
landed yet counts as its scope's version of the file, so two siblings' racing
writes cannot both pass (each checked against the other's head, which does not
hold the other's write yet)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator import ConflictGuard, Coordinator, Decision, Intent, View, block
from tests.conftest import make_repo

pytestmark = pytest.mark.asyncio

BASE = "".join(f"line {i}\n" for i in range(1, 21))


def edit(line: int, text: str) -> bytes:
    lines = BASE.splitlines(keepends=True)
    lines[line - 1] = text + "\n"
    return "".join(lines).encode()


class SlowReview:
    """A reviewer after the guard that takes its time (as an LLM reviewer does), so
    every racing write is approved by the guard before any of them lands; it
    blocks a write whose content holds `veto`."""

    name = "slow-review"

    async def __call__(self, intent: Intent, view: View) -> Decision | None:
        await asyncio.sleep(0.05)
        blob = getattr(intent, "blob", None)
        if blob and b"veto" in await view.blob(blob):
            return block("vetoed")
        return None


async def test_racing_writers_of_one_line_land_one_and_merge_clean(tmp_path: Path):
    """Eight siblings rewrite line 10 of one file at once and four others each change
    a line of their own, all under the guard and a slow reviewer: exactly one line-10
    write lands, every far-away one lands, and merging every branch into root in turn
    never conflicts."""
    repo = make_repo(tmp_path / "repo", {"app.txt": BASE})
    async with Coordinator.open(tmp_path / "s", repo, backend="copy",
                                policies=[ConflictGuard(), SlowReview()]) as coord:
        rivals = [await coord.root.fork(f"rival{i}") for i in range(8)]
        loners = [await coord.root.fork(f"loner{i}") for i in range(4)]
        writes = [s.write("app.txt", edit(10, s.name)) for s in rivals]
        writes += [s.write("app.txt", edit(line, s.name))
                   for s, line in zip(loners, (2, 6, 14, 18), strict=True)]
        results = await asyncio.gather(*writes)
        landed = [r.effect.scope for r in results if r.ok]
        assert sum(name.startswith("rival") for name in landed) == 1, landed
        assert all(f"loner{i}" in landed for i in range(4)), landed
        blocked = [r for r in results if r.blocked]
        assert all("not committed yet" in r.reason or "rival" in r.reason for r in blocked)
        for s in rivals + loners:
            merged = await coord.root.merge(s)
            assert merged.clean, (s.name, merged.conflicts)
        final = (await coord.root.read("app.txt")).decode().splitlines()
        assert [final[i - 1] for i in (2, 6, 14, 18)] == [f"loner{i}" for i in range(4)]
        assert final[9].startswith("rival")


async def test_roots_racing_write_and_a_siblings_cannot_both_land(tmp_path: Path):
    """Root and a sibling rewrite the same line at once: the later check sees the
    earlier approved write (root's through the root check, the sibling's through the
    sibling check), so one of them lands and the sibling still merges clean."""
    repo = make_repo(tmp_path / "repo", {"app.txt": BASE})
    async with Coordinator.open(tmp_path / "s", repo, backend="copy",
                                policies=[ConflictGuard(), SlowReview()]) as coord:
        for first in ("root", "a"):
            a = await coord.root.fork("a")
            root_write = coord.root.write("app.txt", edit(10, f"root before {first}"))
            a_write = a.write("app.txt", edit(10, f"a after {first}"))
            pair = (root_write, a_write) if first == "root" else (a_write, root_write)
            results = await asyncio.gather(*pair)
            assert [r.ok for r in results] == [True, False], [r.reason for r in results]
            assert (await coord.root.merge(a)).clean
            await a.discard()


async def test_an_approved_write_a_later_policy_blocks_claims_nothing(tmp_path: Path):
    """The guard's approval of a write that the reviewer after it blocks dies with the
    pending effect: while it is in flight a sibling's write of the same line is held
    back, and once it is blocked the sibling's write goes through."""
    repo = make_repo(tmp_path / "repo", {"app.txt": BASE})
    async with Coordinator.open(tmp_path / "s", repo, backend="copy",
                                policies=[ConflictGuard(), SlowReview()]) as coord:
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        ra, rb = await asyncio.gather(a.write("app.txt", edit(10, "a veto")),
                                      b.write("app.txt", edit(10, "b")))
        assert ra.blocked and ra.reason == "vetoed"
        assert rb.blocked and "a (effect a#" in rb.reason and "not committed yet" in rb.reason
        assert (await b.write("app.txt", edit(10, "b"))).ok
        assert (await coord.root.merge(a)).clean and (await coord.root.merge(b)).clean


async def test_a_deferred_write_does_not_hold_up_the_guard(tmp_path: Path):
    """In defer mode a write that conflicts with a sibling's write in flight waits for
    that sibling outside the guard: another scope's write passes the guard meanwhile,
    and the deferred write goes through once the sibling is discarded."""
    repo = make_repo(tmp_path / "repo", {"app.txt": BASE, "other.txt": "x\n"})
    async with Coordinator.open(tmp_path / "s", repo, backend="copy",
                                policies=[ConflictGuard("defer"), SlowReview()]) as coord:
        a, b, c = [await coord.root.fork(n) for n in "abc"]
        ra = await a.write("app.txt", edit(10, "a"))
        held = asyncio.create_task(b.write("app.txt", edit(10, "b")))
        async with asyncio.timeout(10):
            assert (await c.write("other.txt", b"c\n")).ok
        assert ra.ok and not held.done()
        await a.discard()
        async with asyncio.timeout(10):
            rb = await held
        assert rb.ok and "deferred until 'a' merged; it was discarded" in rb.reason
