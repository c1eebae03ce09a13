"""A coordinator killed with SIGKILL mid-writes loses no acknowledged effect."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
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
                    emit([scope.name, r.commit, path, n])
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


CHECKPOINT_KILLER = textwrap.dedent(
    """
    import asyncio, json, sys, threading, time
    from coordinator import Coordinator, JournalBounds
    from coordinator.store._journal import Journal

    stage = sys.argv[3]
    real_pack, real_refs = Journal._write_pack, Journal._write_refs

    # The checkpoint thread and the writers both report; print() writes the text
    # and its newline separately, so two threads could share one line.
    out = threading.Lock()
    def emit(item):
        with out:
            sys.stdout.write(json.dumps(item) + "\\n")
            sys.stdout.flush()

    def hold(where):
        emit(["stage", where])
        time.sleep(60)  # the parent kills us here

    # Pause the second checkpoint at one of its steps, with writers still going.
    seen = []
    def write_pack(self, objects):
        seen.append(1)
        if len(seen) == 2 and stage == "before_pack":
            hold(stage)
        real_pack(self, objects)
        if len(seen) == 2 and stage == "before_refs":
            hold(stage)
    def write_refs(self, refs):
        real_refs(self, refs)
        if len(seen) == 2 and stage == "before_drop":
            hold(stage)
    Journal._write_pack, Journal._write_refs = write_pack, write_refs

    async def main(state, repo):
        bounds = JournalBounds(checkpoint_s=0.2, checkpoint_objects=60)
        async with Coordinator.open(state, repo, journal=bounds) as coord:
            scopes = [await coord.root.fork(f"w{i}") for i in range(3)]
            async def writer(scope):
                for n in range(100000):
                    path = f"out/{scope.name}/{n % 40}.txt"
                    data = f"{scope.name} {n}\\n".encode() * (1 + (n % 7) * 20000)
                    r = await scope.write(path, data)
                    emit([scope.name, r.commit, path, n])
            await asyncio.gather(*(writer(s) for s in scopes))

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


@pytest.mark.parametrize("stage", ["before_pack", "before_refs", "before_drop"])
async def test_sigkill_during_a_checkpoint_keeps_every_acknowledged_effect(
    tmp_path, sample_repo, stage
):
    """Killed while a checkpoint is stuck at any of its steps (pack not yet
    written; pack written, refs not moved; refs moved, journal not yet dropped),
    with three writers going on into the next generation and waiting at the
    bound (some writes large enough for the io threads): the reopened trace
    holds every acknowledged effect, fsck is clean and work goes on. A stale
    `packed-refs.lock` (a kill inside the ref write) does not stop it either."""
    state = tmp_path / "state"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHECKPOINT_KILLER, str(state), str(sample_repo), stage],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2],
    )
    acked = []
    assert proc.stdout is not None
    held = False
    for line in proc.stdout:
        item = json.loads(line)
        if item[0] == "stage":
            held = True
            break
        acked.append(item)
    assert held, "the child reached the checkpoint step"
    # let the writers run on (into the next generation, then into backpressure)
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    acked += [json.loads(line) for line in proc.stdout.read().splitlines() if line.strip()]
    assert len(acked) > 20
    (state / "trace.git" / "packed-refs.lock").touch()  # what a kill mid-write leaves

    async with Coordinator.open(state) as coord:
        latest: dict[tuple[str, str], int] = {}
        for name, commit, path, n in acked:
            assert coord.trace.is_ancestor(commit, coord.scope(name).head)
            latest[(name, path)] = max(latest.get((name, path), -1), n)
        for (name, path), n in latest.items():
            committed = coord.trace.read(coord.scope(name).head, path)
            assert int(committed.split()[1]) >= n
        r = await coord.scope("w0").write("after.txt", b"ok")
        assert r.ok
        await coord.checkpoint()
    (state / "trace.git" / "packed-refs.lock").unlink()
    git_dir = state / "trace.git"
    fsck = subprocess.run(["git", "--git-dir", str(git_dir), "fsck", "--strict"],
                          capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    heads = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse",
                            "refs/corral/scopes/w0"], capture_output=True, text=True)
    assert heads.stdout.strip() == r.commit
    assert list((git_dir / "corral-journal").glob("*.log")) == []
