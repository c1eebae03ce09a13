"""The trace's journal: acknowledged effects are in it before any checkpoint,
checkpoints move them into plain git, a torn tail is dropped, nothing is pruned."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from coordinator import Coordinator, JournalBounds, Policy
from coordinator.records._effects import Decision
from coordinator.store import _journal
from coordinator.store._trace import Trace

pytestmark = pytest.mark.asyncio


QUIET = JournalBounds(checkpoint_s=3600.0)
"""These tests look at the trace between checkpoints: only theirs may run."""


def open_quiet(*args, journal: JournalBounds = QUIET, **kwargs):
    return Coordinator.open(*args, journal=journal, **kwargs)


def git(git_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args],
                          capture_output=True, text=True, check=check)


def packs(git_dir: Path) -> list[Path]:
    return sorted((git_dir / "objects" / "pack").glob("pack-*.pack"))


def journal_files(git_dir: Path) -> list[str]:
    return sorted(p.name for p in (git_dir / "corral-journal").glob("*.log"))


async def test_effects_are_readable_before_a_checkpoint_and_in_git_after(tmp_path, sample_repo):
    git_dir = tmp_path / "s" / "trace.git"
    async with open_quiet(tmp_path / "s", sample_repo) as coord:
        a = await coord.root.fork("a")
        r = await a.write("new.txt", b"hello\n")
        assert coord.trace.journal.held_bytes >= len(b"hello\n")
        # Plain git does not see it yet; a read-only trace (another process's view) does.
        assert git(git_dir, "cat-file", "-e", r.commit, check=False).returncode != 0
        reader = Trace(git_dir, writable=False)
        assert reader.head("a") == r.commit
        assert reader.read(r.commit, "new.txt") == b"hello\n"
        assert reader.commit(r.commit[:10]).id == coord.trace.commit(r.commit).id
        await coord.checkpoint()
        assert git(git_dir, "rev-parse", "refs/corral/scopes/a").stdout.strip() == r.commit
        assert git(git_dir, "show", f"{r.commit}:new.txt").stdout == "hello\n"
        # the journal generations it held are gone; the live one is empty
        assert all((git_dir / "corral-journal" / n).stat().st_size == 0
                   for n in journal_files(git_dir))
        # reads still work once the objects left memory for the pack
        assert coord.trace.read(a.head, "new.txt") == b"hello\n"
        r2 = await a.write("new.txt", b"again\n")
    assert git(git_dir, "show", f"{r2.commit}:new.txt").stdout == "again\n"
    assert journal_files(git_dir) == []
    assert git(git_dir, "fsck", "--strict").returncode == 0


@pytest.mark.slow
async def test_a_torn_tail_is_dropped_and_the_rest_replayed(tmp_path, sample_repo):
    git_dir = tmp_path / "s" / "trace.git"
    async with open_quiet(tmp_path / "s", sample_repo) as coord:
        a = await coord.root.fork("a")
        acked = await a.write("kept.txt", b"kept\n")
        # What a kill leaves behind: the live generation, not checkpointed.
        log = git_dir / "corral-journal" / journal_files(git_dir)[-1]
        saved = log.read_bytes()
    assert saved, "the acknowledged write was in the journal"
    # Put the un-checkpointed journal back, as after a SIGKILL, with a torn record.
    git(git_dir, "update-ref", "refs/corral/scopes/a", a.fork_point)
    log.write_bytes(saved + _journal._record(b"R", b"\x01" * 20 + b"refs/x")[:-3])
    async with open_quiet(tmp_path / "s") as coord:
        assert coord.scope("a").head == acked.commit
        assert coord.trace.ref("refs/x") is None
        assert coord.trace.journal.held_bytes == 0  # replayed, then checkpointed
        assert await coord.scope("a").read("kept.txt") == b"kept\n"
    assert git(git_dir, "fsck", "--strict").returncode == 0


class BlockAll(Policy):
    async def __call__(self, intent, view):  # type: ignore[override]
        return Decision(verdict="block", reason="no")


@pytest.mark.slow
async def test_roll_up_keeps_packs_few_and_prunes_nothing(
    tmp_path, sample_repo, caplog
):
    git_dir = tmp_path / "s" / "trace.git"
    bounds = JournalBounds(checkpoint_s=3600.0, max_packs=3)
    async with open_quiet(tmp_path / "s", sample_repo, journal=bounds) as coord:
        a = await coord.root.fork("a")
        heads = []
        for i in range(8):
            heads.append((await a.write(f"f{i}.txt", f"{i}\n".encode())).commit)
            await coord.checkpoint()
            assert len(packs(git_dir)) <= 4
        coord.chain.policies.append(BlockAll())
        blocked = await a.write("no.txt", b"refused content\n")
        assert blocked.blocked
        blob = blocked.effect.intent.blob  # type: ignore[union-attr]
        for i in range(4):
            coord.chain.policies.clear()
            await a.write(f"g{i}.txt", b"x")
            await coord.checkpoint()
    assert not [r for r in caplog.records if "rolling up" in r.getMessage()]
    # the refused write's content is referenced only by its record: still there
    assert git(git_dir, "cat-file", "-p", blob).stdout == "refused content\n"
    for h in heads:
        assert git(git_dir, "cat-file", "-t", h).stdout.strip() == "commit"
    assert git(git_dir, "fsck", "--strict").returncode == 0


@pytest.mark.slow
async def test_a_failed_checkpoint_keeps_everything_for_the_next_open(
    tmp_path, sample_repo, monkeypatch
):
    def broken(self, objects):
        raise _journal.StateError("checkpoint: disk full (simulated)")

    coord_cm = open_quiet(tmp_path / "s", sample_repo)
    coord = await coord_cm.__aenter__()
    a = await coord.root.fork("a")
    acked = await a.write("kept.txt", b"kept\n")
    monkeypatch.setattr(_journal.Journal, "_write_pack", broken)
    with pytest.raises(_journal.StateError, match="disk full"):
        await coord_cm.__aexit__(None, None, None)
    monkeypatch.undo()
    async with open_quiet(tmp_path / "s") as coord:
        assert coord.scope("a").head == acked.commit
        assert await coord.scope("a").read("kept.txt") == b"kept\n"
    assert git(tmp_path / "s" / "trace.git", "fsck", "--strict").returncode == 0


async def test_trace_cli_reads_the_journal_and_graph_says_what_git_cannot_see(
    tmp_path, sample_repo
):
    from typer.testing import CliRunner

    from coordinator.cli import app

    state = tmp_path / "s"
    async with open_quiet(state, sample_repo) as coord:
        a = await coord.root.fork("alice")
        r = await a.write("new.txt", b"hello\n")
        runner = CliRunner()
        log = runner.invoke(app, ["trace", "log", "alice", "--state", str(state), "--json"])
        assert log.exit_code == 0 and r.commit in log.output
        graph = runner.invoke(app, ["trace", "graph", "--state", str(state)])
        assert graph.exit_code == 0
        assert "not yet checkpointed" in graph.output


async def test_a_ref_deleted_in_the_journal_is_gone_before_the_checkpoint(tmp_path, sample_repo):
    """Discarding moves the scope's ref to the archive: until the checkpoint the
    old ref is still on disk, and must not be resolved from there."""
    from coordinator import NotFound

    async with open_quiet(tmp_path / "s", sample_repo) as coord:
        a = await coord.root.fork("a")
        await coord.checkpoint()  # the scope's ref is on disk now
        await a.discard()
        ref = "refs/corral/scopes/a"
        assert git(tmp_path / "s" / "trace.git", "rev-parse", ref).returncode == 0
        assert coord.trace.ref(ref) is None
        assert "a" not in coord.trace.scope_names()
        with pytest.raises(NotFound):
            coord.trace.commit(ref)


@pytest.mark.slow
async def test_a_checkpoint_packs_its_ref_moves_into_packed_refs(tmp_path, sample_repo):
    """A checkpoint writes its ref moves as one `packed-refs` (git's format,
    sorted): plain git lists them and walks their logs; a loose ref left on
    disk is replaced, not left shadowing the packed value; a discarded scope's
    ref leaves packed-refs too. While someone holds packed-refs.lock the refs
    go loose, one by one, as before."""
    git_dir = tmp_path / "s" / "trace.git"
    async with open_quiet(tmp_path / "s", sample_repo) as coord:
        scopes = [await coord.root.fork(f"s{i}") for i in range(20)]
        heads = {s.name: (await s.write("f.txt", s.name.encode())).commit for s in scopes}
        await coord.checkpoint()
        packed = (git_dir / "packed-refs").read_text()
        assert packed.startswith("# pack-refs with: ")
        names = [ln.split(" ", 1)[1] for ln in packed.splitlines()
                 if ln and ln[0] not in "#^"]
        assert names == sorted(names)
        assert not (git_dir / "refs" / "corral" / "scopes" / "s3").exists()  # not loose
        listed = dict(ln.split(" ", 1) for ln in git(
            git_dir, "for-each-ref", "--format=%(refname) %(objectname)",
            "refs/corral/scopes/").stdout.splitlines())
        for name, commit in heads.items():
            assert listed[f"refs/corral/scopes/{name}"] == commit
            assert git(git_dir, "log", "-1", "--format=%H",
                       f"refs/corral/scopes/{name}").stdout.strip() == commit

        # a stale loose ref (a checkpoint of old, or git itself) must not shadow the move
        s0 = scopes[0]
        (git_dir / "refs" / "corral" / "scopes").mkdir(parents=True, exist_ok=True)
        (git_dir / "refs" / "corral" / "scopes" / "s0").write_text(heads["s0"] + "\n")
        r = await s0.write("g.txt", b"g")
        await scopes[1].discard()
        await coord.checkpoint()
        assert git(git_dir, "rev-parse", "refs/corral/scopes/s0").stdout.strip() == r.commit
        assert not (git_dir / "refs" / "corral" / "scopes" / "s0").exists()
        assert "refs/corral/scopes/s1\n" not in (git_dir / "packed-refs").read_text()
        assert git(git_dir, "rev-parse", "--verify", "-q", "refs/corral/scopes/s1",
                   check=False).returncode != 0

        # packed-refs locked: the loose way, still correct
        (git_dir / "packed-refs.lock").write_text("")
        try:
            r2 = await scopes[2].write("h.txt", b"h")
            await coord.checkpoint()
        finally:
            (git_dir / "packed-refs.lock").unlink()
        assert (git_dir / "refs" / "corral" / "scopes" / "s2").read_text().strip() == r2.commit
        assert git(git_dir, "rev-parse", "refs/corral/scopes/s2").stdout.strip() == r2.commit
    assert git(git_dir, "fsck", "--strict").returncode == 0
    assert git(git_dir, "pack-refs", "--all").returncode == 0  # git takes the file as its own
    assert git(git_dir, "rev-parse", "refs/corral/scopes/s2").stdout.strip() == r2.commit
