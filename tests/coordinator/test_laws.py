"""The substrate's laws, as Hypothesis property tests on real repositories and workspaces.

- fork isolation: a child's writes are invisible to its parent and siblings;
- rewind to c gives exactly tree(c), in the trace and in the workspace;
- merge results and conflict sets agree with `git merge-tree --write-tree`;
- discard is idempotent and keeps history;
- no committed effect is ever lost.
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import sandboxes
from coordinator import Coordinator, Scope
from coordinator.store._merge import three_way
from tests.conftest import make_repo

pytestmark = pytest.mark.slow  # property laws against git, many examples

BACKEND = "overlay" if sandboxes.OverlayBackend.unavailable_reason() is None else "copy"
BASE = {f"f{i}.txt": "".join(f"{i}-{j}\n" for j in range(8)) for i in range(4)}
BASE[".gitignore"] = "*.log\n"
NAMES = [*(f"f{i}.txt" for i in range(4)), "n0.txt", "n1.txt", "d/n2.txt"]

LAW = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# An edit: (path, None) deletes; (path, (line, text)) replaces a line (or
# creates the file when missing); (path, ("new", text)) writes a whole new file.
edit = st.tuples(
    st.sampled_from(NAMES),
    st.one_of(
        st.none(),
        st.tuples(st.integers(0, 7), st.sampled_from(["x", "y", "z", "x\ny"])),
    ),
)
edits = st.lists(edit, min_size=1, max_size=6)


def edits_moving_to(dest: str) -> st.SearchStrategy[list]:
    """Edits that may also rename a file to `dest` ((path, ("mv", dest))). Each
    side of a merge gets its own destination, so the renames meet edits,
    deletions and each other (one file renamed two ways) but never a path the
    other side wrote: Corral does not follow git into those collisions."""
    move = st.tuples(st.sampled_from(NAMES), st.tuples(st.just("mv"), st.just(dest)))
    return st.lists(st.one_of(edit, move), min_size=1, max_size=6)


async def apply_edits(scope: Scope, todo: list, model: dict[str, bytes]) -> list[str]:
    """Apply edits through the scope and mirror them in `model`; returns the commits."""
    commits = []
    for path, change in todo:
        if change is not None and change[0] == "mv":
            dest = change[1]
            if path not in model or dest in model:
                continue
            data = model.pop(path)
            assert (await scope.delete(path)).ok
            r = await scope.write(dest, data)
            model[dest] = data
        elif change is None:
            if path not in model:
                continue
            r = await scope.delete(path)
            del model[path]
        else:
            line, text = change
            lines = model.get(path, b"".join(f"{path}-{j}\n".encode() for j in range(8)))
            split = lines.decode().splitlines(keepends=True)
            split[line % len(split)] = text + "\n"
            data = "".join(split).encode()
            r = await scope.write(path, data)
            model[path] = data
        assert r.ok
        commits.append(r.commit)
    return commits


def workspace_files(scope: Scope) -> dict[str, bytes]:
    return {
        p: data for p, (_, data) in sandboxes.snapshot_files(scope.path).items()
        if not p.endswith(".log")
    }


def tree_files(coord: Coordinator, commit: str) -> dict[str, bytes]:
    trace = coord.trace
    return {p: trace.blob(b) for p, b, _ in trace.iter_files(str(trace.commit(commit).tree_id))}


def run(scenario, *args) -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            repo = make_repo(Path(tmp) / "repo", BASE)
            async with Coordinator.open(Path(tmp) / "state", repo, backend=BACKEND) as coord:
                await scenario(coord, *args)
                await reachable_law(coord)

    asyncio.run(main())


async def reachable_law(coord: Coordinator) -> None:
    """Every commit a caller was told about is reachable from a ref; fsck is clean."""
    git_dir = str(coord.trace.path)
    told = getattr(coord, "_told", [])
    tips = [str(coord.trace.commit(r).id) for r in coord.trace.refs("refs/corral/")]
    for commit in told:
        assert any(coord.trace.is_ancestor(commit, tip) for tip in tips), commit
    await coord.checkpoint()  # plain git reads the repository on disk
    fsck = subprocess.run(["git", "--git-dir", git_dir, "fsck"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


@LAW
@given(edits, edits)
def test_fork_isolation(ours, theirs):
    """Writes in one fork never show in the parent or a sibling."""

    async def scenario(coord: Coordinator) -> None:
        base = workspace_files(coord.root)
        a = await coord.root.fork("a")
        b = await coord.root.fork("b")
        ma, mb = dict(base), dict(base)
        coord._told = await apply_edits(a, ours, ma)  # type: ignore[attr-defined]
        coord._told += await apply_edits(b, theirs, mb)  # type: ignore[attr-defined]
        c = await a.fork("c")  # fork of a dirty parent sees exactly the parent
        assert workspace_files(a) == ma == tree_files(coord, a.head)
        assert workspace_files(b) == mb == tree_files(coord, b.head)
        assert workspace_files(c) == ma
        assert workspace_files(coord.root) == base

    run(scenario)


@LAW
@given(edits, st.integers(0, 100))
def test_rewind_gives_exactly_the_tree(todo, pick):
    """After rewind(to=c) the workspace and the head tree equal tree(c)."""

    async def scenario(coord: Coordinator) -> None:
        a = await coord.root.fork("a")
        commits = [a.head, *await apply_edits(a, todo, workspace_files(a))]
        # an ignored file written after the target is dropped by the rewind
        await a.exec(["sh", "-c", "echo noise > late.log"])
        target = commits[pick % len(commits)]
        await a.rewind(to=target)
        assert coord.trace.tree_of(a.head).id == coord.trace.tree_of(target).id
        assert workspace_files(a) == tree_files(coord, target)
        assert not (a.path / "late.log").exists()
        coord._told = commits  # type: ignore[attr-defined]

    run(scenario)


def git_merge_tree(git_dir: str, ours: str, theirs: str) -> tuple[str | None, set[str]]:
    proc = subprocess.run(
        ["git", "--git-dir", git_dir, "merge-tree", "--write-tree", "--name-only", ours, theirs],
        capture_output=True, text=True,
    )
    assert proc.returncode in (0, 1), proc.stderr
    lines = proc.stdout.split("\n\n")[0].splitlines()
    if proc.returncode == 0:
        return lines[0], set()
    return None, set(lines[1:])


@LAW
@given(edits_moving_to("m0.txt"), edits_moving_to("m1.txt"))
def test_merge_agrees_with_git_merge_tree(ours, theirs):
    """Corral's merge and `git merge-tree --write-tree` (renames detected, git's
    default) agree on the merged tree (clean) or on the set of conflicting paths."""

    async def scenario(coord: Coordinator) -> None:
        a = await coord.root.fork("a")
        b = await coord.root.fork("b")
        await apply_edits(a, ours, workspace_files(a))
        await apply_edits(b, theirs, workspace_files(b))
        await coord.checkpoint()
        want_tree, want_conflicts = git_merge_tree(str(coord.trace.path), a.head, b.head)
        dry = await a.merge(b, dry_run=True)
        got = await coord.io(three_way, coord.trace, dry.base, a.head, b.head)
        event("conflict" if want_conflicts else "clean")
        assert {c.path for c in got.conflicts} == want_conflicts
        assert {c.path for c in dry.conflicts} == want_conflicts
        if want_tree is not None:
            assert got.tree == want_tree
            before = a.head
            real = await a.merge(b)
            assert real.commit is not None
            assert str(coord.trace.commit(real.commit).tree_id) == want_tree
            assert workspace_files(a) == tree_files(coord, real.commit)
            coord._told = [before, real.commit]  # type: ignore[attr-defined]

    run(scenario)


@LAW
@given(edits, st.integers(1, 3))
def test_discard_is_idempotent_and_keeps_history(todo, times):
    """Discarding any number of times archives the branch once, history intact."""

    async def scenario(coord: Coordinator) -> None:
        a = await coord.root.fork("a")
        commits = await apply_edits(a, todo, workspace_files(a))
        results = [await a.discard() for _ in range(times)]
        assert results[0] is not None and results[0].ok
        assert all(r is None for r in results[1:])
        [archive] = coord.trace.refs("refs/corral/archive/a-")
        assert coord.trace.is_ancestor(results[0].commit, str(coord.trace.commit(archive).id))
        coord._told = [*commits, results[0].commit]  # type: ignore[attr-defined]

    run(scenario)
