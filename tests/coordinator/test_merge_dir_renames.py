"""git's directory renames and two renames onto one name, through scopes: a side
moves a whole directory while the other adds a file in it (git moves the file
along and reports its location as a conflict), and two files renamed onto one
name merge as git's rename/rename(2to1). Each failed before these merges went to
git (`coordinator.store._gitmerge`): the first merged clean with the new file
left in the old directory, the second took one side's file under "union"."""

from __future__ import annotations

import pygit2
import pytest

from coordinator import Coordinator
from coordinator.store._gitmerge import handed_to_git
from tests.coordinator.test_merge_favors import assert_as_git

BODY = b"".join(f"line {i}\n".encode() for i in range(12))
OTHER = b"".join(f"other {i}\n".encode() for i in range(12))


async def move(scope, old: str, new: str) -> None:
    data = await scope.read(old)
    assert (await scope.delete(old)).ok
    assert (await scope.write(new, data)).ok


@pytest.mark.parametrize("mover", ["ours", "theirs"])
async def test_a_file_added_in_a_moved_directory_goes_with_it(tmp_path, sample_repo, mover):
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        movers, adder = (a, b) if mover == "ours" else (b, a)
        for name in await coord.root.listdir("src"):
            await move(movers, f"src/{name}", f"lib/{name}")
        assert (await adder.write("src/new.py", b"new = 1\n")).ok
        m = await a.merge(b, dry_run=True)
        [c] = m.conflicts
        assert (c.path, c.kind) == ("lib/new.py", "file location")
        assert m.tree is None
        side = c.theirs if mover == "ours" else c.ours
        assert side is not None and coord.trace.blob(side) == b"new = 1\n"
        writer = c.theirs_commit if mover == "ours" else c.ours_commit
        assert writer == adder.head  # provenance: the commit that wrote src/new.py
        done = await a.merge(b, resolver=lambda c, anc, o, t: o or t)
        assert done.commit is not None
        assert await a.read("lib/new.py") == b"new = 1\n"
        assert "src" not in await a.listdir()


@pytest.mark.parametrize("strategy", ["fail", "union", "ours", "theirs"])
def test_a_moved_directory_takes_the_other_sides_new_file(strategy):
    assert_as_git(strategy, {"d/f.txt": BODY}, {"d/f.txt": None, "e/f.txt": BODY},
                  {"d/n.txt": b"new\n"})


@pytest.mark.parametrize("strategy", ["fail", "union", "ours", "theirs"])
def test_two_files_renamed_onto_one_name_merge_as_git(strategy):
    """Ours renames f.txt to c.txt and edits g.txt; theirs renames g.txt to c.txt
    and edits f.txt: each edit follows its file to c.txt before the two meet."""
    assert_as_git(strategy, {"f.txt": BODY, "g.txt": OTHER},
                  {"f.txt": None, "c.txt": BODY, "g.txt": OTHER + b"x\n"},
                  {"g.txt": None, "c.txt": OTHER, "f.txt": b"y\n" + BODY})


def test_a_directory_the_mover_still_holds_is_not_renamed():
    """One file moved out of d/ while another stays: git renames no directory,
    the new file stays in d/, and the merge is done in process."""
    assert_as_git("fail", {"d/f.txt": BODY, "d/g.txt": OTHER},
                  {"d/f.txt": None, "e/f.txt": BODY}, {"d/n.txt": b"new\n"})


def test_only_these_shapes_go_to_git(tmp_path):
    """A merge without an emptied directory that gets a file, an exact rename
    with two candidates, or one path both sides add while both delete, is not
    handed to git."""
    repo = pygit2.init_repository(str(tmp_path), bare=True)
    blob = str(repo.create_blob(b"x\n"))

    def tree(files: dict[str, str]):
        index = pygit2.Index()
        for p, oid in files.items():
            index.add(pygit2.IndexEntry(p, pygit2.Oid(hex=oid), 0o100644))
        return repo[index.write_tree(repo)]

    base = tree({"d/f": blob, "g": blob})
    moved = tree({"e/f": blob, "g": blob})
    kept = tree({"d/f": blob, "g": blob, "d/n": blob})
    f = (blob, 0o100644)
    assert handed_to_git(base, moved, kept, {"d/f": None, "e/f": f}, {"d/n": f})
    assert not handed_to_git(base, kept, kept, {"d/n": f}, {"d/n": f})
    assert not handed_to_git(base, moved, base, {"d/f": None, "e/f": f}, {"g": f})
    assert handed_to_git(base, base, base, {"g": None, "c": f}, {"d/f": None, "c": f})
    assert not handed_to_git(base, base, base, {"c": f}, {"d/f": None, "c": f})
    g = (str(repo.create_blob(b"y\n")), 0o100644)
    # d/f's content added twice where theirs edits d/f: which one git pairs is ort's
    assert handed_to_git(base, base, base, {"d/f": None, "e/f": f, "n": f}, {"d/f": g})
    assert not handed_to_git(base, base, base, {"d/f": None, "e/f": f}, {"d/f": g})
