"""read_entry_beneath: what the live (FUSE) path reads of a file an agent wrote,
never through a symlinked parent and never past its byte limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandboxes import MODE_EXEC, MODE_FILE, MODE_LINK, ChangesTooLarge, read_entry_beneath


def test_reads_files_links_and_modes(tmp_path: Path) -> None:
    """A file, an executable and a symlink read as git sees them."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d/f.txt").write_text("hello\n")
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "run.sh", 0o755)
    os.symlink("d/f.txt", tmp_path / "link")
    assert read_entry_beneath(tmp_path, "d/f.txt", 100) == (MODE_FILE, b"hello\n")
    assert read_entry_beneath(tmp_path, "run.sh", 100) == (MODE_EXEC, b"#!/bin/sh\n")
    assert read_entry_beneath(tmp_path, "link", 100) == (MODE_LINK, b"d/f.txt")
    assert read_entry_beneath(tmp_path, "missing", 100) is None


def test_a_symlinked_parent_is_not_followed(tmp_path: Path) -> None:
    """`d -> outside`: d/secret is absent from the workspace, whatever outside holds."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host data")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(outside, ws / "d")
    assert read_entry_beneath(ws, "d/secret", 100) is None
    os.symlink("/etc", ws / "etc")
    assert read_entry_beneath(ws, "etc/passwd", 1 << 20) is None


def test_a_fifo_is_never_opened(tmp_path: Path) -> None:
    """A FIFO is no file git holds: None at once (opening it would block)."""
    os.mkfifo(tmp_path / "pipe")
    assert read_entry_beneath(tmp_path, "pipe", 100) is None


def test_a_sparse_file_past_the_limit_is_refused_before_reading(tmp_path: Path) -> None:
    """A 10 GB sparse file costs nothing to make; reading it is refused from lstat."""
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(10 << 30)
    with pytest.raises(ChangesTooLarge, match="changed_bytes"):
        read_entry_beneath(tmp_path, "sparse", 1 << 20)
