"""The conflict guard keeps what merged: lines that reached root through a merge stay
claimed by their author's effects after the author's scope is discarded."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import ConflictGuard, Coordinator

pytestmark = pytest.mark.asyncio


def app_with(first: int, last: int, text: str) -> bytes:
    lines = [f"line {i}\n" for i in range(1, 21)]
    for i in range(first - 1, last):
        lines[i] = f"{text} {i + 1}\n"
    return "".join(lines).encode()


async def test_a_write_conflicting_with_merged_and_discarded_work_is_blocked(
        tmp_path: Path, sample_repo: Path) -> None:
    """Fork a and b; a writes lines 1-3, merges into root and is discarded; b's different
    lines 1-3 are blocked, naming scope a, its effect and the merge commit into root, and
    the merge that would have conflicted is never reached."""
    async with Coordinator.open(tmp_path / "s", sample_repo,
                                policies=[ConflictGuard()]) as coord:
        a = await coord.root.fork("a")
        b = await coord.root.fork("b")
        wrote = await a.write("src/app.py", app_with(1, 3, "alice"))
        assert wrote.ok
        merged = await coord.root.merge(a)
        assert merged.commit is not None
        await a.discard()

        r = await b.write("src/app.py", app_with(1, 3, "bob"))
        assert r.blocked, "b's conflicting write was allowed after a merged and left"
        assert "lines 1-3 of src/app.py conflict with changes by scope a" in r.reason
        assert f"merged into root (commit {merged.commit[:10]})" in r.reason
        assert wrote.effect.id in r.reason

        # Lines a did not touch are b's to change; the merge then goes through.
        assert (await b.write("src/app.py", app_with(10, 12, "bob"))).ok
        assert (await coord.root.merge(b)).commit is not None


async def test_merged_lines_stay_guarded_while_the_author_is_still_live(
        tmp_path: Path, sample_repo: Path) -> None:
    """Merged but not discarded: the write is blocked too (by the live sibling), and a
    scope forked from root after the merge may change those lines (they are its base)."""
    async with Coordinator.open(tmp_path / "s", sample_repo,
                                policies=[ConflictGuard()]) as coord:
        a = await coord.root.fork("a")
        b = await coord.root.fork("b")
        assert (await a.write("src/app.py", app_with(1, 3, "alice"))).ok
        assert (await coord.root.merge(a)).commit is not None
        r = await b.write("src/app.py", app_with(1, 3, "bob"))
        assert r.blocked and "scope a" in r.reason
        await a.discard()
        await b.discard()
        c = await coord.root.fork("c")
        assert (await c.write("src/app.py", app_with(1, 3, "carol"))).ok
