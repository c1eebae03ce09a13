"""Scratch directories for runs: where a run's layer, /tmp and tree are mounted.

The sandbox runs unprivileged and bubblewrap resolves its bind sources as that
user, so a run's tree must be reachable by it by name: as root, runs live on a
tmpfs (mode 0711) at /run/corral-exec/<hash of the backend root>/<random>/, so
the sandbox user can reach its own tree without listing anyone's, and a
directory create or delete costs microseconds. Without root they are plain
directories under root/R.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

from ._base import ExecUnavailable
from ._files import remove_tree
from ._mount import MountError, mount_tmpfs, mounts_under, umount

__all__ = ["clear_exec_base", "exec_base", "scratch_dir"]


@contextlib.contextmanager
def scratch_dir(root: Path) -> Iterator[Path]:
    """A fresh directory for one run, reachable (not listable) by the sandbox
    user when the coordinator is root: under exec_base(root) (0711) with an
    unguessable name. On exit, whatever is still mounted in it (the caller
    unmounts what it can) is unmounted lazily and the directory removed."""
    path = exec_base(root) / secrets.token_hex(12)
    path.mkdir(mode=0o711)
    try:
        yield path
    finally:
        try:
            # what the backends mount here: the tree shown (m), /tmp (t), the layer
            for point in (path / "m", path / "t", path):
                try:
                    umount(point)
                except MountError as err:
                    if err.errno != errno.EINVAL:  # EINVAL: not a mount point
                        raise
        except MountError:
            for point in mounts_under(path):  # the slow way, only when needed
                with contextlib.suppress(MountError):
                    umount(point, detach=True)
        remove_tree(path)


_bases_lock = threading.Lock()
_bases: set[Path] = set()


def exec_base(root: Path) -> Path:
    """Where `root`'s runs make their scratch directories (see scratch_dir): as
    root a tmpfs (mode 0711) at /run/corral-exec/<hash of root>, mounted on first
    use (a directory create and delete there costs microseconds, not the disk's
    milliseconds); else root/R."""
    if os.geteuid() != 0:
        base = root / "R"
        base.mkdir(exist_ok=True)
        return base
    top = Path("/run/corral-exec") if Path("/run").is_dir() else Path("/tmp/corral-exec")
    base = top / hashlib.sha256(str(root).encode()).hexdigest()[:16]
    with _bases_lock:
        if base in _bases:
            return base
        with contextlib.suppress(FileExistsError):
            top.mkdir(mode=0o711)
        st = os.lstat(top)
        if not os.path.isdir(top) or os.path.islink(top) or st.st_uid != 0:
            raise ExecUnavailable(f"{top} must be a directory owned by root")
        os.chmod(top, 0o711)
        with contextlib.suppress(FileExistsError):
            base.mkdir(mode=0o711)
        if not os.path.ismount(base):
            mount_tmpfs(base, mode=0o711)
        _bases.add(base)
    return base


def clear_exec_base(root: Path) -> None:
    """Unmount and delete what runs for `root` left behind (a crashed process),
    the base and its tmpfs included (made again on next use)."""
    base = exec_base(root)
    with _bases_lock:
        _bases.discard(base)
        for _ in range(3):
            points = mounts_under(base)
            if not points:
                break
            for point in points:
                with contextlib.suppress(MountError):
                    umount(point, detach=True)
        remove_tree(base)
