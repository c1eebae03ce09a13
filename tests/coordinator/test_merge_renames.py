"""A file one side renames and the other edits in place: the edit follows the
file to its new name, and the merged tree is the one `git merge-tree` gives."""

from __future__ import annotations

import pytest

from coordinator import Coordinator
from tests.coordinator.test_laws import git_merge_tree

LINES = [f"line {i}\n" for i in range(1, 21)]


def text(changes: dict[int, str]) -> bytes:
    lines = LINES.copy()
    for n, t in changes.items():
        lines[n - 1] = t + "\n"
    return "".join(lines).encode()


async def rename(scope, old: str, new: str, data: bytes) -> None:
    assert (await scope.delete(old)).ok
    assert (await scope.write(new, data)).ok


@pytest.mark.slow
@pytest.mark.parametrize("renamer", ["ours", "theirs"])
async def test_an_edit_follows_the_rename(tmp_path, sample_repo, renamer):
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        a = await coord.root.fork("a")
        b = await coord.root.fork("b")
        mover, editor = (a, b) if renamer == "ours" else (b, a)
        # the mover renames src/app.py and changes line 2; the editor changes line 15
        await rename(mover, "src/app.py", "src/main.py", text({2: "moved"}))
        assert (await editor.write("src/app.py", text({15: "edited"}))).ok
        await coord.checkpoint()
        want_tree, git_conflicts = git_merge_tree(str(coord.trace.path), a.head, b.head)
        assert want_tree is not None and not git_conflicts  # git merges it cleanly too
        m = await a.merge(b)
        assert m.commit is not None and not m.conflicts
        assert str(coord.trace.commit(m.commit).tree_id) == want_tree
        assert await a.read("src/main.py") == text({2: "moved", 15: "edited"})
        with pytest.raises(FileNotFoundError):
            await a.read("src/app.py")


async def test_conflicting_edits_across_a_rename_conflict_at_the_new_name(tmp_path, sample_repo):
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        a = await coord.root.fork("a")
        b = await coord.root.fork("b")
        await rename(b, "src/app.py", "src/main.py", text({5: "theirs"}))
        edit = await a.write("src/app.py", text({5: "ours"}))
        m = await a.merge(b, dry_run=True)
        [c] = m.conflicts
        assert c.path == "src/main.py" and c.kind == "content"
        assert [(h.ours_start, h.ours, h.theirs) for h in c.hunks] == [
            (5, ("ours",), ("theirs",))
        ]
        assert c.ours_commit == edit.commit  # provenance follows the old name on our side
        resolved = await a.merge(b, strategy="theirs")
        assert resolved.commit is not None
        assert await a.read("src/main.py") == text({5: "theirs"})


def test_rename_detection_runs_only_for_a_file_deleted_here_and_edited_there():
    """No diff is computed (the trace is not even touched) unless one side deleted
    a file the other edited and added some file."""
    from coordinator.store._merge import _renames

    blob = ("0" * 40, 0o100644)
    assert _renames(None, "", "", {"a": None, "b": blob}, {"c": blob}) == {}  # a untouched there
    assert _renames(None, "", "", {"a": None}, {"a": blob}) == {}  # nothing added here
    assert _renames(None, "", "", {"a": blob, "b": blob}, {"a": blob}) == {}  # no deletion
