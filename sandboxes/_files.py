"""Files as git sees them: (mode, data) per path, and writing changes into a tree."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ._base import (
    MAX_SCAN_DEPTH,
    MODE_EXEC,
    MODE_FILE,
    MODE_LINK,
    Change,
    ChangesTooLarge,
    TreeTooDeep,
)
from ._safe import lstat_at, lstat_beneath, open_beneath, open_dir, open_root, read_regular, scan

__all__ = [
    "apply_changes",
    "ensure_base",
    "git_mode",
    "leaves",
    "read_entry",
    "read_entry_beneath",
    "remove_path",
    "remove_tree",
    "snapshot_files",
]

Entry = tuple[int, bytes]
"""(git mode, data): file content, or the target for a symlink."""


def git_mode(st: os.stat_result) -> int | None:
    """The git mode of a lstat result, or None for what git does not track
    (directories, devices, fifos, sockets)."""
    if stat.S_ISLNK(st.st_mode):
        return MODE_LINK
    if stat.S_ISREG(st.st_mode):
        # git keeps one bit: owner-executable
        return MODE_EXEC if st.st_mode & stat.S_IXUSR else MODE_FILE
    return None


def read_entry(path: Path, st: os.stat_result | None = None) -> Entry | None:
    """(mode, data) of the file or symlink at `path`; None when absent or untracked."""
    try:
        st = st or os.lstat(path)
        mode = git_mode(st)
        if mode == MODE_LINK:
            return mode, os.fsencode(os.readlink(path))
        if mode is not None:
            return mode, path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        pass
    return None


def read_entry_beneath(root: Path, rel: str, limit: int) -> Entry | None:
    """(mode, data) of the file or symlink `rel` below `root`, reached without
    following a symlink at any component (a symlinked parent: None), never
    opening what is not a regular file. Raises ChangesTooLarge for a file of
    more than `limit` bytes (from lstat, before reading; sparse files count
    their apparent size)."""
    try:
        root_fd = open_root(root)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        parent, _, name = rel.rpartition("/")
        dir_fd = open_dir(root_fd, parent) if parent else os.dup(root_fd)
        if dir_fd is None:
            return None
        try:
            st = lstat_at(dir_fd, name)
            mode = git_mode(st) if st is not None else None
            if st is None or mode is None:
                return None
            if mode == MODE_LINK:
                return mode, os.fsencode(os.readlink(name, dir_fd=dir_fd))
            if st.st_size > limit:
                raise ChangesTooLarge("changed_bytes", limit, st.st_size,
                                      f"{rel!r} to {st.st_size} bytes")
            data = read_regular(dir_fd, name, st, limit)
            return None if data is None else (mode, data)
        finally:
            os.close(dir_fd)
    finally:
        os.close(root_fd)


def leaves(root: Path, rel: str = "") -> Iterator[tuple[str, os.stat_result]]:
    """Every file and symlink at or below `root/rel`, as (POSIX path relative to
    `root`, lstat result), found without following a symlink at any component
    (`_safe.scan`): a symlinked directory is one leaf, never a way out. Nothing
    when absent. Raises TreeTooDeep on a directory deeper than MAX_SCAN_DEPTH."""
    try:
        root_fd = open_root(root)
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        st = lstat_beneath(root_fd, rel) if rel else os.fstat(root_fd)
        if st is None:
            return
        if not stat.S_ISDIR(st.st_mode):
            if rel and git_mode(st) is not None:
                yield rel, st
            return
        fd = open_beneath(root_fd, rel, os.O_RDONLY | os.O_DIRECTORY) if rel else root_fd
        try:
            for d in scan(fd):
                prefix = f"{rel}/{d.rel}" if rel and d.rel else rel or d.rel
                for name, est in d.entries:
                    if not stat.S_ISDIR(est.st_mode) and git_mode(est) is not None:
                        yield (f"{prefix}/{name}" if prefix else name), est
        finally:
            if fd != root_fd:
                os.close(fd)
    finally:
        os.close(root_fd)


def check_depth(rel: str) -> None:
    """Raise TreeTooDeep if the directory `rel` is deeper than MAX_SCAN_DEPTH."""
    if rel.count("/") >= MAX_SCAN_DEPTH:
        raise TreeTooDeep(rel)


def remove_tree(path: Path) -> None:
    """Delete the directory tree at `path`, however deep; nothing when absent.

    shutil.rmtree recurses once per level (RecursionError at ~1,000 levels on
    Python 3.11, which `ignore_errors` does not catch) and a command can make a
    tree of any depth. Past that, or on any other error, `rm -rf` (fts: no
    depth limit, no PATH_MAX) finishes the job, staying on `path`'s filesystem.
    Errors are ignored as with rmtree(ignore_errors=True): what cannot be
    removed stays."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except (OSError, RecursionError):
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)


def snapshot_files(root: Path) -> dict[str, Entry]:
    """Every tracked file below `root`: POSIX relative path -> (git mode, data),
    read without following a symlink at any component (no size bound: for
    trees the caller made, not a command's layer)."""
    out = {}
    root_fd = open_root(root)
    try:
        for d in scan(root_fd):
            for name, st in d.entries:
                rel = f"{d.rel}/{name}" if d.rel else name
                mode = git_mode(st)
                if mode == MODE_LINK:
                    out[rel] = mode, os.fsencode(os.readlink(name, dir_fd=d.fd))
                elif mode is not None:
                    data = read_regular(d.fd, name, st, 1 << 62)
                    if data is not None:
                        out[rel] = mode, data
    finally:
        os.close(root_fd)
    return dict(sorted(out.items()))


def remove_path(path: Path) -> None:
    """Remove whatever is at `path` (file, symlink, whiteout or whole directory)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        remove_tree(path)
    else:
        os.unlink(path)


def _make_parents(root: Path, rel: str) -> None:
    parent = root
    for part in rel.split("/")[:-1]:
        parent = parent / part
        try:
            st = os.lstat(parent)
        except FileNotFoundError:
            os.mkdir(parent)
            continue
        if not stat.S_ISDIR(st.st_mode):
            # a file or symlink where a directory is needed: the change replaces it
            os.unlink(parent)
            os.mkdir(parent)


def _parents_are_dirs(root: Path, rel: str) -> bool:
    # never follow a symlinked parent out of `root`
    parent = root
    for part in rel.split("/")[:-1]:
        parent = parent / part
        try:
            if not stat.S_ISDIR(os.lstat(parent).st_mode):
                return False
        except FileNotFoundError:
            return False
    return True


def _prune(root: Path, rel: str) -> None:
    parts = rel.split("/")[:-1]
    while parts:
        try:
            os.rmdir(root.joinpath(*parts))
        except OSError:
            return
        parts.pop()


def _check(rel: str) -> str:
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"change path must be relative and normalized: {rel!r}")
    return rel


def apply_changes(root: Path, changes: Iterable[Change]) -> None:
    """Make `root` hold each change: write files (replacing whatever is at the
    path, directory or symlink included), set the exec bit, create symlinks,
    delete paths and prune directories left empty.

    Raises ValueError for a path that is absolute or leaves `root`.
    """
    changes = list(changes)
    # Many files (a command's generated tree): new ones are made by fd, in two
    # calls each. A few (a write, a rewind): by path, without opening anything.
    fast = len(changes) >= _BY_FD_AT
    parents = _Parents(root)
    try:
        for change in changes:
            rel = _check(change.path)
            target = root / rel
            if change.data is None:
                parents.clear()  # the deletion may take directories with it
                if _parents_are_dirs(root, rel):
                    remove_path(target)
                _prune(root, rel)
                continue
            if fast and change.mode != MODE_LINK and _create(parents, rel, change):
                continue  # a new file, two system calls
            # replaces only what is not a directory: the directories held stay valid
            _make_parents(root, rel)
            if change.mode != MODE_LINK and _overwrite(target, change):
                continue
            if _is_dir(target):
                parents.clear()  # it goes, and what was opened below it with it
            remove_path(target)
            if change.mode == MODE_LINK:
                os.symlink(os.fsdecode(change.data), target)
                continue
            # written before chmod so a umask cannot leave the exec bit out
            target.write_bytes(change.data)
            os.chmod(target, 0o755 if change.mode == MODE_EXEC else 0o644)
    finally:
        parents.clear()


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


_BY_FD_AT = 64
"""Changes in one apply_changes from which new files are created by fd."""


class _Parents:
    """The directories one apply_changes writes into, each made (as
    _make_parents does) and opened once, reached without following symlinks."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._root_fd: int | None = None
        self._fds: dict[str, int] = {}

    def fd(self, parent: str) -> int | None:
        fd = self._fds.get(parent)
        if fd is None:
            if parent:
                _make_parents(self._root, parent + "/x")
            if self._root_fd is None:
                self._root_fd = open_root(self._root)
            fd = open_dir(self._root_fd, parent) if parent else os.dup(self._root_fd)
            if fd is None:
                return None
            self._fds[parent] = fd
        return fd

    def clear(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        if self._root_fd is not None:
            os.close(self._root_fd)
            self._root_fd = None


def _create(parents: _Parents, rel: str, change: Change) -> bool:
    """Write `change` as a new file (O_EXCL); False when something is at the path."""
    parent, _, name = rel.rpartition("/")
    dir_fd = parents.fd(parent)
    if dir_fd is None:
        return False
    want = 0o755 if change.mode == MODE_EXEC else 0o644
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     want, dir_fd=dir_fd)
    except FileExistsError:
        return False
    try:
        data = change.data or b""
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if want & _UMASK:
            os.fchmod(fd, want)  # a umask took bits the mode needs
    finally:
        os.close(fd)
    return True


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o777  # unknown: always fchmod


_UMASK = _umask()


def _overwrite(target: Path, change: Change) -> bool:
    """Write a regular, unshared file in place; False when it is not one.

    On an overlay, unlinking a lower file and creating it again costs a
    whiteout and a new inode; an O_TRUNC open copies up without the old data.
    A hard-linked file is never written in place: its other names would change.
    """
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        return False
    fd = os.open(target, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
    with open(fd, "wb") as f:
        f.write(change.data or b"")
    want = 0o755 if change.mode == MODE_EXEC else 0o644
    if stat.S_IMODE(st.st_mode) != want:
        os.chmod(target, want)
    return True


def ensure_base(bases: Path, key: str, populate: Callable[[Path], None]) -> Path:
    """The base layer directory for `key` under `bases`, built by `populate` if it
    is not complete yet. A marker file written after `populate` returns makes a
    half-built layer (crash, exception) be rebuilt next time.
    """
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    layer, marker = bases / digest, bases / f"{digest}.done"
    if marker.exists():
        return layer
    if layer.exists():
        remove_tree(layer)
    layer.mkdir(parents=True)
    populate(layer)
    marker.write_text(key)
    return layer


def share_file(src: Path, dst: Path) -> None:
    """`src` at `dst`, readable by sandboxed commands: a hard link (a copy across file
    systems), mode 0644."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)
