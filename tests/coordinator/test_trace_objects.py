"""The trace writes its trees and commits itself (not through libgit2, whose every
object write rescans the pack directory): the objects must be the ones libgit2
writes, byte for byte, for any tree and any change to it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.store._trace import EMPTY_TREE, TREE_MODE, Trace, nest
from tests.conftest import git, make_repo

# Names chosen for git's ordering: a directory sorts as if its name ended in '/'
# ('a-b' < 'a/' < 'a0'), bytes sort as unsigned ('é' after 'z').
_NAMES = ["a", "a-b", "a.b", "a0", "ab", "b", "z", "é", "a b", "A"]
_MODES = [0o100644, 0o100755, 0o120000]

_paths = st.lists(st.sampled_from(_NAMES), min_size=1, max_size=3).map("/".join)


def _blob(trace: Trace, text: str) -> str:
    return trace.write_blob(text.encode())


def _reference_build(repo: pygit2.Repository, base: str | None,
                     changes: dict[str, tuple[str, int] | None]) -> str:
    """The tree libgit2's TreeBuilder makes of the same changes (the old way)."""

    def build(tree: pygit2.Tree | None, nested: dict[str, object]) -> pygit2.Oid | None:
        builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
        for name, new in nested.items():
            existing = builder.get(name)
            if isinstance(new, dict):
                sub = repo[existing.id].peel(pygit2.Tree) \
                    if existing is not None and existing.filemode == TREE_MODE else None
                oid = build(sub, new)
                if oid is None:
                    if existing is not None:
                        builder.remove(name)
                else:
                    builder.insert(name, oid, TREE_MODE)
            elif new is None:
                if existing is not None:
                    builder.remove(name)
            else:
                assert isinstance(new, tuple)
                builder.insert(name, pygit2.Oid(hex=new[0]), new[1])
        return builder.write() if len(builder) else None

    oid = build(repo[base].peel(pygit2.Tree) if base else None, nest(changes))
    return str(oid) if oid is not None else EMPTY_TREE


def _without_prefix_clashes(changes: dict[str, object]) -> dict[str, object]:
    """Drop changes under a path another change names as a file: one effect never
    writes both `a` and `a/b`."""
    return {p: v for p, v in changes.items()
            if not any(p.startswith(q + "/") for q in changes if q != p)}


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    t = Trace(tmp_path_factory.mktemp("objects") / "trace.git")
    yield t
    t.close()


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.dictionaries(_paths, st.tuples(st.text(max_size=3), st.sampled_from(_MODES)),
                            max_size=8),
       changes=st.dictionaries(_paths, st.none() | st.tuples(st.text(max_size=3),
                                                             st.sampled_from(_MODES)),
                               max_size=5))
def test_trees_are_the_ones_libgit2_writes(trace: Trace, base, changes) -> None:
    def as_changes(d):
        return {p: None if v is None else (_blob(trace, v[0]), v[1])
                for p, v in _without_prefix_clashes(d).items()}

    first = as_changes(base)
    ours_base = trace.build_tree(None, first)
    assert ours_base == _reference_build(trace.repo, None, first)
    second = as_changes(changes)
    ours = trace.build_tree(ours_base, second)
    assert ours == _reference_build(trace.repo, ours_base, second)
    assert trace.repo[ours].type == pygit2.enums.ObjectType.TREE  # readable through libgit2


def test_an_emptied_tree_is_the_empty_tree(trace: Trace) -> None:
    base = trace.build_tree(None, {"d/f": (_blob(trace, "x"), 0o100644)})
    assert trace.build_tree(base, {"d/f": None}) == EMPTY_TREE
    assert len(trace.repo[EMPTY_TREE].peel(pygit2.Tree)) == 0


@pytest.mark.parametrize("path", [".git/config", "a/../b", "a/./b", "d/.GIT"])
def test_names_git_refuses_are_refused(trace: Trace, path: str) -> None:
    with pytest.raises(ValueError):
        trace.build_tree(None, {path: (_blob(trace, "x"), 0o100644)})


def test_a_mode_git_cannot_hold_is_refused(trace: Trace) -> None:
    with pytest.raises(ValueError, match="mode"):
        trace.build_tree(None, {"f": (_blob(trace, "x"), 0o100600)})


@pytest.mark.parametrize("parents", [0, 1, 2])
def test_commits_are_the_ones_libgit2_writes(tmp_path: Path, parents: int) -> None:
    clock = iter([1_700_000_000.7] * 10)
    t = Trace(tmp_path / "trace.git", author="corral", clock=lambda: next(clock))
    try:
        tree = t.build_tree(None, {"f": (t.write_blob(b"x"), 0o100644)})
        ps = [t.write_commit(tree, [], f"root {i}\n") for i in range(parents)]
        message = "summary ✓\n\n{\"json\": true}\n"
        ours = t.write_commit(tree, ps, message)
        sig = pygit2.Signature("corral", "corral@localhost", 1_700_000_000, 0)
        theirs = t.repo.create_commit(None, sig, sig, message, pygit2.Oid(hex=tree),
                                      [pygit2.Oid(hex=p) for p in ps])
        assert ours == str(theirs)
        commit = t.repo[ours].peel(pygit2.Commit)
        assert commit.message == message and [str(p) for p in commit.parent_ids] == ps
    finally:
        t.close()


def test_object_ids_are_git_hashes(trace: Trace) -> None:
    tree = trace.build_tree(None, {"f": (trace.write_blob(b"x"), 0o100644)})
    _, data = trace.repo.odb.read(tree)
    assert hashlib.sha1(b"tree %d\0" % len(data) + data).hexdigest() == tree


@pytest.mark.parametrize("author", ["", " corral", "a <b>", "a\nb"])
def test_an_author_git_cannot_write_is_refused(tmp_path: Path, author: str) -> None:
    with pytest.raises(ValueError, match="author"):
        Trace(tmp_path / "t.git", author=author)


def test_a_tree_git_wrote_is_rebuilt_to_the_same_id(tmp_path: Path, trace: Trace) -> None:
    """git's own tree (names on both sides of 'a/' in git's order, an executable, a
    symlink, a submodule) rebuilt from its file listing has git's id."""
    files = {"a/x": "1", "a-b/y": "2", "a0": "3", "a.b": "4", "ab/c/d": "5", "run.sh": "6",
             "é/z": "7", "z": "8"}
    repo = make_repo(tmp_path / "repo", files)
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("a0")
    git(repo, "add", "-A")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},sub")
    git(repo, "commit", "-qm", "odd entries")
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    listing = {}
    for line in git(repo, "ls-tree", "-r", "-z", "HEAD").split("\0"):
        if line:
            meta, path = line.split("\t", 1)
            mode, _, oid = meta.split()
            listing[path] = (oid, int(mode, 8))
    assert {m for _, m in listing.values()} == {0o100644, 0o100755, 0o120000, 0o160000}
    assert trace.build_tree(None, listing) == tree


def test_a_commits_tree_is_known_before_and_after_a_checkpoint(trace: Trace) -> None:
    tree = trace.build_tree(None, {"f": (trace.write_blob(b"k"), 0o100644)})
    commit = trace.write_commit(tree, [], "remembered\n")
    assert trace.commit_tree(commit) == tree == trace.commit_tree(commit[:12])
    trace.checkpoint()
    assert trace.commit_tree(commit) == tree


async def test_git_fsck_strict_finds_nothing_wrong_in_a_trace(tmp_path: Path) -> None:
    """Attack: what `git fsck --strict` thinks of the trees and commits Corral
    wrote itself — writes on both sides of git's 'a/' ordering, a file turned
    into a directory, a deletion, a symlink and an executable from a command,
    a merge commit — once checkpointed into a pack."""
    import subprocess

    from coordinator import Coordinator

    repo = make_repo(tmp_path / "repo", {"a/x": "1\n", "b": "2\n"})
    state = tmp_path / "state"
    async with Coordinator.open(state, repo=repo) as coord:
        a = await coord.root.fork("a")
        b = await coord.root.fork("b")
        for path in ("a-b", "a0", "a.b", "a/y", "é/z"):
            await a.write(path, b"w\n")
        await a.delete("b")
        await a.write("b/inner", b"now a directory\n")
        await b.exec(["bash", "-c", "ln -s a0 link && printf '#!/bin/sh\\n' > run && "
                      "chmod +x run"])
        assert (await a.merge(b)).tree is not None
        await coord.checkpoint()
    done = subprocess.run(["git", "--git-dir", str(state / "trace.git"), "fsck", "--strict",
                           "--no-dangling"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr and "warning" not in done.stderr, done.stderr
