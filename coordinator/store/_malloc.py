"""glibc's allocator, told what the coordinator's memory pattern is.

The journal's objects and each checkpoint's pack are built on the io threads
and freed at the checkpoint. glibc keeps freed memory resident: in an arena per
thread by default, and inside its heap until asked to give whole free pages
back. Memory in use after a 50k-write burst and its checkpoint is what it was
before (8.3 -> 9.5 MB by `mallinfo2`), but RSS stayed 30-60 MB higher; one
arena and a trim after each checkpoint that wrote a pack took a probe's from
61 to 45 MB (28 at start; the README has the benchmark's figures). Elsewhere
(musl, macOS) both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

__all__ = ["one_arena", "trim"]

_M_ARENA_MAX = -8  # mallopt parameter, glibc's malloc.h


@functools.cache
def _libc() -> Any | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt, libc.malloc_trim  # noqa: B018  (glibc has both)
    except (OSError, AttributeError, TypeError):
        return None
    return libc


def one_arena() -> bool:
    """One malloc arena for every thread of the process (what MALLOC_ARENA_MAX=1
    does); call it before threads start: a process entry point's choice, not a
    library's. Returns whether it applied."""
    libc = _libc()
    return libc is not None and bool(libc.mallopt(_M_ARENA_MAX, 1))


def trim() -> None:
    """Give the heap's whole free pages back to the kernel (~0.3 ms at 70 MB)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
