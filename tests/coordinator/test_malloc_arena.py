"""`corral` runs with one malloc arena, so what its io threads free goes back to
one heap instead of staying resident in an arena per thread."""

from __future__ import annotations

import ctypes.util
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="mallopt(M_ARENA_MAX) is glibc's")

# Four threads allocate at once; malloc_info then lists the arenas (<heap nr=...>).
_PROBE = textwrap.dedent(
    """
    import ctypes, ctypes.util, os, sys, tempfile, threading
    from coordinator.store._malloc import one_arena
    if sys.argv[1] == "one":
        assert one_arena()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.fdopen.restype = ctypes.c_void_p
    barrier = threading.Barrier(4)
    def work():
        barrier.wait()
        blocks = [libc.malloc(4096) for _ in range(2000)]
        barrier.wait()
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    with tempfile.TemporaryFile() as f:
        stream = libc.fdopen(os.dup(f.fileno()), b"w")
        libc.malloc_info(0, ctypes.c_void_p(stream))
        libc.fclose(ctypes.c_void_p(stream))
        f.seek(0)
        print(f.read().decode().count("<heap nr="))
    """
)


def _arenas(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return int(out.strip())


def test_one_malloc_arena_keeps_threads_in_one_heap() -> None:
    assert ctypes.util.find_library("c")
    assert _arenas("default") > 1  # the probe can tell: threads get arenas of their own
    assert _arenas("one") == 1



_TRIM_PROBE = textwrap.dedent(
    """
    import ctypes, ctypes.util
    from coordinator.store._malloc import trim
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    def anon_mb():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon"):
                return int(line.split()[1]) / 1024
    blocks = [libc.malloc(8192) for _ in range(8000)]  # ~64 MB, below mmap's threshold
    for b in blocks:
        ctypes.memset(b, 1, 8192)
    for b in blocks[:-1]:  # the last one pins the heap's top: no automatic trim
        libc.free(ctypes.c_void_p(b))
    before = anon_mb()
    trim()
    print(before, anon_mb())
    """
)


def test_trim_gives_freed_heap_pages_back() -> None:
    out = subprocess.run([sys.executable, "-c", _TRIM_PROBE], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    before, after = map(float, out.split())
    assert before - after > 40, (before, after)
