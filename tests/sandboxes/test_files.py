"""apply_changes: materializing changes into a plain directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandboxes import MODE_EXEC, MODE_FILE, MODE_LINK, Change, apply_changes, snapshot_files


def _tree(root: Path) -> Path:
    (root / "d/sub").mkdir(parents=True)
    (root / "d/sub/a").write_text("a")
    (root / "f").write_text("f")
    os.symlink("f", root / "link")
    return root


def test_writes_files_with_parents_and_modes(tmp_path: Path) -> None:
    """New files get their parent directories, the exec bit and symlink targets."""
    root = _tree(tmp_path)
    apply_changes(
        root,
        [
            Change("new/deep/x", b"x", MODE_EXEC),
            Change("f", b"f2", MODE_FILE),
            Change("l2", b"new/deep/x", MODE_LINK),
        ],
    )
    files = snapshot_files(root)
    assert files["new/deep/x"] == (MODE_EXEC, b"x")
    assert files["f"] == (MODE_FILE, b"f2")
    assert files["l2"] == (MODE_LINK, b"new/deep/x")


def test_replaces_directories_and_symlinks(tmp_path: Path) -> None:
    """A file replaces a whole directory, a symlink, or a file standing where a parent
    directory must go."""
    root = _tree(tmp_path)
    apply_changes(
        root,
        [Change("d", b"now a file"), Change("link", b"plain"), Change("f/inner", b"i")],
    )
    assert snapshot_files(root) == {
        "d": (MODE_FILE, b"now a file"),
        "f/inner": (MODE_FILE, b"i"),
        "link": (MODE_FILE, b"plain"),
    }


def test_delete_prunes_empty_parents(tmp_path: Path) -> None:
    """Deleting the last file of a directory removes the directories left empty."""
    root = _tree(tmp_path)
    apply_changes(root, [Change("d/sub/a", None), Change("missing/x", None)])
    assert not (root / "d").exists()
    assert (root / "f").exists()


def test_delete_never_follows_a_symlinked_parent(tmp_path: Path) -> None:
    """A deletion below a symlinked directory does not reach the link's target."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("k")
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "escape")
    apply_changes(root, [Change("escape/keep", None)])
    assert (outside / "keep").exists()


@pytest.mark.parametrize("bad", ["/abs", "../up", "a/../b", "", "a//b"])
def test_rejects_paths_leaving_the_root(tmp_path: Path, bad: str) -> None:
    """Absolute and non-normalized paths are refused."""
    with pytest.raises(ValueError):
        apply_changes(tmp_path, [Change(bad, b"x")])


def test_a_large_batch_is_applied_exactly_as_a_small_one(tmp_path: Path) -> None:
    """Past the size where new files are made by fd: new files in new and old
    directories, executables, overwrites, a symlinked parent replaced by a real
    directory and deletions all land as they do one by one."""
    from sandboxes import MODE_EXEC, MODE_FILE, MODE_LINK, Change, apply_changes, snapshot_files

    def tree(root: Path) -> None:
        (root / "old").mkdir(parents=True)
        (root / "old" / "keep.txt").write_text("keep\n")
        (root / "old" / "gone.txt").write_text("gone\n")
        os.symlink("old", root / "link")

    changes = [Change(f"new/d{i % 7}/f{i}.txt", f"{i}\n".encode(),
                      MODE_EXEC if i % 5 == 0 else MODE_FILE) for i in range(150)]
    changes += [Change("old/keep.txt", b"changed\n"), Change("old/gone.txt", None),
                Change("link/inside.txt", b"real dir now\n"), Change("ln", b"old", MODE_LINK)]
    changes.sort(key=lambda c: c.path)
    big, small = tmp_path / "big", tmp_path / "small"
    for root in (big, small):
        tree(root)
    apply_changes(big, changes)
    for change in changes:
        apply_changes(small, [change])
    assert snapshot_files(big) == snapshot_files(small)
    assert (big / "link").is_dir() and not (big / "link").is_symlink()
    assert os.stat(big / "new/d0/f0.txt").st_mode & 0o111
