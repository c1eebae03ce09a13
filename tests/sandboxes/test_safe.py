"""The no-follow resolver: paths beneath a root, never through a symlink."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxes import TreeTooDeep
from sandboxes._safe import (
    _open_by_parts,
    lstat_beneath,
    open_beneath,
    open_root,
    read_regular,
    same_content,
    scan,
)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """root/{a/b/f, a/link -> b, up -> tmp_path, abs -> /, fifo}, outside/secret; yields
    (root, an fd on it)."""
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_bytes(b"data")
    os.symlink("b", root / "a" / "link")
    os.symlink(str(tmp_path), root / "up")
    os.symlink("/", root / "abs")
    os.mkfifo(root / "fifo")
    (tmp_path / "secret").write_text("s")
    fd = open_root(root)
    yield root, fd
    os.close(fd)


@pytest.mark.parametrize("opener", ["openat2", "by_parts"])
@pytest.mark.parametrize("rel", ["a/link/f", "up/secret", "abs/etc/passwd", "a/link"])
def test_no_symlink_is_followed_at_any_component(tree: tuple[Path, int], rel: str,
                                                  opener: str) -> None:
    """A symlink anywhere on the path, last component included, is refused: ELOOP
    (openat2; the fallback's O_DIRECTORY | O_NOFOLLOW on a symlink says ENOTDIR)."""
    _, fd = tree
    with pytest.raises(OSError) as err:
        if opener == "openat2":
            open_beneath(fd, rel, os.O_RDONLY)
        else:
            _open_by_parts(fd, rel.split("/"), os.O_PATH | os.O_NOFOLLOW)
    refusals = (errno.ELOOP,) if opener == "openat2" else (errno.ELOOP, errno.ENOTDIR)
    assert err.value.errno in refusals


def test_real_paths_open_and_bad_paths_are_refused(tree: tuple[Path, int]) -> None:
    """A path of real directories opens; `..`, absolute and empty components are refused."""
    _, fd = tree
    f = open_beneath(fd, "a/b/f", os.O_RDONLY)
    try:
        assert os.read(f, 10) == b"data"
    finally:
        os.close(f)
    for bad in ("../secret", "/etc/passwd", "a//b", "a/./b"):
        with pytest.raises(ValueError):
            open_beneath(fd, bad)


def test_lstat_beneath(tree: tuple[Path, int]) -> None:
    """lstat of the last component (a symlink is itself), None through a symlinked parent."""
    _, fd = tree
    st = lstat_beneath(fd, "a/link")
    assert st is not None and os.path.stat.S_ISLNK(st.st_mode)
    assert lstat_beneath(fd, "a/link/f") is None
    assert lstat_beneath(fd, "up/secret") is None
    assert lstat_beneath(fd, "nope/x") is None


def test_read_regular_refuses_fifo_and_symlink_and_bounds_the_read(
    tree: tuple[Path, int]
) -> None:
    """A FIFO is never opened for reading (no hang), a symlink is not read, and
    a read stops at limit + 1 bytes."""
    root, fd = tree
    b = os.open(root / "a" / "b", os.O_RDONLY | os.O_DIRECTORY)
    try:
        st = os.stat("f", dir_fd=b, follow_symlinks=False)
        assert read_regular(b, "f", st, 100) == b"data"
        assert read_regular(b, "f", st, 2) == b"dat"
        assert same_content(b, "f", st, b"data") and not same_content(b, "f", st, b"datb")
    finally:
        os.close(b)
    fifo = os.stat("fifo", dir_fd=fd, follow_symlinks=False)
    assert read_regular(fd, "fifo", fifo, 100) is None
    link = os.stat("up", dir_fd=fd, follow_symlinks=False)
    assert read_regular(fd, "up", link, 100) is None


def test_scan_stays_beneath_and_bounds_depth(tree: tuple[Path, int], tmp_path: Path) -> None:
    """scan lists symlinks as entries, never enters them; past MAX_SCAN_DEPTH it raises."""
    _, fd = tree
    seen = {(d.rel, name) for d in scan(fd) for name, _ in d.entries}
    assert ("", "up") in seen and ("a", "link") in seen and ("a/b", "f") in seen
    assert not any(rel.startswith(("up", "abs", "a/link")) for rel, _ in seen)
    deep = tmp_path / "deep"
    deep.mkdir()
    d = os.open(deep, os.O_RDONLY)
    for _ in range(300):
        os.mkdir("d", dir_fd=d)
        sub = os.open("d", os.O_RDONLY, dir_fd=d)
        os.close(d)
        d = sub
    os.close(d)
    root = open_root(deep)
    try:
        with pytest.raises(TreeTooDeep):
            for _ in scan(root):
                pass
    finally:
        os.close(root)
