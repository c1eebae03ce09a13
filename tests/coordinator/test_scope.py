"""Scopes through the public API: fork, file effects, exec, rewind, merge, discard."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from coordinator import (
    Coordinator,
    ExecOutcome,
    FsWrite,
    RewindError,
    SandboxFailure,
    ScopeDiscarded,
    block,
)

pytestmark = pytest.mark.asyncio


def app_with(line: int, text: str) -> bytes:
    lines = [f"line {i}\n" for i in range(1, 21)]
    lines[line - 1] = text + "\n"
    return "".join(lines).encode()


@pytest.mark.slow
async def test_write_read_commit_tree_is_workspace(tmp_path: Path, sample_repo: Path, backend):
    """A write lands in the workspace and in a commit whose tree holds it."""
    async with Coordinator.open(tmp_path / "s", sample_repo, backend=backend) as coord:
        a = await coord.root.fork("alice")
        r = await a.write("src/new.py", b"x = 1\n")
        assert r.ok and r.commit == a.head
        assert await a.read("src/new.py") == b"x = 1\n"
        assert (a.path / "src" / "new.py").read_bytes() == b"x = 1\n"
        assert coord.trace.read(a.head, "src/new.py") == b"x = 1\n"
        assert coord.trace.read(a.head, "README.md") == b"# sample\n"
        effects = coord.log(a)
        assert [e.kind for e in effects] == ["scope.fork", "fs.write"]
        assert effects[-1].status == "materialized"


@pytest.mark.slow
async def test_fork_isolation(tmp_path: Path, sample_repo: Path, backend):
    """A child's writes are invisible to its parent and siblings."""
    async with Coordinator.open(tmp_path / "s", sample_repo, backend=backend) as coord:
        a = await coord.root.fork("alice")
        b = await coord.root.fork("bob")
        await a.write("README.md", b"alice\n")
        await a.delete("docs/guide.md")
        assert await b.read("README.md") == b"# sample\n"
        assert await coord.root.read("README.md") == b"# sample\n"
        assert await b.read("docs/guide.md") == b"guide\n"
        c = await a.fork("carol")  # a dirty parent
        assert await c.read("README.md") == b"alice\n"
        await c.write("README.md", b"carol\n")
        assert await a.read("README.md") == b"alice\n"
        with pytest.raises(FileNotFoundError):
            await c.read("docs/guide.md")


async def test_patch_and_delete(tmp_path: Path, sample_repo: Path, backend):
    async with Coordinator.open(tmp_path / "s", sample_repo, backend=backend) as coord:
        a = await coord.root.fork("a")
        diff = "@@ -1,2 +1,2 @@\n def helper():\n-    return 1\n+    return 2\n"
        r = await a.patch("src/util.py", diff)
        assert r.ok
        assert await a.read("src/util.py") == b"def helper():\n    return 2\n"
        await a.delete("src/util.py")
        assert not (a.path / "src/util.py").exists()
        with pytest.raises(KeyError):
            coord.trace.tree_of(a.head)["src/util.py"]


@pytest.mark.slow
async def test_exec_is_transactional(tmp_path: Path, sample_repo: Path, backend):
    """A command's file changes are reviewed before they land; blocked, nothing lands."""
    decisions = []

    async def no_secret(intent, view):
        decisions.append(intent)
        if intent.kind == "exec" and intent.changes and any(
            c.path == "secret.txt" for c in intent.changes
        ):
            return block("secret.txt is off limits")
        return None

    async with Coordinator.open(
        tmp_path / "s", sample_repo, backend=backend, policies=[no_secret]
    ) as coord:
        a = await coord.root.fork("a")
        r = await a.exec(["sh", "-c", "echo hi > out.txt; rm docs/guide.md; echo done"])
        assert r.ok, r.effect
        assert isinstance(r.outcome, ExecOutcome) and r.outcome.returncode == 0
        assert coord.trace.blob(r.outcome.stdout) == b"done\n"
        assert (a.path / "out.txt").read_bytes() == b"hi\n"
        assert not (a.path / "docs/guide.md").exists()
        assert coord.trace.read(a.head, "out.txt") == b"hi\n"
        before = a.head
        r = await a.exec(["sh", "-c", "echo s > secret.txt; echo t > other.txt"])
        assert r.blocked and "off limits" in r.reason
        assert not (a.path / "secret.txt").exists() and not (a.path / "other.txt").exists()
        assert coord.trace.show(a.head).effect.status == "blocked"
        assert coord.trace.tree_of(a.head).id == coord.trace.tree_of(before).id
        # the reviewer saw the intent twice: before running, and with its changes
        assert [d.changes is None for d in decisions if d.kind == "exec"] == [
            True, False, True, False
        ]


async def test_exec_ignored_files_stay_out_of_the_trace(tmp_path, sample_repo, backend):
    async with Coordinator.open(tmp_path / "s", sample_repo, backend=backend) as coord:
        a = await coord.root.fork("a")
        r = await a.exec(["sh", "-c", "mkdir -p build && echo o > build/out && echo k > k.py"])
        assert r.ok
        assert r.outcome.ignored == ("build/out",)
        assert (a.path / "build/out").exists()
        tree = coord.trace.tree_of(a.head)
        assert "k.py" in tree and "build" not in tree
        await a.rewind(steps=1)
        assert not (a.path / "build/out").exists() and not (a.path / "k.py").exists()


async def test_blocked_write_touches_nothing(tmp_path: Path, sample_repo: Path, backend):
    async def guard(intent, view):
        if isinstance(intent, FsWrite) and intent.path.startswith("src/"):
            return block(f"{view.scope} may not write src/")
        return None

    async with Coordinator.open(
        tmp_path / "s", sample_repo, backend=backend, policies=[guard]
    ) as coord:
        a = await coord.root.fork("a")
        r = await a.write("src/app.py", b"nope\n")
        assert r.blocked and r.reason == "a may not write src/"
        assert r.decision.policy == "guard"
        assert (a.path / "src/app.py").read_bytes().startswith(b"line 1")
        assert coord.log(a)[-1].status == "blocked"


@pytest.mark.slow
async def test_rewind_restores_tree_exactly(tmp_path: Path, sample_repo: Path, backend):
    async with Coordinator.open(tmp_path / "s", sample_repo, backend=backend) as coord:
        a = await coord.root.fork("a")
        await a.write("one.txt", b"1")
        mark = a.head
        await a.write("two.txt", b"2")
        await a.write("README.md", b"changed")
        await a.delete("docs/guide.md")
        r = await a.rewind(to=mark)
        assert r.ok
        assert coord.trace.tree_of(a.head).id == coord.trace.tree_of(mark).id
        assert (a.path / "one.txt").exists() and not (a.path / "two.txt").exists()
        assert (a.path / "README.md").read_bytes() == b"# sample\n"
        assert (a.path / "docs/guide.md").read_bytes() == b"guide\n"
        # the rewound-away history is kept under an archive ref
        archived = coord.trace.refs("refs/corral/archive/a/")
        assert len(archived) == 1
        await a.rewind(steps=2)  # the rewind commit, then one.txt
        assert not (a.path / "one.txt").exists()
        with pytest.raises(RewindError):
            await a.rewind(steps=50)
        with pytest.raises(RewindError, match="before the fork point"):
            await a.rewind(to=coord.trace.snapshot())


@pytest.mark.slow
async def test_merge_clean_and_conflict_with_provenance(tmp_path, sample_repo, backend):
    async with Coordinator.open(tmp_path / "s", sample_repo, backend=backend) as coord:
        a = await coord.root.fork("alice")
        b = await coord.root.fork("bob")
        await a.write("src/app.py", app_with(3, "alice was here"))
        wa = a.head
        await b.write("src/app.py", app_with(3, "bob was here"))
        wb = b.head
        await b.write("docs/new.md", b"bob docs\n")
        m = await coord.root.merge(a)
        assert m.clean and m.commit is not None
        assert len(coord.trace.commit(m.commit).parent_ids) == 2
        assert b"alice was here" in await coord.root.read("src/app.py")
        dry = await coord.root.merge(b, dry_run=True)
        assert not dry.clean and dry.commit is None
        [c] = dry.conflicts
        assert c.path == "src/app.py" and c.kind == "content"
        assert c.ours_commit == wa and c.theirs_commit == wb
        [h] = c.hunks
        assert h.ours_start == 3 and h.ours == ("alice was here",)
        assert h.theirs == ("bob was here",) and h.base == ("line 3",)
        head = coord.root.head
        failed = await coord.root.merge(b)
        assert not failed.clean and failed.commit is None
        assert coord.trace.show(coord.root.head).effect.status == "failed"
        assert coord.trace.tree_of(coord.root.head).id == coord.trace.tree_of(head).id
        theirs = await coord.root.merge(b, strategy="theirs")
        assert theirs.commit and b"bob was here" in await coord.root.read("src/app.py")
        assert await coord.root.read("docs/new.md") == b"bob docs\n"


@pytest.mark.slow
async def test_discard_is_idempotent_and_keeps_history(tmp_path, sample_repo, backend):
    async with Coordinator.open(tmp_path / "s", sample_repo, backend=backend) as coord:
        a = await coord.root.fork("a")
        await a.write("x", b"x")
        head = a.head
        assert (await a.discard()).ok
        assert await a.discard() is None
        [archive] = coord.trace.refs("refs/corral/archive/a-")
        assert coord.trace.is_ancestor(head, str(coord.trace.commit(archive).id))
        with pytest.raises(ScopeDiscarded):
            await coord.root.merge(a)
        with pytest.raises(ScopeDiscarded):
            await a.write("y", b"y")
        again = await coord.root.fork("a")  # the name is free again
        assert await again.read("README.md") == b"# sample\n"


@pytest.mark.slow
async def test_trace_reads_with_stock_git(tmp_path: Path, sample_repo: Path, backend):
    async with Coordinator.open(tmp_path / "s", sample_repo, backend=backend) as coord:
        a = await coord.root.fork("alice")
        await a.write("a.txt", b"a\n")
        await coord.root.merge(a)
    git_dir = tmp_path / "s" / "trace.git"
    graph = subprocess.run(
        ["git", "--git-dir", str(git_dir), "log", "--graph", "--oneline", "--all"],
        check=True, capture_output=True, text=True,
    ).stdout
    assert "scope.merge alice" in graph and "fs.write a.txt" in graph
    fsck = subprocess.run(["git", "--git-dir", str(git_dir), "fsck", "--strict"],
                          capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


@pytest.mark.slow
async def test_reopen_rebuilds_workspaces(tmp_path: Path, sample_repo: Path, backend):
    async with Coordinator.open(tmp_path / "s", sample_repo, backend=backend) as coord:
        a = await coord.root.fork("alice")
        await a.write("a.txt", b"a\n")
        await a.delete("README.md")
        head = a.head
    async with Coordinator.open(tmp_path / "s", backend=backend) as coord:
        a = coord.scope("alice")
        assert a.head == head and a.parent == "root"
        assert await a.read("a.txt") == b"a\n"
        assert not (a.path / "README.md").exists()
        r = await a.write("b.txt", b"b")
        assert r.effect.seq == 3
        await a.rewind(steps=3)  # back to the fork point, still known after reopen
        assert coord.trace.commit(a.head).parents[0].id == coord.trace.commit(a.fork_point).id
        with pytest.raises(RewindError):
            await a.rewind(steps=2)  # the rewind commit, then past the fork point


@pytest.mark.parametrize("layers", ["memory", "disk"])
async def test_layers_in_memory_or_on_disk(tmp_path, sample_repo, monkeypatch, layers):
    """CORRAL_LAYERS picks where writable layers live; scopes behave the same."""
    import sandboxes

    if sandboxes.OverlayBackend.unavailable_reason():
        pytest.skip(f"overlay unavailable: {sandboxes.OverlayBackend.unavailable_reason()}")
    monkeypatch.setenv("CORRAL_LAYERS", layers)
    async with Coordinator.open(tmp_path / "s", sample_repo, backend="overlay") as coord:
        a = await coord.root.fork("a")
        await a.write("x.txt", b"x")
        b = await a.fork("b")
        assert await b.read("x.txt") == b"x"
        on_tmpfs = any(
            line.split()[4].startswith(str(tmp_path)) and " - tmpfs " in line
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
        )
        assert on_tmpfs == (layers == "memory")


async def test_bad_layers_setting_is_refused(tmp_path, sample_repo, monkeypatch):
    from coordinator import StateError

    monkeypatch.setenv("CORRAL_LAYERS", "ssd")
    with pytest.raises(StateError, match="CORRAL_LAYERS"):
        async with Coordinator.open(tmp_path / "s", sample_repo):
            pass


@pytest.mark.root
async def test_a_fork_whose_workspace_cannot_be_made_leaves_nothing(tmp_path, sample_repo):
    """The workspace, its tree and the fork's commit are one step: when the workspace
    cannot be made, fork raises SandboxFailure, no fork is recorded and the name stays
    free; the same fork succeeds once the cause is gone."""
    async with Coordinator.open(tmp_path / "s", sample_repo, backend="overlay") as coord:
        backend = coord.backend
        blocker = backend._state / "U" / format(int(backend._next_id(), 16) + 1, "x")
        blocker.write_text("in the way of the next workspace's upper layer")
        with pytest.raises(SandboxFailure, match="could not fork 'root'"):
            await coord.root.fork("alice")
        assert "alice" not in coord.scopes
        assert not [r for r in coord.trace.repo.references if r.endswith("/alice")]
        blocker.unlink()
        alice = await coord.root.fork("alice")
        assert [e.kind for e in coord.log(alice)] == ["scope.fork"]


async def test_exec_changes_land_whether_few_and_small_or_many_and_large(
        tmp_path, sample_repo, backend):
    """A command's changes land in the scope and its commit alike whether they are a few
    small files (copied in on the loop) or many, or large (copied in on a thread)."""
    async with Coordinator.open(tmp_path / "s", sample_repo, backend=backend) as coord:
        a = await coord.root.fork("a")
        r = await a.exec(["sh", "-c", "echo small > s.txt; rm docs/guide.md"])
        assert r.ok and [c.path for c in r.outcome.changes] == ["docs/guide.md", "s.txt"]
        big = "head -c 200000 /dev/zero | tr '\\0' x > big.txt; " \
              "for i in 1 2 3 4 5 6; do echo $i > many$i.txt; done"
        r = await a.exec(["sh", "-c", big])
        assert r.ok and len(r.outcome.changes) == 7
        for path, data in [("s.txt", b"small\n"), ("big.txt", b"x" * 200000),
                           ("many6.txt", b"6\n")]:
            assert (a.path / path).read_bytes() == data == coord.trace.read(a.head, path)
        assert not (a.path / "docs/guide.md").exists()


async def test_a_fork_at_a_commit_a_rewind_left(tmp_path: Path, sample_repo: Path):
    """A commit the scope rewound away from is still its history to fork at (a rollout
    forks just before a supervisor's rewind); a commit of another scope is not."""
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        a, other = await coord.root.fork("a"), await coord.root.fork("other")
        await a.write("x.txt", b"1\n")
        left = a.head
        await a.rewind(steps=1)
        child = await a.fork("child", at=left)
        assert child.head != left and await child.read("x.txt") == b"1\n"
        await other.write("y.txt", b"2\n")
        with pytest.raises(RewindError, match="not in the history"):
            await a.fork("bad", at=other.head)
