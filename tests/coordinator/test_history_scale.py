"""Long histories and many scopes: the journal stays bounded under a writer that
never pauses (writers wait instead), discarded scopes leave nothing behind,
logs page from the newest effect, rewinds walk only what they undo, roll-ups
close the packs they delete, and reopening reads the scopes' heads, not their
histories. Behaviour only; the timings are in `corral bench substrate`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from pathlib import Path

import pytest

from coordinator import Coordinator, JournalBounds, NotFound, RewindError
from coordinator.store import _journal
from coordinator.store._trace import FORK_PREFIX, SCOPE_PREFIX, Trace

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]  # slow: long histories


def git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args],
                          capture_output=True, text=True, check=True).stdout


async def test_writers_wait_while_the_journal_is_full_and_resume_after_the_checkpoint(
    tmp_path, sample_repo, monkeypatch
):
    """With a checkpoint stuck writing, a writer fills the next generation and
    then waits (visible in the backpressure metric) instead of growing it; once
    the checkpoint is through, it carries on and nothing is lost."""
    release = threading.Event()
    writing = threading.Event()
    real = _journal.Journal._write_pack

    def slow_disk(self, objects):
        writing.set()
        release.wait(30)
        real(self, objects)

    monkeypatch.setattr(_journal.Journal, "_write_pack", slow_disk)
    bounds = JournalBounds(checkpoint_s=3600.0, checkpoint_objects=40)
    async with Coordinator.open(tmp_path / "s", sample_repo, journal=bounds) as coord:
        journal = coord.trace.journal
        a = await coord.root.fork("a")
        done: list[str] = []

        async def writer() -> None:
            for i in range(200):
                r = await a.write(f"d/f{i}.txt", f"{i}\n".encode())
                done.append(r.commit or "")

        task = asyncio.create_task(writer())
        try:
            await asyncio.to_thread(writing.wait, 30)  # the first checkpoint is stuck
            # The writer is held when it parks in the journal's wait list (what
            # room() does while the journal is full): an event, not a pause.
            deadline = asyncio.get_running_loop().time() + 30
            while not journal._waiters:
                assert asyncio.get_running_loop().time() < deadline, "the writer never waited"
                await asyncio.sleep(0.005)
            stalled = len(done)
            assert journal.full() and stalled < 200, "the writer was held back"
            assert not task.done() and len(done) == stalled
            held = len(journal.objects) + len(journal.sealed)
            assert held <= 2 * 40 + 8, f"{held} objects held: the bound did not hold"
        finally:
            release.set()
        await asyncio.wait_for(task, 60)
        waited = coord.metrics.registry.get_sample_value(
            "corral_trace_backpressure_seconds_count")
        assert waited is not None and waited >= 1
        assert len(done) == 200
        head = a.head
    async with Coordinator.open(tmp_path / "s") as coord:
        assert coord.scope("a").head == head
        assert await coord.scope("a").read("d/f199.txt") == b"199\n"


async def test_memory_held_by_the_journal_is_dropped_at_each_checkpoint(tmp_path, sample_repo):
    """A checkpoint drops its whole generation: nothing held afterwards, and the
    objects read back from the pack."""
    quiet = JournalBounds(checkpoint_s=3600.0)
    async with Coordinator.open(tmp_path / "s", sample_repo, journal=quiet) as coord:
        a = await coord.root.fork("a")
        for i in range(50):
            await a.write(f"f{i % 5}.txt", f"{i}\n".encode() * 100)
        journal = coord.trace.journal
        assert journal.held_bytes > 0 and journal.objects
        await coord.checkpoint()
        assert journal.held_bytes == 0
        assert not journal.objects and not journal.sealed and not journal.sealed_refs
        assert journal.peak_bytes > 0
        assert coord.trace.read(a.head, "f4.txt") == b"49\n" * 100


async def test_discarded_scopes_leave_the_registry_and_their_fork_refs(tmp_path, sample_repo):
    """After many fork/write/discard cycles only the live scopes are registered
    and only they have fork refs; a discarded parent stays while a child it
    forked lives, and goes with the child."""
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        for i in range(30):
            w = await coord.root.fork("w")
            await w.write("x.txt", f"{i}\n".encode())
            await w.discard()
        assert set(coord.scopes) == {"root"}
        assert coord.trace.refs(FORK_PREFIX) == []
        assert len(coord.trace.refs("refs/corral/archive/w-")) == 30

        parent = await coord.root.fork("p")
        child = await parent.fork("c")
        await parent.discard()
        assert set(coord.scopes) == {"root", "p", "c"} and coord.scopes["p"].discarded
        assert coord.trace.refs(FORK_PREFIX) == [FORK_PREFIX + "c"]
        with pytest.raises(Exception, match="no scope named 'p'"):
            coord.scope("p")
        await child.discard()
        assert set(coord.scopes) == {"root"}
        assert await coord.until_settled("c", 0.1) == "gone"
        assert coord.metrics.registry.get_sample_value("corral_active_scopes") == 1
        newest = max(coord.trace.refs("refs/corral/archive/w-"),
                     key=lambda r: int(r.rsplit("-", 1)[1]))
        assert coord.last_discard("w") == coord.trace.ref(newest)


async def test_log_pages_newest_first_with_a_cursor(tmp_path, sample_repo):
    """Pages of any size, followed by their cursors, list the branch newest first
    exactly as the full log does (reversed), also while the head moves on."""
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        a = await coord.root.fork("a")
        for i in range(23):
            await a.write(f"f{i % 4}.txt", f"{i}\n".encode())
        assert len(coord.trace.log(a)) == 24  # the fork and 23 writes
        for limit in (1, 5, 24, 100):
            full = [e.commit for e in reversed(coord.trace.log(a))]
            seen: list[str] = []
            page = coord.trace.log_page(a, limit=limit)
            moved = False
            while True:
                assert len(page.entries) <= limit
                seen += [e.commit for e in page.entries]
                if page.next is None:
                    break
                if not moved:  # effects landing meanwhile do not shift the pages
                    await a.write("late.txt", b"late\n")
                    moved = True
                page = coord.trace.log_page(a, limit=limit, before=page.next)
            assert seen == full, limit
        first = coord.trace.log_page(a, limit=3)
        assert first.entries[0].commit == a.head and first.entries[0].effect is not None
        with pytest.raises(NotFound):
            coord.trace.log_page(a, limit=3, before="0" * 40)
        with pytest.raises(ValueError):
            coord.trace.log_page(a, limit=0)


async def test_rewind_deep_in_a_long_branch_lands_exactly(tmp_path, sample_repo):
    """Rewinds by steps and to a commit, far down a 300-effect branch, give the
    target's tree and record the rewind; going past the fork point or off the
    branch is refused with the number of effects there are."""
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        a = await coord.root.fork("a")
        commits = []
        for i in range(300):
            commits.append((await a.write(f"d{i % 7}/f{i % 13}.txt", f"{i}\n".encode())).commit)
        trace = coord.trace

        def files(tree: str) -> dict[str, bytes]:
            return {p: trace.blob(b) for p, b, _ in trace.iter_files(tree)}

        def workspace() -> dict[str, bytes]:
            root = a.workspace.backing
            return {str(p.relative_to(root)): p.read_bytes()
                    for p in root.rglob("*") if p.is_file()}

        r = await a.rewind(steps=10)
        assert r.ok and r.effect.parent == commits[-1]
        assert str(trace.commit(r.commit).parent_ids[0]) == commits[-11]
        assert workspace() == files(str(trace.commit(commits[-11]).tree_id))
        r = await a.rewind(to=commits[20])
        assert str(trace.commit(r.commit).parent_ids[0]) == commits[20]
        assert workspace() == files(str(trace.commit(commits[20]).tree_id))
        # 22 effects since the fork: the fork's own, 21 writes; the rewind above is on top
        with pytest.raises(RewindError, match="has only 22 effects"):
            await a.rewind(steps=23)
        await a.rewind(steps=22)
        assert workspace() == files(str(trace.commit(a.fork_point).tree_id))
        b = await coord.root.fork("b")
        other = (await b.write("b.txt", b"b\n")).commit
        with pytest.raises(RewindError, match="not on the branch"):
            await a.rewind(to=other)
        with pytest.raises(RewindError, match="before the fork point"):
            await b.rewind(to=coord.root.head)
        assert trace.head("a") == a.head


def _deleted_packs(git_dir: Path) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(git_dir)) and target.endswith("(deleted)"):
            out.append(target)
    return out


async def test_a_roll_up_closes_the_packs_it_deleted(tmp_path, sample_repo):
    """Handles that read from packs a roll-up then deleted are renewed at their
    thread's next unit of work (an effect, an io job): once every thread has
    had one and a checkpoint ran, no file descriptor to a deleted pack is open."""
    git_dir = tmp_path / "s" / "trace.git"
    bounds = JournalBounds(checkpoint_s=3600.0, max_packs=3)
    async with Coordinator.open(tmp_path / "s", sample_repo, journal=bounds) as coord:
        a = await coord.root.fork("a")
        pool = coord.runtime._pool

        async def read_everywhere(n: int) -> None:
            """Read every file from the packs, here and on every io thread."""
            for k in range(n):
                coord.trace.read(a.head, f"f{k}.txt")
            threads = max(1, len(pool._threads))
            gate = threading.Barrier(threads, timeout=10)

            def read_all(gate: threading.Barrier = gate) -> None:
                for k in range(n):
                    coord.trace.read(a.head, f"f{k}.txt")
                gate.wait()

            await asyncio.gather(*(coord.io(read_all) for _ in range(threads)))

        deleted_seen = 0
        for i in range(12):
            await a.write(f"f{i}.txt", f"{i}\n".encode())
            await coord.checkpoint()  # a pack per round; past 3, a roll-up
            deleted_seen += len(_deleted_packs(git_dir))
            await read_everywhere(i + 1)
        assert deleted_seen, "the test saw stale handles hold deleted packs at all"
        packs = list((git_dir / "objects" / "pack").glob("*.pack"))
        assert len(packs) <= 4, "roll-ups ran"
        await a.write("last.txt", b"last\n")
        await coord.checkpoint()  # perhaps one more roll-up
        await read_everywhere(12)
        coord.trace.renew_handle()  # this (the loop's) thread's next unit of work
        await coord.checkpoint()  # nothing new to pack: no roll-up, a collection
        assert _deleted_packs(git_dir) == []
        assert coord.trace.read(a.head, "f0.txt") == b"0\n"


async def test_reopen_reads_each_scope_from_its_head_not_its_history(
    tmp_path, sample_repo, monkeypatch
):
    """Reopening after a kill replays the journal and decodes a couple of
    records per scope whatever the branch's length; fork points, parents and
    the next seq come out as before, also for a trace without fork refs."""
    git_dir = tmp_path / "s" / "trace.git"
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        a = await coord.root.fork("a")
        for i in range(120):
            await a.write(f"f{i % 9}.txt", f"{i}\n".encode())
        b = await a.fork("b")
        await b.write("b.txt", b"b\n")
        await a.rewind(steps=3)
        expect = {s.name: (s.head, s.fork_point, s.parent, s.effect_path.seq)
                  for s in coord.scopes.values()}
        await coord.checkpoint()
        await a.write("after.txt", b"after the checkpoint\n")
        expect["a"] = (a.head, a.fork_point, a.parent, a.effect_path.seq)
        # What a kill leaves: the last generation's log, not checkpointed.
        log_path = max((git_dir / "corral-journal").glob("*.log"),
                       key=lambda p: int(p.stem))
        saved = log_path.read_bytes()
    log_path.write_bytes(saved)
    git(git_dir, "update-ref", SCOPE_PREFIX + "a", expect["a"][0] + "~1")

    decoded = 0
    real = Trace.entry_of

    def counting(self, commit):
        nonlocal decoded
        decoded += 1
        return real(self, commit)

    monkeypatch.setattr(Trace, "entry_of", counting)
    async with Coordinator.open(tmp_path / "s") as coord:
        got = {s.name: (s.head, s.fork_point, s.parent, s.effect_path.seq)
               for s in coord.scopes.values()}
        assert got == expect
        assert decoded <= 2 * len(got), f"{decoded} records decoded to open {len(got)} scopes"
        assert await coord.scope("a").read("after.txt") == b"after the checkpoint\n"
        r = await coord.scope("a").write("next.txt", b"n\n")
        assert r.effect.id == f"a#{expect['a'][3]}"
    # A trace from before fork refs: the walk finds the same lineage.
    for ref in git(git_dir, "for-each-ref", "--format=%(refname)", FORK_PREFIX).split():
        git(git_dir, "update-ref", "-d", ref)
    monkeypatch.undo()
    async with Coordinator.open(tmp_path / "s") as coord:
        assert coord.scope("b").fork_point == expect["b"][1]
        assert coord.scope("b").parent == "a"
        assert coord.scope("a").fork_point == expect["a"][1]


async def test_the_log_route_pages_with_limit_and_before_and_still_lists_everything(
    tmp_path, sample_repo
):
    """`/log` without parameters is the whole branch oldest first, as before;
    `?limit=&before=` pages it newest first; bad limits are 400, a cursor not
    handed out for this scope 404."""
    from coordinator import CorralError

    from .server_fixtures import serve

    async with serve(tmp_path / "state", sample_repo) as srv:
        c = srv.client
        fork = await c.fork("root", "a")
        a = c.with_token(fork.token)
        for i in range(7):
            await a.write("a", f"f{i}.txt", f"{i}\n".encode())
        whole = await a.log("a")
        assert [e.effect.seq for e in whole.entries if e.effect] == list(range(8))
        assert whole.next is None
        seen = []
        page = await a.log("a", limit=3)
        while True:
            assert len(page.entries) <= 3
            seen += [e.commit for e in page.entries]
            if page.next is None:
                break
            page = await a.log("a", limit=3, before=page.next)
        assert seen == [e.commit for e in reversed(whole.entries)]
        for bad in ("0", "1001", "x"):
            with pytest.raises(CorralError) as err:
                await c.request("GET", "/v1/scopes/a/log", params={"limit": bad})
            assert err.value.status == 400, bad
        # a cursor is signed for its scope: another scope's, or a bare commit
        # id (which would read any branch), is refused
        b = c.with_token((await c.fork("root", "b")).token)
        cursor = (await a.log("a", limit=2)).next
        assert cursor is not None
        for scope, forged in (("b", cursor), ("a", cursor.split(".")[0]),
                              ("a", whole.entries[3].commit + ".0")):
            with pytest.raises(CorralError) as err:
                await (b if scope == "b" else a).log(scope, limit=2, before=forged)
            assert err.value.status == 404, forged


async def test_archive_names_never_collide_with_another_scopes_rewound_refs(
    tmp_path, sample_repo
):
    """Scope `x`'s third discard and scope `x-3`'s rewinds would both want
    `archive/x-3`; the second gets another name, and checkpoints keep working."""
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        x3 = await coord.root.fork("x-3")
        await x3.write("a.txt", b"a\n")
        await x3.write("a.txt", b"b\n")
        await x3.rewind(steps=1)  # archive/x-3/rewound-<n>
        for _ in range(3):
            x = await coord.root.fork("x")
            await x.write("x.txt", b"x\n")
            await x.discard()  # archive/x-2, x-3 (taken as a directory), x-4 ...
        await coord.checkpoint()
        archived = coord.trace.refs("refs/corral/archive/")
        assert "refs/corral/archive/x-3" not in archived
        assert len([r for r in archived if r.startswith("refs/corral/archive/x-")
                    and "/" not in r[len("refs/corral/archive/"):]]) == 3
        assert git(tmp_path / "s" / "trace.git", "for-each-ref", "refs/corral/archive/")
        # the other order: archive/x-3 exists, then scope x-3 rewinds
        more = await coord.root.fork("x-4")
        await more.write("a.txt", b"a\n")
        await more.rewind(steps=1)
        await coord.checkpoint()
        assert any(r.startswith("refs/corral/archive/x-4.rewound-")
                   for r in coord.trace.refs("refs/corral/archive/"))


async def test_ref_name_free_sees_packed_refs_rewritten_after_it_read_them(
    tmp_path, sample_repo
):
    """The parsed packed-refs are kept until the file is replaced: a name under a ref
    a later checkpoint packed is taken, and free again once that ref is deleted."""
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        trace = coord.trace
        await coord.checkpoint()
        assert trace.ref_name_free("refs/corral/archive/y")  # packed-refs read here
        trace.set_ref("refs/corral/archive/y/rewound-0", coord.root.head)
        await coord.checkpoint()
        assert not trace.journal.ref_moves()  # only packed-refs knows it now
        assert not trace.ref_name_free("refs/corral/archive/y")
        assert trace.ref_name_free("refs/corral/archive/y0")
        trace.delete_ref("refs/corral/archive/y/rewound-0")
        await coord.checkpoint()
        assert trace.ref_name_free("refs/corral/archive/y")


async def test_a_checkpoint_renews_the_handles_and_the_old_ones_are_freed_at_once(
    tmp_path, sample_repo
):
    """What a repository handle caches grows with the history it read: after a
    checkpoint that wrote a pack, the event loop's handle is renewed even if no
    effect follows, an idle io thread's is dropped, and the old handles are
    freed at once (no reference cycle waits for the collector); reads keep
    working through the new ones, also of objects the journal has dropped."""
    import gc
    import weakref

    quiet = JournalBounds(checkpoint_s=3600.0)
    async with Coordinator.open(tmp_path / "s", sample_repo, journal=quiet) as coord:
        a = await coord.root.fork("a")
        for i in range(30):
            await a.write(f"f{i % 4}.txt", f"{i}\n".encode())
        trace = coord.trace
        old_loop = weakref.ref(trace.repo)
        old_io = weakref.ref(await coord.io(lambda: trace.repo))
        gc.disable()  # only reference counts may free them
        try:
            # the background checkpointer's way: another thread; the loop's renewal
            # is a callback, the idle io thread's handle is dropped from there
            await asyncio.to_thread(trace.checkpoint)
            await asyncio.sleep(0)
            assert old_loop() is None, "the loop thread's handle was renewed and freed"
            assert old_io() is None, "the idle io thread's handle was dropped and freed"
            threads = len(coord.runtime._pool._threads)
            gate = threading.Barrier(threads, timeout=10)

            def read() -> bytes:  # one job on every io thread
                gate.wait()
                return trace.read(a.head, "f1.txt")

            assert await asyncio.gather(*(coord.io(read) for _ in range(threads))) \
                == [b"29\n"] * threads
            assert trace.read(a.head, "f2.txt") == b"26\n"
            # a checkpoint with nothing to pack keeps the handles
            kept = weakref.ref(trace.repo)
            await coord.checkpoint()
            await asyncio.sleep(0)
            assert kept() is trace.repo
        finally:
            gc.enable()


async def test_journal_bounds_must_be_positive():
    """A bound of zero would checkpoint forever or never: refused."""
    for bad in ({"checkpoint_s": 0}, {"checkpoint_bytes": 0}, {"checkpoint_objects": 0},
                {"max_packs": 0}):
        with pytest.raises(ValueError):
            JournalBounds(**bad)
