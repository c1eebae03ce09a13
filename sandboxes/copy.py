"""Plain-directory workspaces: every fork and every run is a full copy.

Works anywhere (no mount privileges); fork and run cost grows with the tree.
Layout under `root`: B/<hash> (+ .done) base layers, W/<n> workspaces,
R/<n> a run's scratch copy.
"""

from __future__ import annotations

import itertools
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from ._base import Backend, BaseTree, Change, ExecResult, Limits, SandboxError, Workspace
from ._exec import sandbox_idmap
from ._files import ensure_base, leaves, remove_tree
from ._mount import idmapped_tree, mount_tmpfs, move_tree
from ._record import Recorder
from ._safe import open_dir, open_root
from ._scratch import clear_exec_base, exec_base, scratch_dir
from ._warm import SandboxPool

__all__ = ["CopyBackend"]


def _copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True)


class CopyWorkspace(Workspace):
    """A workspace that is an ordinary directory."""

    def __init__(self, backend: CopyBackend, name: str, source: Path) -> None:
        self._backend = backend
        self.name = name
        self._id = backend._next_id()
        self.path = backend.root / "W" / self._id
        self._discarded = False
        self._sandboxes: SandboxPool | None = None
        try:
            _copy_tree(source, self.path)
        except BaseException:
            remove_tree(self.path)
            raise

    def _check_live(self) -> None:
        if self._discarded:
            raise SandboxError(f"workspace {self.name!r} was discarded")

    def fork(self, name: str) -> CopyWorkspace:
        """A child holding a copy of this workspace's files now."""
        self._check_live()
        return self._backend._workspace(name, self.path)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        limits: Limits | None = None,
        toolchain: Sequence[Path] = (),
        base: BaseTree | None = None,
    ) -> ExecResult:
        """Run `argv` in a scratch copy of this workspace; returns its changes
        (see Workspace.run). Raises ExecUnavailable without bubblewrap."""
        self._check_live()
        limits = limits or Limits()
        backend = self._backend
        with scratch_dir(backend.root) as scratch:
            copy, shown, tmp = _scratch_copy(self.path, scratch, limits)
            # ctime cannot be set from user space: an unchanged (inode, ctime)
            # proves a file untouched without reading it
            before = {rel: (st.st_ino, st.st_ctime_ns) for rel, st in leaves(copy)}
            done = self._pool().run(
                shown, argv, timeout=timeout, env=env, network=network, hide=[backend.root],
                limits=limits, toolchain=toolchain, tmp=tmp,
            )
            changes = _diff(self.path, copy, before, base, limits)
        return ExecResult(
            returncode=done.returncode,
            stdout=done.stdout,
            stderr=done.stderr,
            changes=tuple(changes),
            timed_out=done.timed_out,
            duration_s=done.duration_s,
            meta={"backend": "copy"},
            truncated=done.truncated,
        )

    def _pool(self) -> SandboxPool:
        """This workspace's warm sandboxes, made at its first command."""
        if self._sandboxes is None:
            self._sandboxes = SandboxPool(exec_base(self._backend.root))
        return self._sandboxes

    def discard(self) -> None:
        """Delete this workspace's directory. Idempotent."""
        if self._discarded:
            return
        self._discarded = True
        if self._sandboxes is not None:
            self._sandboxes.close()
        remove_tree(self.path)
        self._backend._forget_workspace(self)

    @property
    def layer_bytes(self) -> int:
        """Bytes of every file in the workspace (a copy owns all of them)."""
        return sum(st.st_size for _, st in leaves(self.path))


def _scratch_copy(source: Path, scratch: Path, limits: Limits) -> tuple[Path, Path, Path | None]:
    """Copy `source` for one run into `scratch`. Returns (the copy, the tree to
    show the command, its /tmp or None for bubblewrap's own).

    As root the copy sits on a tmpfs of limits.layer bytes (the command's whole
    tree counts against it) and is shown through an idmapped mount as the
    sandbox user's; else it is a plain directory and /tmp is bubblewrap's.
    """
    copy = scratch / "c"
    idmap = sandbox_idmap()
    if idmap is None:
        _copy_tree(source, copy)
        return copy, copy, None
    mount_tmpfs(scratch, mode=0o711, size=limits.layer)
    shown, tmp = scratch / "m", scratch / "t"
    shown.mkdir()
    tmp.mkdir()
    mount_tmpfs(tmp, mode=0o1777, size=limits.tmp)
    try:
        _copy_tree(source, copy)
    except OSError as err:
        raise SandboxError(f"the workspace does not fit in a run's layer of "
                           f"{limits.layer} bytes (Limits.layer)", cause=err) from err
    fd = idmapped_tree(copy, idmap)
    try:
        move_tree(fd, shown)
    finally:
        os.close(fd)
    return copy, shown, tmp


def _diff(old: Path, new: Path, before: dict[str, tuple[int, int]],
          base: BaseTree | None, limits: Limits) -> list[Change]:
    """Changes turning `old` into `new`; `before` holds (inode, ctime) of `new`'s
    files when they still equalled `old`'s. Neither tree is followed; the
    changed files are counted from lstat before any is read (see upper_changes).
    Raises ChangesTooLarge, TreeTooDeep."""
    changed: list[tuple[str, os.stat_result]] = []
    seen = set()
    with Recorder(old, base, limits) as rec:
        for rel, st in leaves(new):
            seen.add(rel)
            if before.get(rel) != (st.st_ino, st.st_ctime_ns):
                rec.budget.count(st)
                changed.append((rel, st))
        gone = before.keys() - seen
        rec.budget.count_deletions(len(gone))
        out = {rel: Change(rel, None) for rel in gone}
        new_fd = open_root(new)
        try:
            # leaves() gives a directory's files together: one pair of fds per directory
            for parent, group in itertools.groupby(changed, lambda c: c[0].rpartition("/")[0]):
                _record_group(rec, new_fd, parent, group, out)
        finally:
            os.close(new_fd)
    return [out[k] for k in sorted(out)]


def _record_group(rec: Recorder, new_fd: int, parent: str,
                  group: Iterable[tuple[str, os.stat_result]], out: dict[str, Change]) -> None:
    new_dir, ws_dir = open_dir(new_fd, parent), rec.workspace_dir(parent)
    try:
        if new_dir is None:
            return  # swapped away since the scan: nothing of it is read
        for rel, st in group:
            name = rel.rpartition("/")[2]
            entry = rec.new_entry(new_dir, name, st)
            if entry is None:
                continue
            below = rec.workspace_stat(ws_dir, name)
            if not rec.unchanged(rel, entry, ws_dir, below):
                out[rel] = Change(rel, entry[1], entry[0])
    finally:
        for fd in (new_dir, ws_dir):
            if fd is not None:
                os.close(fd)


class CopyBackend(Backend):
    """Workspaces as plain directory copies: slow fork, no privileges needed."""

    name: ClassVar[str] = "copy"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Always None: copying files works everywhere."""
        return None

    def __init__(self, root: Path) -> None:
        """Own `root`, deleting workspaces and scratch copies left by an earlier run."""
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._live: dict[str, CopyWorkspace] = {}
        self._closed = False
        clear_exec_base(self.root)
        for d in ("W", "R"):
            remove_tree(self.root / d)
            (self.root / d).mkdir()
        (self.root / "B").mkdir(exist_ok=True)

    def base(self, key: str, populate: Callable[[Path], None], name: str = "root") -> Workspace:
        """A workspace holding a copy of the base layer for `key` (built once)."""
        with self._lock:
            layer = ensure_base(self.root / "B", key, populate)
        return self._workspace(name, layer)

    def close(self) -> None:
        """Discard every workspace and clear the runs' scratch base. Idempotent."""
        for ws in list(self._live.values()):
            ws.discard()
        clear_exec_base(self.root)
        self._closed = True

    def _next_id(self) -> str:
        with self._lock:
            return format(next(self._ids), "x")

    def _workspace(self, name: str, source: Path) -> CopyWorkspace:
        if self._closed:
            raise SandboxError("backend is closed")
        try:
            ws = CopyWorkspace(self, name, source)
        except OSError as err:
            raise SandboxError(f"cannot copy workspace {name!r}", cause=err) from err
        with self._lock:
            self._live[ws._id] = ws
        return ws

    def _forget_workspace(self, ws: CopyWorkspace) -> None:
        with self._lock:
            self._live.pop(ws._id, None)

    def __repr__(self) -> str:
        return f"CopyBackend({os.fspath(self.root)!r})"
