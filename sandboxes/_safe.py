"""Reading a tree a command could have rigged, as root, without following it.

A command's layer, a scratch copy and the workspace below them hold whatever
the command (or an earlier one) left: a directory swapped for a symlink to `/`,
a FIFO where a file was, `/proc`. The coordinator reads them as root, so every
path it opens here is resolved beneath a directory fd with no symlink followed
at any component (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS; where the kernel or a seccomp filter refuses openat2,
the same one component at a time with O_NOFOLLOW), and only regular files are
ever opened for reading: anything else is looked at through an O_PATH fd,
which calls no driver and blocks on nothing.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from ._base import MAX_SCAN_DEPTH, TreeTooDeep

__all__ = ["DIR_FLAGS", "Dir", "lstat_at", "lstat_beneath", "open_beneath", "open_dir",
           "open_regular", "open_root", "read_regular", "same_content", "scan"]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""Opening a directory to list it, refusing a symlink in its place."""

CHUNK = 1024 * 1024
"""Bytes read at once: a read never asks for more than this."""

_RESOLVE = 0x08 | 0x04 | 0x02  # RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(platform.machine())
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_openat2_works = _SYS_OPENAT2 is not None
_GONE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EXDEV)
"""What a path that is absent, or not reachable without following, fails with."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


def open_root(path: Path) -> int:
    """An fd on the directory `path` (the root of what is read beneath it); the
    coordinator made `path` itself, so only its last component is not followed."""
    return os.open(path, DIR_FLAGS)


def _parts(rel: str) -> list[str]:
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"not a normalized relative path: {rel!r}")
    return parts


def open_beneath(root_fd: int, rel: str, flags: int = os.O_PATH) -> int:
    """An fd on `rel` beneath `root_fd`, opened with `flags` (plus O_NOFOLLOW and
    O_CLOEXEC), no symlink followed anywhere on the way ("" is the root itself).

    Raises OSError: ELOOP when a component is a symlink, ENOENT, ENOTDIR, and
    ValueError for a path that is not relative and normalized."""
    global _openat2_works
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if not rel:
        return os.open(".", flags, dir_fd=root_fd)
    parts = _parts(rel)
    if _openat2_works:
        how = _OpenHow(flags, 0, _RESOLVE)
        fd = _libc.syscall(_SYS_OPENAT2, ctypes.c_int(root_fd), os.fsencode(rel),
                           ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EPERM):
            raise OSError(err, os.strerror(err), rel)
        _openat2_works = False
    return _open_by_parts(root_fd, parts, flags)


def _open_by_parts(root_fd: int, parts: list[str], flags: int) -> int:
    """open_beneath without openat2: one component at a time, each not followed."""
    fd = root_fd
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)
            if fd != root_fd:
                os.close(fd)
            fd = nxt
        out = os.open(parts[-1], flags, dir_fd=fd)
    finally:
        if fd != root_fd:
            os.close(fd)
    if flags & os.O_PATH and stat.S_ISLNK(os.fstat(out).st_mode):
        # O_PATH | O_NOFOLLOW opens a symlink itself; openat2 refuses it: so do we
        os.close(out)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), "/".join(parts))
    return out


def open_dir(root_fd: int, rel: str) -> int | None:
    """An O_PATH fd on the directory `rel` beneath `root_fd` (open_beneath), or
    None when there is no real directory there: absent, not a directory, or
    reached only through a symlink."""
    try:
        return open_beneath(root_fd, rel, os.O_PATH | os.O_DIRECTORY)
    except OSError as err:
        if err.errno in _GONE:
            return None
        raise


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """lstat of `name` in the directory `dir_fd`; None when absent."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as err:
        if err.errno in _GONE:
            return None
        raise


def lstat_beneath(root_fd: int, rel: str) -> os.stat_result | None:
    """lstat of `rel` beneath `root_fd`; None when it is absent or a component on
    the way is not a real directory (a symlink to one included)."""
    parent, _, name = rel.rpartition("/")
    try:
        fd = open_beneath(root_fd, parent, os.O_PATH | os.O_DIRECTORY)
    except OSError as err:
        if err.errno in _GONE:
            return None
        raise
    try:
        return lstat_at(fd, name)
    finally:
        os.close(fd)


def open_regular(dir_fd: int, name: str, st: os.stat_result) -> int | None:
    """A read-only fd on the regular file `name` in `dir_fd` that lstat saw as
    `st`; None when it is gone or is no longer that file. A FIFO, device or
    socket is never opened for reading: only an O_PATH fd, checked by fstat,
    is ever opened before the file is known to be the regular file `st`."""
    try:
        path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as err:
        if err.errno in _GONE:
            return None
        raise
    try:
        now = os.fstat(path_fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return None
        # reopening the O_PATH fd opens the very inode fstat checked
        return os.open(f"/proc/self/fd/{path_fd}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    finally:
        os.close(path_fd)


def read_regular(dir_fd: int, name: str, st: os.stat_result, limit: int) -> bytes | None:
    """The content of the regular file `name` in `dir_fd` that lstat saw as `st`
    (see open_regular), read CHUNK bytes at a time and at most `limit` + 1 bytes
    (more than `limit` tells the caller it grew past what it allowed). None when
    it is gone or is no longer that file."""
    fd = open_regular(dir_fd, name, st)
    if fd is None:
        return None
    try:
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(CHUNK, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def same_content(dir_fd: int, name: str, st: os.stat_result, data: bytes) -> bool:
    """True when the regular file `name` in `dir_fd` (lstat: `st`) holds `data`,
    compared CHUNK bytes at a time: nothing of it is held."""
    if st.st_size != len(data):
        return False
    fd = open_regular(dir_fd, name, st)
    if fd is None:
        return False
    view, offset = memoryview(data), 0
    try:
        while True:
            chunk = os.read(fd, min(CHUNK, len(data) + 1 - offset))
            if not chunk:
                return offset == len(data)
            if view[offset:offset + len(chunk)] != chunk:
                return False
            offset += len(chunk)
    finally:
        os.close(fd)


class Dir(NamedTuple):
    """One directory of a scan: where it is, an fd on it, and what it holds."""

    rel: str
    """POSIX path relative to the scan's root ("" for the root)."""
    fd: int
    """Open on the directory while the scan is at it; closed by the scan."""
    entries: list[tuple[str, os.stat_result]]
    """(name, lstat result) of each entry, in directory order."""


def scan(root_fd: int) -> Iterator[Dir]:
    """Every directory at or below `root_fd`, parents before children, each
    opened from its parent's fd without following a symlink (a directory
    swapped for one while scanning is skipped). Entries that vanish are left
    out. At most MAX_SCAN_DEPTH + 1 fds are open at once. Raises TreeTooDeep
    on a directory deeper than MAX_SCAN_DEPTH."""
    frames: list[tuple[int, str, list[str]]] = []
    fd: int | None = os.open(".", DIR_FLAGS, dir_fd=root_fd)
    rel = ""
    try:
        while fd is not None:
            entries = _entries(fd)
            yield Dir(rel, fd, entries)
            subs = [name for name, st in entries if stat.S_ISDIR(st.st_mode)]
            frames.append((fd, rel, subs[::-1]))
            fd = None
            while frames and fd is None:
                parent_fd, parent, pending = frames[-1]
                if not pending:
                    os.close(parent_fd)
                    frames.pop()
                    continue
                name = pending.pop()
                sub = f"{parent}/{name}" if parent else name
                if sub.count("/") >= MAX_SCAN_DEPTH:
                    raise TreeTooDeep(sub)
                try:
                    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
                except OSError as err:
                    if err.errno not in _GONE:
                        raise
                    continue
                rel = sub
    finally:
        if fd is not None:  # opened, not yet handed to `frames`
            os.close(fd)
        for parent_fd, _, _ in frames:
            os.close(parent_fd)


def _entries(fd: int) -> list[tuple[str, os.stat_result]]:
    out = []
    with os.scandir(fd) as it:
        for entry in it:
            try:
                out.append((entry.name, entry.stat(follow_symlinks=False)))
            except FileNotFoundError:
                continue
    return out
