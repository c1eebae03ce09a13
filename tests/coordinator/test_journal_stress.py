"""Effects from several scopes, some on io threads, while checkpoints and pack
roll-ups run (every 50 ms in the background, and 24 more started from the
writers): every acknowledged write reads back, before and after a reopen, and
fsck is clean."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from coordinator import ConflictGuard, Coordinator, JournalBounds

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]  # slow: checkpoints under load


async def test_checkpoints_under_load_lose_nothing(tmp_path, sample_repo):
    expect: dict[tuple[str, str], bytes] = {}
    bounds = JournalBounds(checkpoint_s=0.05, max_packs=4)
    async with Coordinator.open(tmp_path / "s", sample_repo, policies=[ConflictGuard()],
                                journal=bounds) as coord:
        scopes = [await coord.root.fork(f"s{i}") for i in range(4)]
        checkpoints: list[asyncio.Task[None]] = []

        async def worker(scope) -> None:
            for k in range(150):
                path = f"d/{scope.name}/{k % 7}.txt"
                data = f"{scope.name} {k}\n".encode() * (1 + k % 50)
                if k % 10 == 0:
                    data *= 3000  # past 64 KiB: written on an io thread
                r = await scope.write(path, data)
                assert r.ok, r.reason
                expect[(scope.name, path)] = data
                if k % 37 == 0:
                    assert await scope.read(path) == data
                    assert coord.trace.read(scope.head, path) == data
                if k % 25 == 0:  # one more, on an io thread, while the writes go on
                    checkpoints.append(asyncio.create_task(coord.checkpoint()))
                if k % 61 == 60:
                    await scope.rewind(steps=1)
                    del expect[(scope.name, path)]
                await asyncio.sleep(0)

        await asyncio.gather(*(worker(s) for s in scopes))
        await asyncio.gather(*checkpoints)
        assert coord.trace.journal._generation >= 5, "checkpoints ran during the writes"
        for s in scopes:
            assert (await coord.root.merge(s)).commit is not None
        for (name, path), data in expect.items():
            assert coord.trace.read(coord.scope(name).head, path) == data
        assert len(list((tmp_path / "s" / "trace.git" / "objects" / "pack").glob("*.pack"))) <= 6
    fsck = subprocess.run(["git", "--git-dir", str(tmp_path / "s" / "trace.git"), "fsck",
                           "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    async with Coordinator.open(tmp_path / "s") as coord:
        for (name, path), data in expect.items():
            assert coord.trace.read(coord.scope(name).head, path) == data
