"""A server killed with SIGKILL during a burst of writes from 8 clients loses
no write it acknowledged (HTTP 200) to a client."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import aiohttp
import pytest

from coordinator.client import CorralClient

from .server_fixtures import serve_process

pytestmark = pytest.mark.slow  # a SIGKILLed server

ROOT = Path(__file__).parents[2]
ADMIN = "a.durability-admin"
CLIENTS = 8


async def _start(state: Path, repo: Path | None) -> tuple[subprocess.Popen[str], str]:
    return await serve_process(state, repo, ADMIN)


async def test_sigkill_of_the_server_loses_no_acknowledged_write(tmp_path, sample_repo):
    state = tmp_path / "state"
    proc, url = await _start(state, sample_repo)
    acked: list[tuple[str, str, int, str]] = []
    enough = asyncio.Event()
    try:
        async with CorralClient(url, ADMIN) as admin:
            for i in range(CLIENTS):
                await admin.fork("root", f"w{i}")

            async def writer(i: int) -> None:
                async with CorralClient(url, ADMIN) as c:
                    for n in range(100_000):
                        path = f"out/w{i}/{n % 20}.txt"
                        try:
                            r = await c.write(f"w{i}", path, f"w{i} {n}\n".encode())
                        except (TimeoutError, aiohttp.ClientError, ConnectionError):
                            return  # the server died: this write was never acknowledged
                        assert r.ok and r.commit
                        acked.append((f"w{i}", path, n, r.commit))
                        if len(acked) >= 300:
                            enough.set()

            tasks = [asyncio.create_task(writer(i)) for i in range(CLIENTS)]
            await asyncio.wait_for(enough.wait(), 60)
            proc.send_signal(signal.SIGKILL)
            await asyncio.gather(*tasks)
    finally:
        proc.kill()
        proc.wait()
    assert len(acked) >= 300

    proc, url = await _start(state, None)
    try:
        async with CorralClient(url, ADMIN) as c:
            for i in range(CLIENTS):
                name = f"w{i}"
                mine = [a for a in acked if a[0] == name]
                commits = {e.commit for e in (await c.log(name)).entries}
                assert {a[3] for a in mine} <= commits
                latest: dict[str, int] = {}
                for _, path, n, _ in mine:
                    latest[path] = max(latest.get(path, -1), n)
                for path, n in latest.items():
                    content = await c.read(name, path)
                    # the branch may hold one more, unacknowledged write; never fewer
                    assert int(content.split()[1]) >= n
            assert (await c.write("w0", "after.txt", b"ok")).ok
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
