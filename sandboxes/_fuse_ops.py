"""The FUSE filesystem of the `fuse` backend: a passthrough to a backing tree that asks
before every mutating call.

Every path is resolved relative to one directory fd on the backing tree (a kernel
overlay mount), so the operations never follow a path outside it and the fd pins
that mount. Reads, stats and listings pass straight through. Mutating calls build
a `MutationIntent` and ask the interceptor first; a denial is EACCES and nothing
is touched. Writes through an open file are not asked again: the open was.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import signal
import stat
import threading
from collections.abc import Iterator
from typing import Any

import mfusepy

from ._base import Interceptor, MutationIntent, MutationOp

__all__ = ["Mount", "Passthrough", "caller_thread"]

log = logging.getLogger("corral.sandboxes.fuse")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                            ctypes.c_uint]
_libc.signal.restype = ctypes.c_void_p
_libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR

_libfuse: Any = mfusepy._libfuse
_LOG_FUNC = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]


@_LOG_FUNC
def _fuse_log(level: int, fmt: bytes, args: int) -> None:
    # libfuse's messages (e.g. 3.14's "Ignoring invalid max threads value" on every
    # mount) go to this logger, at debug level, instead of the process's stderr
    buf = ctypes.create_string_buffer(512)
    _libc.vsnprintf(buf, len(buf), fmt, args)
    log.debug("libfuse: %s", buf.value.decode(errors="replace").rstrip())


if hasattr(_libfuse, "fuse_set_log_func"):  # libfuse >= 3.7
    _libfuse.fuse_set_log_func(_fuse_log)
_STAT_KEYS = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")


def _rel(path: str) -> str:
    rel = path.lstrip("/")
    return rel or "."


def _attrs(st: os.stat_result) -> dict[str, Any]:
    out: dict[str, Any] = {k: getattr(st, k) for k in _STAT_KEYS}
    out["st_atime"] = st.st_atime_ns
    out["st_mtime"] = st.st_mtime_ns
    out["st_ctime"] = st.st_ctime_ns
    out["st_rdev"] = st.st_rdev
    return out


class _Handle:
    """An open file: its fd on the backing tree and what is not yet reported closed."""

    __slots__ = ("fd", "made", "writable", "written")

    def __init__(self, fd: int, writable: bool, made: bool) -> None:
        self.fd = fd
        self.writable = writable
        self.written = False
        """Data was written (or the file truncated) through it since the last report."""
        self.made = made
        """It created or truncated the file, and that is not yet reported."""


class Passthrough(mfusepy.Operations):
    """The operations mfusepy calls, from libfuse's worker threads."""

    use_ns = True  # times as int nanoseconds

    def __init__(self, root_fd: int) -> None:
        self.root = root_fd
        self.interceptor: Interceptor | None = None
        self.ready = threading.Event()
        self._handles: dict[int, _Handle] = {}
        self._lock = threading.Lock()
        self._next = 1

    # -- lifecycle ------------------------------------------------------------------

    def init(self, path: str) -> None:
        # libfuse installs its own SIGHUP/SIGINT/SIGTERM handlers (to end the loop)
        # where the process had the default; in a library that would turn a kill
        # into an unmount, so the defaults go back.
        for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) is signal.SIG_DFL:
                _libc.signal(int(sig), ctypes.c_void_p(0))
        self.ready.set()

    def destroy(self, path: str) -> None:
        with self._lock:
            handles, self._handles = list(self._handles.values()), {}
        for h in handles:
            _close_quietly(h.fd)

    # -- asking ---------------------------------------------------------------------

    def _ask(self, op: MutationOp, path: str, target: str | None = None) -> MutationIntent | None:
        """Ask the interceptor about a call; raises EACCES when it is denied."""
        interceptor = self.interceptor
        if interceptor is None:
            return None
        intent = MutationIntent(op, path.lstrip("/"), target)
        reason = interceptor.decide(intent)
        if reason is not None:
            log.info("denied %s %s: %s", op, intent.path, reason)
            raise mfusepy.FuseOSError(errno.EACCES)
        return intent

    def _done(self, intent: MutationIntent | None) -> None:
        interceptor = self.interceptor
        if intent is not None and interceptor is not None:
            interceptor.done(intent)

    def _new_handle(self, fd: int, writable: bool, made: bool) -> int:
        with self._lock:
            n = self._next
            self._next += 1
            self._handles[n] = _Handle(fd, writable, made)
        return n

    def _handle(self, fh: int) -> _Handle:
        h = self._handles.get(fh)
        if h is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        return h

    # -- reading --------------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        if fh is not None and fh in self._handles:
            return _attrs(os.fstat(self._handles[fh].fd))
        return _attrs(os.stat(_rel(path), dir_fd=self.root, follow_symlinks=False))

    def readlink(self, path: str) -> str:
        return os.readlink(_rel(path), dir_fd=self.root)

    def readdir(self, path: str, fh: int) -> Iterator[str | tuple[str, dict[str, Any], int]]:
        yield "."
        yield ".."
        fd = os.open(_rel(path), os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.root)
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    st = entry.stat(follow_symlinks=False)
                    yield entry.name, {"st_mode": st.st_mode, "st_ino": st.st_ino}, 0
        finally:
            os.close(fd)

    def statfs(self, path: str) -> dict[str, Any]:
        sv = os.statvfs(self.root)
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
                "f_flag", "f_frsize", "f_namemax")
        return {k: getattr(sv, k) for k in keys}

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(self._handle(fh).fd, size, offset)

    # -- opening, writing, closing --------------------------------------------------

    def open(self, path: str, flags: int) -> int:
        writable = bool(flags & _WRITE_FLAGS)
        truncating = bool(flags & os.O_TRUNC)
        if writable or truncating:
            self._ask("truncate" if truncating else "open_write", path)
        fd = os.open(_rel(path), flags & ~os.O_CREAT, dir_fd=self.root)
        return self._new_handle(fd, writable or truncating, made=truncating)

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
        self._ask("create", path)
        fd = os.open(_rel(path), flags | os.O_CREAT, stat.S_IMODE(mode), dir_fd=self.root)
        return self._new_handle(fd, True, made=True)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        h = self._handle(fh)
        n = os.pwrite(h.fd, data, offset)
        h.written = True
        return n

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        h = self._handles.get(fh) if fh is not None else None
        if h is not None and h.writable:
            os.ftruncate(h.fd, length)
            h.written = True
            return 0
        intent = self._ask("truncate", path)
        fd = os.open(_rel(path), os.O_WRONLY, dir_fd=self.root)
        try:
            os.ftruncate(fd, length)
        finally:
            os.close(fd)
        if intent is not None and self.interceptor is not None:
            self.interceptor.closed(intent.path)
        return 0

    def flush(self, path: str, fh: int) -> int:
        # Every close() of a descriptor flushes, and the process waits for it: report
        # the data written since the last report. A descriptor closed before anything
        # was written (a shell's `>` dups then closes the one it opened) reports
        # nothing; a create or truncate never followed by a write is reported on release.
        h = self._handles.get(fh)
        if h is not None and h.written:
            h.written = h.made = False
            self._closed(path)
        return 0

    def release(self, path: str, fh: int) -> int:
        with self._lock:
            h = self._handles.pop(fh, None)
        if h is None:
            return 0
        os.close(h.fd)
        if h.written or h.made:  # written through a mapping, or created and left empty
            self._closed(path)
        return 0

    def _closed(self, path: str | None) -> None:
        interceptor = self.interceptor
        if interceptor is not None and path:
            interceptor.closed(path.lstrip("/"))

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        fd = self._handle(fh).fd
        if datasync:
            os.fdatasync(fd)
        else:
            os.fsync(fd)
        return 0

    # -- changing the tree ----------------------------------------------------------

    def mknod(self, path: str, mode: int, dev: int) -> int:
        intent = self._ask("create", path)
        os.mknod(_rel(path), mode, dev, dir_fd=self.root)
        self._done(intent)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        intent = self._ask("mkdir", path)
        os.mkdir(_rel(path), stat.S_IMODE(mode), dir_fd=self.root)
        self._done(intent)
        return 0

    def rmdir(self, path: str) -> int:
        intent = self._ask("rmdir", path)
        os.rmdir(_rel(path), dir_fd=self.root)
        self._done(intent)
        return 0

    def unlink(self, path: str) -> int:
        intent = self._ask("unlink", path)
        os.unlink(_rel(path), dir_fd=self.root)
        self._done(intent)
        return 0

    def symlink(self, target: str, source: str) -> int:
        # mfusepy passes (link path, link content)
        intent = self._ask("symlink", target, source)
        os.symlink(source, _rel(target), dir_fd=self.root)
        self._done(intent)
        return 0

    def link(self, target: str, source: str) -> int:
        # mfusepy passes (new path, existing path)
        intent = self._ask("link", target, source.lstrip("/"))
        os.link(_rel(source), _rel(target), src_dir_fd=self.root, dst_dir_fd=self.root,
                follow_symlinks=False)
        self._done(intent)
        return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        intent = self._ask("rename", old, new.lstrip("/"))
        if flags:
            rc = _libc.renameat2(self.root, os.fsencode(_rel(old)), self.root,
                                 os.fsencode(_rel(new)), flags)
            if rc != 0:
                raise mfusepy.FuseOSError(ctypes.get_errno())
        else:
            os.rename(_rel(old), _rel(new), src_dir_fd=self.root, dst_dir_fd=self.root)
        self._done(intent)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        intent = self._ask("chmod", path)
        os.chmod(_rel(path), stat.S_IMODE(mode), dir_fd=self.root)
        self._done(intent)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        # Git records no owner, but a chown is a change a supervisor may refuse
        # (giving a file away, or taking one): asked and recorded like chmod.
        intent = self._ask("chown", path, f"{_id(uid)}:{_id(gid)}")
        os.chown(_rel(path), uid, gid, dir_fd=self.root, follow_symlinks=False)
        self._done(intent)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        # timestamps only: not a change git records, so not asked
        if times is None:
            os.utime(_rel(path), dir_fd=self.root, follow_symlinks=False)
        else:
            os.utime(_rel(path), ns=times, dir_fd=self.root, follow_symlinks=False)
        return 0


def _id(n: int) -> int:
    # libfuse passes "unchanged" ((uid_t)-1) as an unsigned 32-bit number
    return -1 if n in (-1, 0xFFFFFFFF) else n


def caller_thread() -> int:
    """The kernel thread id of the process thread whose call a FUSE worker is
    serving now (valid only on that worker, during the call)."""
    return int(mfusepy.fuse_get_context()[2])


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class Mount(mfusepy.FUSE):
    """mfusepy's FUSE, passing what its libfuse 3 wrappers drop: rename's flags
    (RENAME_NOREPLACE, RENAME_EXCHANGE) and the handle of an ftruncate."""

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        return self.operations.rename(os.fsdecode(old), os.fsdecode(new), flags)  # type: ignore[no-any-return]

    def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
        fh = fip.contents.fh if fip else None
        decoded = None if path is None else os.fsdecode(path)
        return self.operations.truncate(decoded, length, fh)  # type: ignore[no-any-return]
