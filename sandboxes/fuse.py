"""FUSE workspaces: the overlay backend's copy-on-write tree, seen through a Python
FUSE filesystem that asks before every mutating call (live write interception).

Each workspace is an overlay workspace (the backing tree, hidden under the
backend root, where the coordinator reads and writes) plus a FUSE mount at
`path` that forwards every call to it. fork, run and discard are the overlay
workspace's; the FUSE layer adds only the asking. Layout under `root`: the
overlay backend's (B, L, U, W, M, R), F/<n> the FUSE mount points, and C
(fusectl, to abort a busy mount's connection, when the system has not mounted it).

The FUSE loop of each mount runs in its own thread (libfuse's multi-threaded
loop, foreground), so the interceptor is called in-process. Unmounting is
umount2, lazily with the connection aborted when something still uses the
mount; opening a root unmounts whatever a crashed run left under it.

Written against fusepy's API through mfusepy (its maintained fork: libfuse 3,
which Debian ships as `fuse3`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from ._base import (
    Backend,
    BaseTree,
    ExecResult,
    Interceptor,
    Limits,
    SandboxError,
    Workspace,
)
from ._files import remove_tree
from ._mount import MountError, is_busy, umount
from .overlay import OverlayBackend, OverlayWorkspace


def caller_thread() -> int:
    """The kernel thread id (`threading.get_native_id()`) of the thread whose
    call into a fuse workspace the current FUSE worker is serving: an
    interceptor can tell a call made by its own process's threads."""
    from ._fuse_ops import caller_thread

    return caller_thread()

__all__ = ["FuseBackend", "caller_thread"]

log = logging.getLogger("corral.sandboxes.fuse")

MOUNT_TIMEOUT_S = 10.0
"""How long a new FUSE mount may take to answer the kernel's first request."""

MAX_THREADS = 32
"""libfuse worker threads per mount: calls waiting for a decision each hold one."""

_CONNECTIONS = Path("/sys/fs/fuse/connections")


class FuseWorkspace(Workspace):
    """An overlay workspace served at `path` through an intercepting FUSE mount."""

    def __init__(self, backend: FuseBackend, inner: OverlayWorkspace) -> None:
        from ._fuse_ops import Passthrough

        self._backend = backend
        self._inner = inner
        self.name = inner.name
        self.path = backend.root / "F" / inner.path.name
        self._discarded = False
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._dev: int | None = None
        # an fd on the backing mount: every FUSE call resolves paths from it, and
        # it pins the mount (a fork copies the upper rather than remounting it)
        self._root_fd = os.open(inner.path, os.O_RDONLY | os.O_DIRECTORY)
        self._ops = Passthrough(self._root_fd)
        try:
            self.path.mkdir()
            self._mount()
        except BaseException:
            self._teardown()
            inner.discard()
            raise

    @property
    def backing(self) -> Path:
        """The overlay mount under the backend root: reads and writes here are not asked."""
        return self._inner.path

    def _mount(self) -> None:
        import mfusepy

        from ._fuse_ops import Mount

        options: dict[str, object] = {}
        if (mfusepy.fuse_version_major, mfusepy.fuse_version_minor) >= (3, 12):
            options["max_threads"] = MAX_THREADS  # libfuse 3.14 warns without it

        def serve() -> None:
            try:
                # no attribute or entry caching: the coordinator writes the backing
                # tree directly, and a cached size would hide its writes
                Mount(
                    self._ops, str(self.path), foreground=True, allow_other=True,
                    default_permissions=True, fsname="corral", subtype="corral",
                    attr_timeout=0, entry_timeout=0, negative_timeout=0, **options,
                )
            except BaseException as err:  # reported by the waiting thread
                self._error = err
            finally:
                self._ops.ready.set()

        self._thread = threading.Thread(target=serve, name=f"corral-fuse-{self.name}",
                                        daemon=True)
        self._thread.start()
        if not self._ops.ready.wait(MOUNT_TIMEOUT_S) or self._error is not None:
            raise SandboxError(f"cannot mount FUSE workspace {self.name!r}", cause=self._error)
        if not self._thread.is_alive():
            raise SandboxError(f"the FUSE loop of workspace {self.name!r} ended at once")
        self._dev = os.stat(self.path).st_dev

    def _check_live(self) -> None:
        if self._discarded:
            raise SandboxError(f"workspace {self.name!r} was discarded")

    def intercept(self, interceptor: Interceptor | None) -> bool:
        """Ask `interceptor` before every mutating call under `path` (None: stop asking)."""
        self._ops.interceptor = interceptor
        return True

    def fork(self, name: str) -> FuseWorkspace:
        """A child over this workspace's current state, with its own FUSE mount
        (and no interceptor until one is attached)."""
        self._check_live()
        return self._backend._wrap(self._inner.fork(name))

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
        """The overlay workspace's transactional run, on the backing tree (the throwaway
        layer sits on the hidden overlay, so nothing in it is intercepted)."""
        self._check_live()
        result = self._inner.run(argv, timeout=timeout, env=env, network=network,
                                 limits=limits, toolchain=toolchain, base=base)
        return ExecResult(
            returncode=result.returncode, stdout=result.stdout, stderr=result.stderr,
            changes=result.changes, timed_out=result.timed_out, duration_s=result.duration_s,
            meta={**result.meta, "backend": "fuse"}, truncated=result.truncated,
        )

    def discard(self) -> None:
        """Unmount the FUSE layer, then discard the overlay workspace. Idempotent."""
        if self._discarded:
            return
        self._discarded = True
        self._ops.interceptor = None
        self._teardown()
        self._inner.discard()
        self._backend._forget(self)

    def _teardown(self) -> None:
        unmount_fuse(self.path, self._dev, self._backend._connections)
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            if self._thread.is_alive():
                log.warning("the FUSE loop of workspace %r did not stop", self.name)
        with contextlib.suppress(OSError):
            os.close(self._root_fd)
        with contextlib.suppress(OSError):
            os.rmdir(self.path)

    @property
    def layer_bytes(self) -> int:
        """Bytes of files in the overlay workspace's upper layer."""
        return self._inner.layer_bytes


def unmount_fuse(point: Path, dev: int | None = None, connections: Path = _CONNECTIONS) -> None:
    """Unmount a FUSE mount; when busy, detach it and abort its connection (through the
    fusectl mount `connections`) so its loop ends and users get ENOTCONN instead of
    keeping a hidden mount alive. Quiet when not mounted."""
    try:
        umount(point)
        return
    except MountError as err:
        if not is_busy(err):
            return
    with contextlib.suppress(MountError):
        umount(point, detach=True)
    if dev is not None:
        with contextlib.suppress(OSError):
            (connections / str(os.minor(dev)) / "abort").write_text("1")


def _fusectl(root: Path) -> Path:
    """A directory of FUSE connections (fusectl): the system's when mounted, else one
    mounted under `root` (every mount Corral makes lives under its state directory)."""
    if _CONNECTIONS.is_dir() and any(_CONNECTIONS.iterdir()):
        return _CONNECTIONS
    own = root / "C"
    own.mkdir(exist_ok=True)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    if libc.mount(b"fusectl", os.fsencode(own), b"fusectl", 0, None) != 0:
        log.debug("cannot mount fusectl: %s", os.strerror(ctypes.get_errno()))
    return own


class FuseBackend(Backend):
    """Overlay workspaces behind intercepting FUSE mounts (root, /dev/fuse, libfuse 3)."""

    name: ClassVar[str] = "fuse"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None when overlay mounts and a FUSE mount work here."""
        return _probe()

    def __init__(self, root: Path, *, tmpfs: bool = False) -> None:
        """Own `root`: the overlay backend's set-up (which unmounts every leftover
        mount under it, stale FUSE mounts of a crashed run included), plus F/."""
        self._overlay = OverlayBackend(root, tmpfs=tmpfs)
        self.root = self._overlay.root
        self._lock = threading.Lock()
        self._live: dict[str, FuseWorkspace] = {}
        for d in ("F", "C"):
            remove_tree(self.root / d)
        (self.root / "F").mkdir()
        self._connections = _fusectl(self.root)

    def base(self, key: str, populate: Callable[[Path], None], name: str = "root") -> Workspace:
        """A FUSE workspace over the overlay base layer for `key` (built once)."""
        inner = self._overlay.base(key, populate, name)
        assert isinstance(inner, OverlayWorkspace)
        return self._wrap(inner)

    def close(self) -> None:
        """Unmount every FUSE mount, then close the overlay backend. Idempotent."""
        with self._lock:
            live = list(self._live.values())
        for ws in live:
            with contextlib.suppress(OSError, SandboxError):
                ws.discard()
        self._overlay.close()

    def _wrap(self, inner: OverlayWorkspace) -> FuseWorkspace:
        try:
            ws = FuseWorkspace(self, inner)
        except OSError as err:
            raise SandboxError(f"cannot mount workspace {inner.name!r}", cause=err) from err
        with self._lock:
            self._live[inner.path.name] = ws
        return ws

    def _forget(self, ws: FuseWorkspace) -> None:
        with self._lock:
            self._live.pop(ws.path.name, None)


def _probe_tree(root: Path) -> None:
    (root / "x").write_text("x")


@functools.cache
def _probe() -> str | None:
    reason = OverlayBackend.unavailable_reason()
    if reason is not None:
        return reason
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (load the fuse module, or give the container the device)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return f"/dev/fuse is not readable and writable by uid {os.getuid()}"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as err:
        return f"mfusepy or libfuse 3 is missing ({err}): install fuse3 and mfusepy"
    with tempfile.TemporaryDirectory(prefix="corral-fuse-") as tmp:
        try:
            backend = FuseBackend(Path(tmp))
        except Exception as err:
            return f"a FUSE mount failed: {err}"
        try:
            ws = backend.base("probe", _probe_tree)
            if (ws.path / "x").read_text() != "x":
                return "a FUSE mount did not show its backing tree"
        except Exception as err:
            return f"a FUSE mount failed: {err} ({getattr(err, 'cause', None)})"
        finally:
            backend.close()
    return None
