"""A coordinator killed with SIGKILL mid-writes loses no acknowledged effect."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coordinator import Coordinator

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]  # slow: SIGKILLed children

WRITER = textwrap.dedent(
    """
    import asyncio, json, sys
    from coordinator import Coordinator

    async def main(state, repo):
        async with Coordinator.open(state, repo) as coord:
            scopes = [await coord.root.fork(f"w{i}") for i in range(3)]
            async def writer(scope):
                for n in range(100000):
                    path = f"out/{scope.name}/{n % 40}.txt"
                    r = await scope.write(path, f"{scope.name} {n}\\n".encode())
                    print(json.dumps([scope.name, r.commit, path, n]), flush=True)
            await asyncio.gather(*(writer(s) for s in scopes))

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def mounts_under(path: Path) -> list[str]:
    text = Path("/proc/self/mountinfo").read_text()
    return [line.split()[4] for line in text.splitlines() if str(path) in line.split()[4]]


async def test_sigkill_during_writes_keeps_every_acknowledged_effect(tmp_path, sample_repo):
    state = tmp_path / "state"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(state), str(sample_repo)],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2],
    )
    acked = []
    assert proc.stdout is not None
    for line in proc.stdout:
        acked.append(json.loads(line))
        if len(acked) >= 150:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    acked += [json.loads(line) for line in proc.stdout.read().splitlines() if line.strip()]

    async with Coordinator.open(state) as coord:
        latest: dict[tuple[str, str], int] = {}
        for name, commit, path, n in acked:
            scope = coord.scope(name)
            # the acknowledged commit is on the scope's branch
            assert coord.trace.is_ancestor(commit, scope.head)
            latest[(name, path)] = max(latest.get((name, path), -1), n)
        for (name, path), n in latest.items():
            scope = coord.scope(name)
            committed = coord.trace.read(scope.head, path)
            # the branch may hold one more, unacknowledged write; never fewer
            assert int(committed.split()[1]) >= n
            # the rebuilt workspace equals the head tree
            assert (scope.path / path).read_bytes() == committed
        r = await coord.scope("w0").write("after.txt", b"ok")
        assert r.ok
    assert mounts_under(state) == []
    fsck = subprocess.run(["git", "--git-dir", str(state / "trace.git"), "fsck", "--strict"],
                          capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    assert json.dumps(acked)  # keep the evidence printable on failure
