"""FUSE scopes (issue 9, finding 15): chown is asked and recorded like chmod;
a policy that writes through `scope.path` fails at once instead of freezing the
event loop until the live timeout."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from coordinator import Coordinator, FsOp, FsWrite, block
from sandboxes import FuseBackend
from tests.conftest import SAMPLE, make_repo

from .test_live import settle, sh

_REASON = FuseBackend.unavailable_reason()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_REASON is not None,
                                 reason=f"fuse backend unavailable: {_REASON}"), pytest.mark.root]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {**SAMPLE, "mine.txt": "m\n", "free.txt": "f\n"})


async def no_giving_away(intent, view):
    if isinstance(intent, FsOp) and intent.op == "chown" and intent.path == "mine.txt":
        return block("mine.txt stays mine")
    return None


async def test_chown_is_asked_and_recorded(tmp_path: Path, repo: Path):
    """A denied chown fails with EACCES and leaves the owner; an allowed one is
    an fs.op effect naming the new owner."""
    async with Coordinator.open(tmp_path / "s", repo, backend="fuse",
                                policies=[no_giving_away]) as coord:
        a = await coord.root.fork("a")
        before = len(coord.log(a))
        owner = os.stat(a.path / "mine.txt").st_uid
        async with coord.events.subscribe(scopes={"a"}, types={"effect"}) as recorded:
            r = await sh(a.path, "chown 1234:1234 mine.txt")
            assert r.returncode != 0 and "Permission denied" in r.stderr, r
            assert os.stat(a.path / "mine.txt").st_uid == owner
            r = await sh(a.path, "chown 1234:4321 free.txt")
            assert r.returncode == 0, r.stderr
            assert os.stat(a.path / "free.txt")[4:6] == (1234, 4321)
            effects = (await settle(coord, a, before + 2, recorded))[before:]
        ops = [(e.status, e.intent.op, e.intent.path, e.intent.target) for e in effects
               if isinstance(e.intent, FsOp)]
        assert ("blocked", "chown", "mine.txt", "1234:1234") in ops
        assert ("materialized", "chown", "free.txt", "1234:4321") in ops
        denied = next(e for e in effects if e.status == "blocked")
        assert denied.decision is not None and denied.decision.reason == "mine.txt stays mine"


async def test_a_policy_writing_through_scope_path_fails_fast(tmp_path: Path, repo: Path):
    """A policy that writes into the fuse mount from the event loop gets an
    immediate PermissionError (it used to wait on itself for live_timeout + 2 s
    with the loop frozen); nothing lands, and other work goes on."""
    scopes: dict[str, object] = {}
    seen: list[tuple[str, float]] = []

    async def writes_through_the_mount(intent, view):
        if isinstance(intent, FsWrite) and intent.path == "trigger.txt":
            start = time.monotonic()
            try:
                (scopes["a"].path / "side.txt").write_text("x")  # type: ignore[attr-defined]
                seen.append(("written", time.monotonic() - start))
            except PermissionError:
                seen.append(("refused", time.monotonic() - start))
        return None

    async with Coordinator.open(tmp_path / "s", repo, backend="fuse",
                                policies=[writes_through_the_mount]) as coord:
        coord.runtime.with_settings(live_timeout=5.0)
        a = scopes["a"] = await coord.root.fork("a")
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        t = asyncio.create_task(ticker())
        try:
            r = await asyncio.wait_for(a.write("trigger.txt", b"t"), 30)
        finally:
            t.cancel()
        assert r.ok
        [(what, seconds)] = seen
        assert what == "refused" and seconds < coord.settings.live_timeout
        assert not (a.path / "side.txt").exists()
        assert ticks > 0
        # Processes outside the coordinator are still asked as before.
        assert (await sh(a.path, "echo y > other.txt")).returncode == 0


async def test_ignored_files_written_live_survive_a_reopen(tmp_path: Path, repo: Path):
    """A process writing an ignored file through a fuse scope's mount is
    recorded with the file's content beside the tree; reopening restores it."""
    state = tmp_path / "s"
    async with Coordinator.open(state, repo, backend="fuse") as coord:
        a = await coord.root.fork("a")
        before = len(coord.log(a))
        async with coord.events.subscribe(scopes={"a"}, types={"effect"}) as recorded:
            r = await sh(a.path, "mkdir -p build && printf obj > build/live.o")
            assert r.returncode == 0, r.stderr
            effects = await settle(coord, a, before + 2, recorded)
        kept = [e.outcome.ignored_files for e in effects  # type: ignore[union-attr]
                if getattr(e.outcome, "ignored_files", None)]
        assert any(b"build/live.o" in coord.trace.blob(b) for b in kept)
    async with Coordinator.open(state, backend="fuse") as coord:
        assert (coord.scope("a").path / "build/live.o").read_bytes() == b"obj"
