"""Direct overlayfs mounts through libc (ctypes): no `mount` process per call.

Two ways to mount, picked per call:

- mount(2) with one option string, when it fits in a page (the kernel copies
  at most one page of mount data);
- the new mount API (fsopen/fsconfig/fsmount/move_mount) with one
  `lowerdir+` per layer (kernel >= 6.8), when the option string would not fit.
  This lifts the page limit up to overlayfs' own 500-layer limit.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "MountError",
    "bind_mount",
    "idmapped_tree",
    "is_busy",
    "make_shared",
    "mount_overlay",
    "mount_tmpfs",
    "mounts_under",
    "move_tree",
    "umount",
]

MNT_DETACH = 2
_PAGE = 4096

# x86_64 and aarch64 share these numbers (the new mount API is in the common table)
_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_FSOPEN = 430
_SYS_FSCONFIG = 431
_SYS_FSMOUNT = 432
_SYS_MOUNT_SETATTR = 442
_OPEN_TREE_CLONE = 0x1
_OPEN_TREE_CLOEXEC = 0o2000000
_AT_EMPTY_PATH = 0x1000
_MOUNT_ATTR_IDMAP = 0x00100000
_FSOPEN_CLOEXEC = 0x1
_FSMOUNT_CLOEXEC = 0x1
_FSCONFIG_SET_FLAG = 0
_FSCONFIG_SET_STRING = 1
_FSCONFIG_CMD_CREATE = 6
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_AT_FDCWD = -100

# Layers are plain files: no redirects or metacopy, so an upper holds only whole
# files, whiteouts and opaque dirs (what `run` converts into changes and what a
# frozen layer copy must preserve). `volatile` skips the syncfs on umount
# (~140 ms on ext4); workspaces are rebuilt from the trace after a crash.
_FIXED_OPTIONS = (("redirect_dir", "off"), ("metacopy", "off"), ("index", "off"))

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.syscall.restype = ctypes.c_long


class MountError(OSError):
    """A mount call failed; `.errno` is set, the message includes the kernel's log."""


def _fail(what: str, target: str | os.PathLike[str], log: str = "") -> MountError:
    err = ctypes.get_errno()
    detail = f" ({log})" if log else ""
    return MountError(err, f"{what} {os.fspath(target)}: {os.strerror(err)}{detail}")


def _option_string(lowers: Sequence[Path], upper: Path | None, work: Path | None) -> str:
    for p in (*lowers, upper, work):
        if p is not None and any(c in str(p) for c in ",:\\"):
            raise ValueError(f"overlay layer path must not contain , : or \\: {p}")
    parts = ["lowerdir=" + ":".join(str(p) for p in lowers)]
    if upper is not None and work is not None:
        parts += [f"upperdir={upper}", f"workdir={work}", "volatile"]
    parts += [f"{k}={v}" for k, v in _FIXED_OPTIONS]
    return ",".join(parts)


def mount_overlay(
    target: Path, lowers: Sequence[Path], upper: Path | None = None, work: Path | None = None
) -> None:
    """Mount an overlay at `target`: `lowers` topmost first; read-only when no upper.

    Raises MountError (an OSError) with the errno of the failing call.
    """
    if not lowers:
        raise ValueError("an overlay needs at least one lower layer")
    options = _option_string(lowers, upper, work)
    if len(options.encode()) < _PAGE:
        flags = 0 if upper is not None else 1  # MS_RDONLY
        if _libc.mount(b"overlay", os.fsencode(target), b"overlay", flags, options.encode()) != 0:
            raise _fail("mount overlay at", target)
        return
    _mount_with_fsconfig(target, lowers, upper, work)


def _mount_with_fsconfig(
    target: Path, lowers: Sequence[Path], upper: Path | None, work: Path | None
) -> None:
    syscall = _libc.syscall
    fd = syscall(_SYS_FSOPEN, b"overlay", _FSOPEN_CLOEXEC)
    if fd < 0:
        raise _fail("fsopen overlay for", target)
    try:

        def set_string(key: str, value: str | os.PathLike[str]) -> None:
            rc = syscall(
                _SYS_FSCONFIG,
                ctypes.c_int(fd),
                ctypes.c_uint(_FSCONFIG_SET_STRING),
                os.fsencode(key),
                os.fsencode(value),
                ctypes.c_int(0),
            )
            if rc < 0:
                raise _fail(f"fsconfig {key}={os.fspath(value)} for", target, _read_log(fd))

        # lowerdir+ appends below the previous one, so add them topmost first
        for lower in lowers:
            set_string("lowerdir+", lower)
        if upper is not None and work is not None:
            set_string("upperdir", upper)
            set_string("workdir", work)
            if syscall(_SYS_FSCONFIG, fd, _FSCONFIG_SET_FLAG, b"volatile", None, 0) < 0:
                raise _fail("fsconfig volatile for", target, _read_log(fd))
        for key, value in _FIXED_OPTIONS:
            set_string(key, value)
        if syscall(_SYS_FSCONFIG, fd, _FSCONFIG_CMD_CREATE, None, None, 0) < 0:
            raise _fail("fsconfig create for", target, _read_log(fd))
        mfd = syscall(_SYS_FSMOUNT, fd, _FSMOUNT_CLOEXEC, 0)
        if mfd < 0:
            raise _fail("fsmount for", target, _read_log(fd))
        try:
            rc = syscall(
                _SYS_MOVE_MOUNT,
                ctypes.c_int(mfd),
                b"",
                ctypes.c_int(_AT_FDCWD),
                os.fsencode(target),
                ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH),
            )
            if rc < 0:
                raise _fail("move_mount to", target)
        finally:
            os.close(mfd)
    finally:
        os.close(fd)


def _read_log(fd: int) -> str:
    """The kernel's messages about a failed fsconfig, read from the context fd."""
    lines = []
    os.set_blocking(fd, False)
    for _ in range(8):
        try:
            lines.append(os.read(fd, 1024).decode(errors="replace").strip())
        except OSError:
            break
    return "; ".join(line for line in lines if line)


def mount_tmpfs(target: Path, *, mode: int = 0o700, size: int | None = None) -> None:
    """Mount a private tmpfs at `target` (`size` bytes at most). Raises MountError."""
    options = f"mode={mode:o}" + (f",size={size}" if size is not None else "")
    if _libc.mount(b"tmpfs", os.fsencode(target), b"tmpfs", 0, options.encode()) != 0:
        raise _fail("mount tmpfs at", target)


_MS_BIND = 0x1000
_MS_SHARED = 1 << 20


_MS_RDONLY, _MS_REMOUNT, _MS_REC = 0x1, 0x20, 0x4000


def bind_mount(source: Path, target: Path, *, readonly: bool = False) -> None:
    """Bind `source` onto `target` (read-only: with everything below it, then
    remounted read-only). Raises MountError."""
    flags = _MS_BIND | (_MS_REC if readonly else 0)
    if _libc.mount(os.fsencode(source), os.fsencode(target), None, flags, None) != 0:
        raise _fail("bind mount at", target)
    if readonly and _libc.mount(None, os.fsencode(target), None,
                                _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None) != 0:
        err = _fail("remount read-only", target)
        _libc.umount2(os.fsencode(target), MNT_DETACH)
        raise err


def make_shared(target: Path) -> None:
    """Make the mount at `target` shared: mounts made below it later also appear
    in the mount namespaces that hold a copy of it (a sandbox's slave copy
    receives them; nothing it mounts comes back). Raises MountError."""
    if _libc.mount(None, os.fsencode(target), None, _MS_SHARED, None) != 0:
        raise _fail("make shared", target)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def idmapped_tree(source: Path, userns_fd: int) -> int:
    """A detached copy of the mount tree at `source`, idmapped through the user
    namespace `userns_fd` (files appear owned by the ids that namespace maps
    their owners to). Returns its fd (close-on-exec): reach it as
    /proc/self/fd/<fd> or attach it with move_tree. Raises MountError."""
    fd = _libc.syscall(_SYS_OPEN_TREE, ctypes.c_int(_AT_FDCWD), os.fsencode(source),
                       ctypes.c_uint(_OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC))
    if fd < 0:
        raise _fail("open_tree", source)
    attr = _MountAttr(_MOUNT_ATTR_IDMAP, 0, 0, userns_fd)
    if _libc.syscall(_SYS_MOUNT_SETATTR, ctypes.c_int(fd), b"", ctypes.c_uint(_AT_EMPTY_PATH),
                     ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))) < 0:
        err = _fail("idmap mount of", source)
        os.close(fd)
        raise err
    return int(fd)


def move_tree(fd: int, target: Path) -> None:
    """Attach the detached mount `fd` at `target`. Raises MountError."""
    if _libc.syscall(_SYS_MOVE_MOUNT, ctypes.c_int(fd), b"", ctypes.c_int(_AT_FDCWD),
                     os.fsencode(target), ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH)) < 0:
        raise _fail("move_mount to", target)


def umount(target: Path, *, detach: bool = False) -> None:
    """Unmount `target`. Raises MountError (errno EBUSY when it is in use,
    EINVAL when it is not a mount point)."""
    if _libc.umount2(os.fsencode(target), MNT_DETACH if detach else 0) != 0:
        raise _fail("umount", target)


def is_busy(err: OSError) -> bool:
    """True when a umount failed because something uses the mount."""
    return err.errno == errno.EBUSY


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below `root` in /proc/self/mountinfo, deepest first."""
    prefix = str(root).rstrip("/")
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            point = _unescape(line.split(" ", 5)[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(Path(point))
    found.sort(key=lambda p: len(p.parts), reverse=True)
    return found
