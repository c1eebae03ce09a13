"""The overlayfs layer format: whiteouts, opaque directories, and what they mean.

A deletion in an upper layer is a 0/0 character device (a whiteout); a
directory that replaced a lower one carries trusted.overlay.opaque="y" and
hides everything below it. Layers are mounted with redirect_dir and metacopy
off, so these two are the only special entries.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from ._base import BaseTree, Change, Limits
from ._files import remove_path
from ._record import Recorder
from ._safe import open_dir, open_root, scan

__all__ = ["copy_layer", "is_opaque", "is_opaque_at", "is_whiteout", "squash_layers",
           "upper_changes"]

OPAQUE_XATTR = "trusted.overlay.opaque"


def is_whiteout(st: os.stat_result) -> bool:
    """True for overlayfs' deletion marker (a 0/0 character device)."""
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def is_opaque(path: Path) -> bool:
    """True when the directory at `path` hides the lower layers' content below it."""
    try:
        return os.getxattr(path, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError as err:
        if err.errno in (errno.ENODATA, errno.ENOTSUP, errno.ENOENT):
            return False
        raise


def is_opaque_at(dir_fd: int, name: str) -> bool:
    """is_opaque of the entry `name` of the directory open at `dir_fd` (not followed)."""
    return is_opaque(Path(f"/proc/self/fd/{dir_fd}/{name}"))


def upper_changes(upper: Path, lower: Path, base: BaseTree | None = None,
                  limits: Limits | None = None) -> list[Change]:
    """The changes an upper layer makes to the merged tree `lower` below it.

    A file equal to the old one (`base`'s entry, else `lower`'s file: see
    Recorder.unchanged) is no change, so a copy-up that kept the content and
    mode (e.g. `touch`) is none. Nothing is followed in either tree, and the
    whole upper is counted from lstat before any file is read. Returns the
    changes sorted by path. Raises ChangesTooLarge past `limits`' changed_bytes
    or changed_files, TreeTooDeep on a directory deeper than MAX_SCAN_DEPTH.
    """
    limits = limits or Limits()
    up = open_root(upper)
    try:
        with Recorder(lower, base, limits) as rec:
            dirs, opaque = _survey(up, rec)
            out: dict[str, Change] = {}
            for rel, entries in dirs:
                _record_dir(up, rel, entries, opaque, rec, out)
    finally:
        os.close(up)
    return [out[k] for k in sorted(out)]


Listing = list[tuple[str, list[tuple[str, os.stat_result]]]]


def _survey(up: int, rec: Recorder) -> tuple[Listing, set[str]]:
    """Every directory of the upper with its entries, each counted against the
    budget (before anything is read), and the opaque directories among them."""
    dirs: Listing = []
    opaque = set()
    for d in scan(up):
        for name, st in d.entries:
            rec.budget.count(st)
            if stat.S_ISDIR(st.st_mode) and is_opaque_at(d.fd, name):
                opaque.add(f"{d.rel}/{name}" if d.rel else name)
        dirs.append((d.rel, d.entries))
    return dirs, opaque


def _record_dir(up: int, current: str, entries: list[tuple[str, os.stat_result]],
                opaque: set[str], rec: Recorder, out: dict[str, Change]) -> None:
    """Add to `out` the changes of one upper directory's entries (its
    subdirectories' own entries come with their turn)."""
    ws_dir = rec.workspace_dir(current)
    up_dir: int | None = None
    try:
        for name, st in entries:
            rel = f"{current}/{name}" if current else name
            below = rec.workspace_stat(ws_dir, name)
            below_is_dir = below is not None and stat.S_ISDIR(below.st_mode)
            if is_whiteout(st):
                out.update((sub, Change(sub, None)) for sub in rec.workspace_files(rel))
            elif stat.S_ISDIR(st.st_mode):
                if below is not None and (not below_is_dir or rel in opaque):
                    # replaced file or replaced directory: the old content goes;
                    # files written below are added when their directory's turn comes
                    out.update((sub, Change(sub, None)) for sub in rec.workspace_files(rel))
            else:
                if up_dir is None:
                    up_dir = open_dir(up, current)
                    if up_dir is None:
                        return  # swapped away since the survey: nothing of it is read
                new = rec.new_entry(up_dir, name, st)
                if new is None:
                    continue  # fifo, socket, device: git cannot hold them
                if below_is_dir:
                    out.update((sub, Change(sub, None)) for sub in rec.workspace_files(rel))
                if rec.unchanged(rel, new, ws_dir, below):
                    out.pop(rel, None)
                else:
                    out[rel] = Change(rel, new[1], new[0])
    finally:
        for fd in (ws_dir, up_dir):
            if fd is not None:
                os.close(fd)


def copy_layer(src: Path, dst: Path) -> None:
    """Copy the layer `src` (an upper, possibly in use) into a new directory
    `dst`, whiteouts and opaque markers included. Entries that vanish while
    copying are skipped: the copy is the state at some moment of the walk.
    """
    os.mkdir(dst)
    os.chmod(dst, stat.S_IMODE(os.lstat(src).st_mode))
    stack = [""]
    while stack:
        current = stack.pop()
        for entry in os.scandir(src / current):
            rel = f"{current}/{entry.name}" if current else entry.name
            try:
                _copy_entry(Path(entry.path), dst / rel, stack, rel)
            except FileNotFoundError:
                continue


def squash_layers(layers: Sequence[Path], dst: Path) -> None:
    """Merge `layers` (topmost first) into one new layer `dst` that gives the same
    view over whatever lies below them. Whiteouts are kept: they may hide files
    of the layers underneath."""
    os.mkdir(dst)
    for layer in reversed(layers):
        stack = [""]
        while stack:
            current = stack.pop()
            for entry in os.scandir(layer / current):
                rel = f"{current}/{entry.name}" if current else entry.name
                src, target = Path(entry.path), dst / rel
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) and not is_opaque(src):
                    try:
                        was = os.lstat(target)
                    except FileNotFoundError:
                        was = None
                    if was is not None and stat.S_ISDIR(was.st_mode):
                        os.chmod(target, stat.S_IMODE(st.st_mode))
                        stack.append(rel)
                        continue
                    remove_path(target)
                    _copy_entry(src, target, stack, rel)
                    if was is not None:
                        # it replaced a deleted path: keep hiding what was below
                        os.setxattr(target, OPAQUE_XATTR, b"y", follow_symlinks=False)
                    continue
                remove_path(target)
                _copy_entry(src, target, stack, rel)


def _copy_entry(src: Path, dst: Path, stack: list[str], rel: str) -> None:
    """Copy one layer entry; a directory is created empty and `rel` queued."""
    st = os.lstat(src)
    if is_whiteout(st):
        os.mknod(dst, stat.S_IFCHR | 0o000, os.makedev(0, 0))
    elif stat.S_ISDIR(st.st_mode):
        os.mkdir(dst)
        os.chmod(dst, stat.S_IMODE(st.st_mode))
        if is_opaque(src):
            os.setxattr(dst, OPAQUE_XATTR, b"y", follow_symlinks=False)
        stack.append(rel)
    elif stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dst)
    elif stat.S_ISREG(st.st_mode):
        # not copy2: its xattr copy would carry overlay's origin file handles
        shutil.copyfile(src, dst, follow_symlinks=False)
        shutil.copymode(src, dst, follow_symlinks=False)
        os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
