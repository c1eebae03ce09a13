"""Recording a command's changes: bounded before anything is read, compared by
content id, and following nothing (see `_safe`).

The coordinator runs as root and holds every changed file in memory until it
is written to the trace, so the bytes and files one command may leave are
counted from lstat (sparse files at their apparent size) and refused past
Limits.changed_bytes / changed_files before a single file is read. A new file
is compared with the workspace's old one by git blob id against the caller's
BaseTree where it has the path, else with the workspace file itself, opened
beneath the workspace root without following any symlink.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from ._base import MODE_LINK, BaseTree, ChangesTooLarge, Limits
from ._files import git_mode
from ._safe import (
    lstat_at,
    lstat_beneath,
    open_beneath,
    open_dir,
    open_root,
    read_regular,
    same_content,
    scan,
)

__all__ = ["EMPTY_BLOB", "Budget", "New", "Recorder", "blob_id"]

EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8b2e48c5391"
"""git's blob id of no bytes: what every empty file is, without hashing."""

New = tuple[int, bytes, str]
"""(git mode, data, blob id) of what a command left at a path."""

_GONE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EXDEV)


def blob_id(data: bytes) -> str:
    """The git blob id (sha1, hex) of `data`, as `git hash-object` gives it."""
    if not data:
        return EMPTY_BLOB
    digest = hashlib.sha1(b"blob %d\0" % len(data), usedforsecurity=False)
    digest.update(data)
    return digest.hexdigest()


class Budget:
    """What recording one command costs so far, against its Limits; every count
    raises ChangesTooLarge as soon as it passes a ceiling."""

    __slots__ = ("allocated", "apparent", "dirs", "files", "held", "limits")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.files = self.dirs = self.apparent = self.allocated = self.held = 0

    def count(self, st: os.stat_result) -> None:
        """Count one entry a command left, from its lstat result."""
        if stat.S_ISDIR(st.st_mode):
            self.dirs += 1
            if self.dirs > self.limits.changed_files:
                raise ChangesTooLarge("changed_files", self.limits.changed_files, self.dirs,
                                      f"more than {self.limits.changed_files} directories")
            return
        self.files += 1
        if self.files > self.limits.changed_files:
            raise ChangesTooLarge("changed_files", self.limits.changed_files, self.files,
                                  f"more than {self.limits.changed_files} files")
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            self.apparent += st.st_size
            self.allocated += st.st_blocks * 512 if stat.S_ISREG(st.st_mode) else 0
            most = max(self.apparent, self.allocated)
            if most > self.limits.changed_bytes:
                raise ChangesTooLarge("changed_bytes", self.limits.changed_bytes, most,
                                      f"files of {most} bytes or more (sparse files "
                                      f"count their apparent size)")

    def count_deletions(self, n: int) -> None:
        """Count `n` files a command deleted (one per path, as the copy backend sees them)."""
        self.files += n
        if self.files > self.limits.changed_files:
            raise ChangesTooLarge("changed_files", self.limits.changed_files, self.files,
                                  f"more than {self.limits.changed_files} files")

    def remaining(self) -> int:
        """Bytes that may still be read and held."""
        return self.limits.changed_bytes - self.held

    def hold(self, size: int) -> None:
        """`size` more bytes read and held (a file that grew after lstat counts as read)."""
        self.held += size
        if self.held > self.limits.changed_bytes:
            raise ChangesTooLarge("changed_bytes", self.limits.changed_bytes, self.held,
                                  f"files of more than {self.limits.changed_bytes} bytes")


class Recorder:
    """Reads what a command left and tells it from the workspace's old state.

    `workspace` is the tree the command ran over (never followed: it may hold a
    symlink an earlier command left where a directory was). Use as a context
    manager: it holds an fd on `workspace`.
    """

    def __init__(self, workspace: Path, base: BaseTree | None, limits: Limits) -> None:
        self.budget = Budget(limits)
        self._base = base
        self._ws = open_root(workspace)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        os.close(self._ws)

    def new_entry(self, dir_fd: int, name: str, st: os.stat_result) -> New | None:
        """(mode, data, blob id) of the file or symlink `name` in `dir_fd` (lstat:
        `st`), held within the budget; None for what git cannot hold (FIFO,
        socket, device: never opened) or what is gone."""
        mode = git_mode(st)
        if mode is None:
            return None
        if mode == MODE_LINK:
            try:
                data = os.fsencode(os.readlink(name, dir_fd=dir_fd))
            except OSError as err:
                if err.errno in (*_GONE, errno.EINVAL):
                    return None
                raise
        elif st.st_size == 0:
            return mode, b"", EMPTY_BLOB
        else:
            read = read_regular(dir_fd, name, st, self.budget.remaining())
            if read is None:
                return None
            data = read
        self.budget.hold(len(data))
        return mode, data, blob_id(data)

    def workspace_dir(self, rel: str) -> int | None:
        """An O_PATH fd on the workspace's directory `rel`, or None when there is
        no real directory there (absent, a file, or reached through a symlink)."""
        return open_dir(self._ws, rel)

    def unchanged(self, rel: str, new: New, ws_dir: int | None,
                  below: os.stat_result | None) -> bool:
        """True when `new` at `rel` equals the workspace's old file: its entry in
        the base tree, else the file `below` (lstat of `rel` in the workspace
        directory `ws_dir`), compared without holding it."""
        mode, data, oid = new
        if self._base is not None:
            old = self._base.entry(rel)
            if old is not None:
                return old == (mode, oid)
        if ws_dir is None or below is None or git_mode(below) != mode:
            return False
        name = rel.rpartition("/")[2]
        if mode == MODE_LINK:
            try:
                return os.fsencode(os.readlink(name, dir_fd=ws_dir)) == data
            except OSError:
                return False
        return same_content(ws_dir, name, below, data)

    def workspace_stat(self, ws_dir: int | None, name: str) -> os.stat_result | None:
        """lstat of `name` in the workspace directory `ws_dir` (None: none there)."""
        return lstat_at(ws_dir, name) if ws_dir is not None else None

    def workspace_files(self, rel: str) -> Iterator[str]:
        """The files and symlinks of the workspace at or below `rel` (what deleting
        `rel` deletes); nothing when `rel` is reached only through a symlink."""
        st = lstat_beneath(self._ws, rel)
        if st is None:
            return
        if not stat.S_ISDIR(st.st_mode):
            if git_mode(st) is not None:
                yield rel
            return
        try:
            fd = open_beneath(self._ws, rel, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as err:
            if err.errno in _GONE:
                return
            raise
        try:
            for d in scan(fd):
                prefix = f"{rel}/{d.rel}" if d.rel else rel
                for name, est in d.entries:
                    if not stat.S_ISDIR(est.st_mode) and git_mode(est) is not None:
                        yield f"{prefix}/{name}"
        finally:
            os.close(fd)
