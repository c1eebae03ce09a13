"""A long history costs no memory once checkpointed or read: names handed to
pygit2's leaking lookups are interned (`coordinator.store._gitnames`), a burst of
writes leaves no Python object behind it, and neither does reading the log
(records are decoded without pydantic's value cache)."""

from __future__ import annotations

import gc
import pathlib
import sys
import tracemalloc

import pygit2
import pytest

from coordinator import Coordinator
from coordinator.store._gitnames import entry, name
from tests.conftest import make_repo


def _fresh(text: str) -> str:
    return "".join(list(text))  # an equal string that is a new object


def test_a_lookup_keeps_no_string_per_call(tmp_path) -> None:
    repo = pygit2.Repository(str(make_repo(tmp_path / "r", {"a/b.txt": "x\n"})))
    tree = repo.head.peel(pygit2.Tree)
    tracemalloc.start()
    try:
        entry(tree, _fresh("a/b.txt"))
        entry(tree, _fresh("a/.gitignore"))
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5000):
            assert entry(tree, _fresh("a/b.txt")) is not None
            assert entry(tree, _fresh("a/.gitignore")) is None
            builder = repo.TreeBuilder(tree)
            builder.get(name(_fresh("a")))
            repo.references.get(name(_fresh("refs/heads/nope")))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # pygit2 keeps one reference per call: 20k fresh strings would be ~1.2 MB
    assert grown < 50_000, grown


def test_a_path_with_a_nul_byte_names_nothing(tmp_path) -> None:
    """pygit2 cuts a lookup's path at a NUL byte: "a.txt\\0x" found a.txt."""
    repo = pygit2.Repository(str(make_repo(tmp_path / "r", {"a.txt": "x\n"})))
    tree = repo.head.peel(pygit2.Tree)
    assert entry(tree, "a.txt") is not None
    assert entry(tree, "a.txt\0x") is None
    assert entry(tree, "") is None and entry(tree, "a.txt/") is None


def test_pygit2_still_needs_it(tmp_path) -> None:
    """Why the workaround exists: pygit2 keeps a reference to a tree lookup's
    key. When this fails, pygit2 is fixed and `_gitnames` can go."""
    repo = pygit2.init_repository(str(tmp_path / "bare"), bare=True)
    tree = repo[repo.TreeBuilder().write()]
    key = _fresh("missing")
    held = sys.getrefcount(key)
    for _ in range(10):
        try:
            tree[key]
        except KeyError:
            pass
    assert sys.getrefcount(key) > held, "pygit2 no longer leaks: drop coordinator.store._gitnames"


@pytest.mark.slow  # a burst of effects and a full gc census: ~5-9 s on 2 cores
async def test_a_checkpointed_burst_leaves_no_python_objects(tmp_path, sample_repo) -> None:
    """Writes over a fixed set of paths, then a checkpoint: what Python holds
    afterwards does not grow with the number of writes (it grew ~200 bytes per
    effect before the lookups' names were interned)."""
    async with Coordinator.open(tmp_path / "state", repo=sample_repo) as coord:
        a = await coord.root.fork("a")
        paths = [f"d{i % 4}/sub/f{i}.txt" for i in range(40)]

        async def burst(n: int) -> None:
            for i in range(n):
                await a.write(paths[i % len(paths)], f"effect {i}\n".encode())
            await coord.checkpoint()

        await burst(200)  # every path, name and cache seen once
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            await burst(2000)
            gc.collect()
            # Not counted: CPython's table of interned strings, which pathlib's names
            # pass through. When its free slots run out it is rebuilt at the same
            # size, and tracemalloc sees the new table but not the freeing of the
            # old one (allocated before tracing started).
            interned = [tracemalloc.Filter(False, pathlib.__file__)]
            grown = sum(s.size_diff for s in tracemalloc.take_snapshot().filter_traces(
                interned).compare_to(before.filter_traces(interned), "filename"))
        finally:
            tracemalloc.stop()
    assert grown < 120_000, f"{grown} bytes held after 2000 checkpointed writes"


@pytest.mark.slow  # near the 8 s fast budget on a loaded 2-core machine
async def test_reading_the_whole_log_keeps_nothing(tmp_path, sample_repo) -> None:
    """Every record of a 400-effect log decoded, then dropped: nothing of them
    stays but what the thread's git handle holds until the next checkpoint
    (~20 KB here); pydantic's default string cache kept up to 16k decoded ids
    and paths for good besides, ~220 bytes per record here."""
    async with Coordinator.open(tmp_path / "state", repo=sample_repo) as coord:
        logs = {}
        for name in ("a", "b"):
            scope = await coord.root.fork(name)
            for i in range(400):
                await scope.write(f"{name}/f{i}.txt", f"effect {i}\n".encode())
            logs[name] = scope.head
        await coord.checkpoint()

        def read_all(name: str) -> int:
            return len(coord.trace.log(logs[name]))

        assert await coord.io(read_all, "a") == 401  # the fork and every write
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            assert await coord.io(read_all, "b") == 401  # records not read before
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    assert grown < 45_000, f"{grown} bytes held after reading 401 records"
