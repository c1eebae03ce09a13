"""Kernel overlayfs workspaces: a frozen layer per fork point, a fresh upper per scope.

Layout under `root` (names short: mount data is limited to one page)::

    B/<hash>, B/<hash>.done   base layers, kept across runs (marker = complete)
    L/<n>                     frozen layers, shared, reference-counted
    U/<n>  W/<n>.<gen>  M/<n> a workspace's upper, workdir (fresh per mount), mount point

A run's throwaway layer is not under `root` but in a scratch directory the
unprivileged sandbox can reach (see `_scratch`): a sized tmpfs holding
{u,w,m,t}, with the overlay of idmapped copies of U/<n> and its lowers at m.

Every mount is `volatile` (umount without syncfs: ~0.1 ms instead of ~140 ms on
ext4); after a crash workspaces are rebuilt from the trace, never from disk.
Past one page of options the mount goes through fsconfig's `lowerdir+`
(kernel >= 6.8); past SQUASH_AT frozen layers a fork squashes them into one.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from ._base import Backend, BaseTree, ExecResult, Limits, SandboxError, Workspace
from ._exec import SANDBOX_UID, sandbox_idmap
from ._files import ensure_base, leaves, remove_tree
from ._layers import copy_layer, squash_layers, upper_changes
from ._mount import (
    MountError,
    idmapped_tree,
    is_busy,
    mount_overlay,
    mount_tmpfs,
    mounts_under,
    umount,
)
from ._scratch import clear_exec_base, exec_base, scratch_dir
from ._warm import SandboxPool

__all__ = ["OverlayBackend"]

SQUASH_AT = 32
"""Frozen layers a workspace may stack before a fork squashes them into one
(overlayfs allows 500 lowers, and lookups slow down as the stack deepens).
Each fork of a scope with unsaved changes freezes them into a layer: with 128
here, a 64-scope soak (`corral bench soak`) held stacks of 37 layers after 3
minutes, still growing. A squash copies only what the scope changed since its
base."""

_STATE_DIRS = ("L", "U", "W", "M", "R")


class OverlayWorkspace(Workspace):
    """A workspace mounted as overlay(lowers, upper) at a fixed path."""

    def __init__(self, backend: OverlayBackend, name: str, lowers: tuple[Path, ...]) -> None:
        self._backend = backend
        self.name = name
        self._id = backend._next_id()
        self._gen = itertools.count()
        self._lowers = lowers
        self.upper = backend._state / "U" / self._id
        self.path = backend._state / "M" / self._id
        self._work: Path | None = None
        self._discarded = False
        self._sandboxes: SandboxPool | None = None
        self.upper.mkdir()
        self.path.mkdir()
        try:
            self._mount()
        except BaseException:
            self._drop_work()
            remove_tree(self.upper)
            self.path.rmdir()
            raise

    @property
    def lowers(self) -> tuple[Path, ...]:
        """The read-only layers under this workspace, topmost first."""
        return self._lowers

    def _mount(self) -> None:
        self._work = self._backend._state / "W" / f"{self._id}.{next(self._gen)}"
        self._work.mkdir()
        mount_overlay(self.path, self._lowers, self.upper, self._work)

    def _drop_work(self) -> None:
        if self._work is not None:
            remove_tree(self._work)
            self._work = None

    def _check_live(self) -> None:
        if self._discarded:
            raise SandboxError(f"workspace {self.name!r} was discarded")

    def fork(self, name: str) -> OverlayWorkspace:
        """A child over this workspace's current state (see _freeze)."""
        lowers, owned = self._freeze()
        return self._backend._workspace(name, lowers, owned=owned)

    def _freeze(self) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
        """This workspace's current state as read-only layers (topmost first), for
        a child or a run. Freezes the upper into a shared layer when nothing uses
        the mount; when a process does (umount says EBUSY) the upper is copied
        into a new layer and this mount stays. Returns (layers, owned): `owned`
        were made for the caller and hold one reference it must take over."""
        self._check_live()
        backend = self._backend
        if not any(os.scandir(self.upper)):
            return self._lowers, ()
        try:
            umount(self.path)
        except MountError as err:
            if not is_busy(err):
                raise SandboxError(f"cannot freeze workspace {self.name!r}", cause=err) from err
            layer = backend._new_layer(lambda dst: copy_layer(self.upper, dst))
            return (layer, *self._lowers), (layer,)
        self._drop_work()
        layer = backend._new_layer(lambda dst: os.rename(self.upper, dst))
        created = [layer]
        old_lowers = self._lowers
        new_lowers = (layer, *old_lowers)
        frozen = [p for p in new_lowers if p.parent.name == "L"]
        if len(frozen) >= SQUASH_AT:
            squashed = backend._new_layer(lambda dst: squash_layers(frozen, dst))
            created.append(squashed)
            new_lowers = (squashed, *(p for p in new_lowers if p.parent.name != "L"))
        self._lowers = new_lowers
        self.upper.mkdir()
        try:
            self._mount()
        except OSError as err:
            # put the old state back so this workspace stays usable
            self._lowers = old_lowers
            self._drop_work()
            os.rmdir(self.upper)
            os.rename(layer, self.upper)
            backend._forget_layer(layer)
            backend._release(created[1:])
            self._mount()
            raise SandboxError(f"cannot remount workspace {self.name!r}", cause=err) from err
        backend._hold(self._lowers)
        backend._release(old_lowers)
        backend._release(created)  # the parent's hold replaces the creation holds
        return self._lowers, ()

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
        """Run `argv` in a throwaway overlay over this workspace's layers; returns its
        changes (see Workspace.run). Raises ExecUnavailable without bubblewrap."""
        limits = limits or Limits()
        backend = self._backend
        # Frozen layers only: an upper mounted read-write must never be another
        # mount's lower. They stay held while the command reads them.
        lowers, owned = self._freeze()
        backend._hold(lowers)
        backend._release(owned)
        try:
            with scratch_dir(backend.root) as scratch:
                upper, merged, tmp = _mount_throwaway(scratch, lowers, limits)
                try:
                    done = self._pool().run(
                        merged, argv, timeout=timeout, env=env, network=network,
                        hide=[backend.root], limits=limits, toolchain=toolchain, tmp=tmp,
                    )
                    changes = upper_changes(upper, self.path, base, limits)
                finally:
                    _umount_quietly(merged)
        finally:
            backend._release(lowers)
        return ExecResult(
            returncode=done.returncode,
            stdout=done.stdout,
            stderr=done.stderr,
            changes=tuple(changes),
            timed_out=done.timed_out,
            duration_s=done.duration_s,
            meta={"backend": "overlay"},
            truncated=done.truncated,
        )

    def _pool(self) -> SandboxPool:
        """This workspace's warm sandboxes, made at its first command."""
        if self._sandboxes is None:
            self._sandboxes = SandboxPool(exec_base(self._backend.root))
        return self._sandboxes

    def discard(self) -> None:
        """Unmount and delete this workspace's upper; release its layers. Idempotent."""
        if self._discarded:
            return
        self._discarded = True
        if self._sandboxes is not None:
            self._sandboxes.close()
        _umount_quietly(self.path)
        self._drop_work()
        remove_tree(self.upper)
        with contextlib.suppress(OSError):
            os.rmdir(self.path)
        self._backend._release(self._lowers)
        self._backend._forget_workspace(self)

    @property
    def layer_bytes(self) -> int:
        """Bytes of files in this workspace's upper layer."""
        return sum(st.st_size for _, st in leaves(self.upper))


def _mount_throwaway(
    scratch: Path, layers: tuple[Path, ...], limits: Limits
) -> tuple[Path, Path, Path]:
    """Mount a run's layer (a tmpfs of limits.layer bytes at `scratch`) and /tmp
    (one of limits.tmp bytes), and the overlay of `layers` under that layer.
    Returns (upper, merged, tmp).

    As root, the command runs as SANDBOX_UID: the layers are seen through
    idmapped mounts that show their root-owned files as that user's, and the
    upper belongs to it, so the command may change every file and the layers
    on disk stay root's. (overlayfs itself cannot be idmapped; its layers can.)
    """
    mount_tmpfs(scratch, mode=0o711, size=limits.layer)
    upper, work, merged, tmp = (scratch / d for d in ("u", "w", "m", "t"))
    for d in (upper, work, merged, tmp):
        d.mkdir()
    mount_tmpfs(tmp, mode=0o1777, size=limits.tmp)
    idmap = sandbox_idmap()
    if idmap is None:
        mount_overlay(merged, layers, upper, work)
        return upper, merged, tmp
    os.chown(upper, SANDBOX_UID, SANDBOX_UID)
    os.chmod(upper, stat.S_IMODE(os.stat(layers[0]).st_mode))
    fds: list[int] = []
    try:
        for layer in layers:
            fds.append(idmapped_tree(layer, idmap))
        mount_overlay(merged, [Path(f"/proc/self/fd/{fd}") for fd in fds], upper, work)
    finally:
        for fd in fds:
            os.close(fd)
    return upper, merged, tmp


def _umount_quietly(target: Path) -> None:
    """Unmount `target` if mounted; lazily when busy (a stray process keeps its view)."""
    try:
        umount(target)
    except MountError as err:
        if is_busy(err):
            umount(target, detach=True)


class OverlayBackend(Backend):
    """Workspaces as kernel overlay mounts (root, or CAP_SYS_ADMIN)."""

    name: ClassVar[str] = "overlay"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None when a real overlay mount (and a nested one) works here."""
        return _probe()

    def __init__(self, root: Path, *, tmpfs: bool = False) -> None:
        """Own `root`: unmount leftovers of a crashed process and clear old state.

        With `tmpfs`, every layer but the base ones lives on a tmpfs mounted at
        root/t: directory create/delete there is ~5 us instead of ~400 us on this
        ext4, so fork/discard get faster, but dirty files then take memory.
        """
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve()
        if any(c in str(self.root) for c in ",:\\"):
            raise SandboxError(f"overlay state root must not contain , : or \\: {self.root}")
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._refs: dict[Path, int] = {}
        self._live: dict[str, OverlayWorkspace] = {}
        self._base_lock = threading.Lock()
        self._closed = False
        _unmount_all(self.root)
        clear_exec_base(self.root)
        self._state = self.root / "t" if tmpfs else self.root
        for d in ("t", *_STATE_DIRS):
            remove_tree(self.root / d)
        if tmpfs:
            self._state.mkdir()
            mount_tmpfs(self._state)
        for d in _STATE_DIRS:
            (self._state / d).mkdir()
        (self.root / "B").mkdir(exist_ok=True)

    def base(self, key: str, populate: Callable[[Path], None], name: str = "root") -> Workspace:
        """A workspace over the base layer for `key` (built once, kept across runs)."""
        with self._base_lock:
            layer = ensure_base(self.root / "B", key, populate)
        return self._workspace(name, (layer,))

    def close(self) -> None:
        """Discard every workspace and unmount everything under root. Idempotent."""
        for ws in list(self._live.values()):
            with contextlib.suppress(OSError):
                ws.discard()
        _unmount_all(self.root)
        clear_exec_base(self.root)
        self._closed = True

    # ---- internals used by OverlayWorkspace

    def _next_id(self) -> str:
        with self._lock:
            return format(next(self._ids), "x")

    def _workspace(
        self, name: str, lowers: tuple[Path, ...], owned: tuple[Path, ...] = ()
    ) -> OverlayWorkspace:
        """A new mounted workspace over `lowers`; `owned` layers were created for it
        and already hold one reference, which the workspace takes over."""
        if self._closed:
            raise SandboxError("backend is closed")
        self._hold(lowers)
        self._release(owned)
        try:
            ws = OverlayWorkspace(self, name, lowers)
        except OSError as err:
            self._release(lowers)
            raise SandboxError(f"cannot mount workspace {name!r}", cause=err) from err
        with self._lock:
            self._live[ws._id] = ws
        return ws

    def _forget_workspace(self, ws: OverlayWorkspace) -> None:
        with self._lock:
            self._live.pop(ws._id, None)

    def _new_layer(self, fill: Callable[[Path], None]) -> Path:
        """A new frozen layer filled by `fill(dir)`, holding one reference."""
        layer = self._state / "L" / self._next_id()
        try:
            fill(layer)
        except BaseException:
            remove_tree(layer)
            raise
        with self._lock:
            self._refs[layer] = 1
        return layer

    def _forget_layer(self, layer: Path) -> None:
        with self._lock:
            self._refs.pop(layer, None)

    def _hold(self, layers: Sequence[Path]) -> None:
        with self._lock:
            for layer in layers:
                if layer in self._refs:
                    self._refs[layer] += 1
                elif layer.parent.name == "L":
                    self._refs[layer] = 1

    def _release(self, layers: Sequence[Path]) -> None:
        dead = []
        with self._lock:
            for layer in layers:
                if layer in self._refs:
                    self._refs[layer] -= 1
                    if self._refs[layer] <= 0:
                        del self._refs[layer]
                        dead.append(layer)
        for layer in dead:
            remove_tree(layer)


def _unmount_all(root: Path) -> None:
    """Unmount every mount strictly below `root`, deepest first (lazily: these are
    leftovers nobody should be using)."""
    for _ in range(3):
        points = [p for p in mounts_under(root) if p != root]
        if not points:
            return
        for point in points:
            with contextlib.suppress(MountError):
                umount(point, detach=True)


@functools.cache
def _probe() -> str | None:
    with tempfile.TemporaryDirectory(prefix="corral-ovl-") as tmp:
        t = Path(tmp)
        dirs = [t / d for d in ("l", "u", "w", "m", "u2", "w2", "m2")]
        for d in dirs:
            d.mkdir()
        lower, upper, work, merged, upper2, work2, merged2 = dirs
        try:
            mount_overlay(merged, (lower,), upper, work)
        except MountError as err:
            if err.errno == 1 or err.errno == 13:
                return f"overlay mounts need root or CAP_SYS_ADMIN (running as uid {os.getuid()})"
            return f"an overlay mount failed: {err.strerror}"
        try:
            mount_overlay(merged2, (merged,), upper2, work2)
        except MountError as err:
            return f"a nested overlay mount (used by run) failed: {err.strerror}"
        else:
            umount(merged2)
        finally:
            umount(merged)
    return None
