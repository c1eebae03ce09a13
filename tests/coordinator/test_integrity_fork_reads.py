"""Reads never see a half-forked workspace (issue 9, finding 12): while a scope
is forked again and again (each fork freezes its upper layer and remounts),
reads of its files over HTTP always find them."""

from __future__ import annotations

import asyncio

import pytest

from .server_fixtures import serve


@pytest.mark.slow
async def test_reads_during_a_fork_loop_never_miss_a_file(tmp_path, sample_repo):
    """Forty forks of a busy scope (a write before each, so each one remounts)
    against readers of a small file, a large file and a directory: no 404,
    no missing name, no wrong content."""
    async with serve(tmp_path / "state", sample_repo) as srv:
        c = srv.client
        await c.fork("root", "a")
        big = b"B" * (256 * 1024)  # read on a thread, not inline
        await c.write("a", "big.bin", big)
        expected = await c.read("a", "README.md")
        names = await c.listdir("a")
        done = asyncio.Event()
        reads = misses = 0

        async def reader() -> None:
            nonlocal reads, misses
            while not done.is_set():
                for got, want in (
                    (c.read("a", "README.md"), expected),
                    (c.read("a", "big.bin"), big),
                    (c.listdir("a"), None),
                ):
                    try:
                        value = await got
                    except FileNotFoundError:
                        misses += 1
                        continue
                    reads += 1
                    if want is None:
                        assert set(names) <= set(value), value  # type: ignore[arg-type]
                    else:
                        assert value == want

        async def forker() -> None:
            try:
                for i in range(40):
                    await c.write("a", f"n{i}.txt", b"x")  # a dirty upper: the fork remounts
                    await c.fork("a", f"child{i}")
            finally:
                done.set()

        await asyncio.gather(forker(), reader(), reader())
        assert misses == 0, f"{misses} of {reads + misses} reads missed"
        assert reads > 40
