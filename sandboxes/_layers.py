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

from ._base import Change
from ._files import check_depth, leaves, read_entry, remove_path

__all__ = ["copy_layer", "is_opaque", "is_whiteout", "squash_layers", "upper_changes"]

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


def upper_changes(upper: Path, lower: Path) -> list[Change]:
    """The changes an upper layer makes to the merged tree `lower` below it.

    Files are compared with `lower`, so a copy-up that kept the content and
    mode (e.g. `touch`) is no change. Returns the changes sorted by path.
    Raises TreeTooDeep on a directory deeper than MAX_SCAN_DEPTH.
    """
    out: dict[str, Change] = {}

    def delete_below(rel: str) -> None:
        for sub, _ in leaves(lower, rel):
            out[sub] = Change(sub, None)

    stack = [""]
    while stack:
        current = stack.pop()
        for entry in os.scandir(upper / current):
            rel = f"{current}/{entry.name}" if current else entry.name
            st = entry.stat(follow_symlinks=False)
            try:
                below: os.stat_result | None = os.lstat(lower / rel)
            except (FileNotFoundError, NotADirectoryError):
                below = None
            below_is_dir = below is not None and stat.S_ISDIR(below.st_mode)
            if is_whiteout(st):
                delete_below(rel)
            elif stat.S_ISDIR(st.st_mode):
                if below is not None and (not below_is_dir or is_opaque(Path(entry.path))):
                    # replaced file or replaced directory: the old content goes;
                    # files written below are added when the walk gets there
                    delete_below(rel)
                check_depth(rel)  # TreeTooDeep rather than paths past PATH_MAX
                stack.append(rel)
            else:
                new = read_entry(Path(entry.path), st)
                if new is None:
                    continue  # fifo, socket, device: git cannot hold them
                if below_is_dir:
                    delete_below(rel)
                old = read_entry(lower / rel, below) if below is not None else None
                if old == new:
                    out.pop(rel, None)
                else:
                    out[rel] = Change(rel, new[1], new[0])
    return [out[k] for k in sorted(out)]


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
