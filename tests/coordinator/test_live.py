"""Live write interception in fuse scopes: real processes' calls go through the policy
chain before they happen, and what they change is recorded per closed file."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from coordinator import Coordinator, Effect, FsOp, FsWrite, NotFound, Subscription, block
from sandboxes import FuseBackend
from tests.conftest import SAMPLE, make_repo
from tests.sandboxes.conftest import mounts_under

_REASON = FuseBackend.unavailable_reason()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.asyncio,
    pytest.mark.root,
    pytest.mark.skipif(_REASON is not None, reason=f"fuse backend unavailable: {_REASON}"),
]

FILES = {**SAMPLE, "a.py": "original\n"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


async def deny_a(intent, view):
    if isinstance(intent, FsOp) and "a.py" in (intent.path, intent.target):
        return block("a.py belongs to bob")
    return None


async def sh(cwd: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Run a shell command from the host in `cwd` without blocking the event loop
    (the loop decides the command's calls)."""
    return await asyncio.to_thread(
        subprocess.run, ["sh", "-c", script], cwd=cwd, capture_output=True, text=True,
        timeout=60,
    )


def blocked(effects: list[Effect]) -> list[Effect]:
    return [e for e in effects if e.status == "blocked"]


async def settle(coord: Coordinator, scope, count: int, recorded: Subscription,
                 limit: float = 5.0) -> list[Effect]:
    """The scope's effects once at least `count` are recorded, waking on each of its
    `effect` events (`recorded`: subscribed before the commands ran; a file closed
    last by a process exiting is released, and recorded, after the process is gone).
    Fails the test after `limit` seconds."""
    try:
        async with asyncio.timeout(limit):
            while len(effects := coord.log(scope)) < count:
                await recorded.get()
    except TimeoutError:
        raise AssertionError(f"{len(coord.log(scope))} effects recorded in {scope.name}, "
                             f"not {count}, within {limit} s") from None
    return effects


async def test_real_commands_denied_on_a_py_recorded_elsewhere(tmp_path: Path, repo: Path):
    """Under a policy denying a.py: `echo > a.py`, `mv`, `rm` and an appending Python
    script fail with EACCES, a.py is unchanged and each denial is in the trace; the files
    the commands wrote elsewhere are recorded, one fs.write per file per close."""
    async with Coordinator.open(tmp_path / "s", repo, backend="fuse",
                                policies=[deny_a]) as coord:
        a = await coord.root.fork("alice")
        start = len(coord.log(a))

        r = await sh(a.path, "echo x > a.py")
        assert r.returncode != 0 and "Permission denied" in r.stderr
        r = await sh(a.path, "mv a.py moved.py")
        assert r.returncode != 0 and "Permission denied" in r.stderr
        r = await sh(a.path, "rm a.py")
        assert r.returncode != 0 and "Permission denied" in r.stderr
        script = textwrap.dedent("""
            import sys
            with open("log.txt", "w") as log:
                for i in range(100):
                    log.write(f"line {i}\\n")
                    log.flush()
            try:
                open("a.py", "a").write("appended\\n")
            except PermissionError as e:
                print("denied", e.errno)
                sys.exit(3)
        """)
        r = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", script], cwd=a.path, capture_output=True,
            text=True, timeout=60,
        )
        assert r.returncode == 3 and r.stdout.strip() == "denied 13", r.stderr
        r = await sh(a.path, "echo hello > b.py && echo more >> b.py && mv b.py src/b.py")
        assert r.returncode == 0, r.stderr

        assert (a.path / "a.py").read_text() == "original\n"
        assert coord.trace.read(a.head, "a.py") == b"original\n"
        effects = coord.log(a)[start:]
        denials = blocked(effects)
        assert [(e.intent.op, e.intent.path) for e in denials] == [  # type: ignore[union-attr]
            ("truncate", "a.py"), ("rename", "a.py"), ("unlink", "a.py"),
            ("open_write", "a.py"),
        ]
        assert all(e.decision and e.decision.reason == "a.py belongs to bob" for e in denials)

        writes = [e.intent for e in effects if isinstance(e.intent, FsWrite)]
        log_writes = [w for w in writes if w.path == "log.txt"]
        assert len(log_writes) == 1  # 100 write() calls, one close
        assert coord.trace.blob(log_writes[0].blob) == "".join(
            f"line {i}\n" for i in range(100)).encode()
        assert [coord.trace.blob(w.blob) for w in writes if w.path == "b.py"] == [
            b"hello\n", b"hello\nmore\n"]
        assert coord.trace.read(a.head, "src/b.py") == b"hello\nmore\n"
        assert coord.trace.read(a.head, "log.txt").endswith(b"line 99\n")
        with pytest.raises(NotFound):
            coord.trace.read(a.head, "b.py")
        # every recorded change names the decision that allowed it
        assert all(e.cause and "#live-" in e.cause for e in effects if e.status == "materialized")


async def test_a_policy_that_does_not_answer_in_time_denies(tmp_path: Path, repo: Path):
    """A policy slower than the limit: the call fails fast with EACCES, nothing is
    written, and the trace records the denial by the time limit."""

    async def slow(intent, view):
        if isinstance(intent, FsOp):
            await asyncio.sleep(30)
        return None

    async with Coordinator.open(tmp_path / "s", repo, backend="fuse", policies=[slow]) as coord:
        coord.runtime.with_settings(live_timeout=0.3)
        a = await coord.root.fork("alice")
        t = time.monotonic()
        r = await sh(a.path, "echo x > new.py")
        assert time.monotonic() - t < 5
        assert r.returncode != 0 and "Permission denied" in r.stderr
        assert not (a.path / "new.py").exists()
        (denial,) = blocked(coord.log(a))
        assert denial.decision is not None
        assert denial.decision.policy == "live-timeout"
        assert "did not decide within 0.3s" in denial.decision.reason


async def test_a_policy_that_reads_the_workspace_does_not_deadlock(tmp_path: Path, repo: Path):
    """A policy reading the writer's workspace (files, listings, the trace) while a call
    waits on it answers normally: the coordinator's reads bypass FUSE."""
    seen: list[bytes] = []
    opened: list[Coordinator] = []

    async def reader(intent, view):
        if isinstance(intent, FsOp):
            scope = opened[0].scope(view.scope)
            seen.append(await scope.read("README.md"))
            await scope.listdir("")
            await scope.listdir("src")
            await view.read(view.scope, "a.py")
        return None

    async with Coordinator.open(tmp_path / "s", repo, backend="fuse",
                                policies=[reader]) as coord:
        opened.append(coord)
        coord.runtime.with_settings(live_timeout=5.0)
        a = await coord.root.fork("alice")
        t = time.monotonic()
        r = await sh(a.path, "echo x > README.md && mkdir -p src/deep && echo y > src/deep/n.py")
        assert r.returncode == 0, r.stderr
        assert time.monotonic() - t < 4
        assert seen and seen[0] == b"# sample\n"
        assert blocked(coord.log(a)) == []
        assert coord.trace.read(a.head, "src/deep/n.py") == b"y\n"


async def test_coordinator_writes_are_neither_asked_nor_recorded_twice(
    tmp_path: Path, repo: Path
):
    """Scope.write, exec, rewind and merge materialize into a fuse workspace without
    any fs.op intent, and each leaves exactly its own effect."""
    asked: list[object] = []

    async def count(intent, view):
        if isinstance(intent, FsOp):
            asked.append(intent)
        return None

    async with Coordinator.open(tmp_path / "s", repo, backend="fuse", policies=[count]) as coord:
        a = await coord.root.fork("alice")
        b = await coord.root.fork("bob")
        await a.write("src/new.py", b"n = 1\n")
        await a.exec(["sh", "-c", "echo e > exec.txt"])
        await b.write("docs/b.md", b"bob\n")
        await a.merge(b)
        await a.rewind(steps=1)
        assert (a.path / "src/new.py").read_bytes() == b"n = 1\n"
        assert (a.path / "exec.txt").read_bytes() == b"e\n"
        assert not (a.path / "docs/b.md").exists()
        assert asked == []
        kinds = [e.kind for e in coord.log(a)]
        assert kinds == ["scope.fork", "fs.write", "exec", "scope.rewind"]


async def test_a_policy_exception_denies_and_close_leaves_no_mount(tmp_path: Path, repo: Path):
    """A policy that raises blocks the call (fail closed) and is recorded; closing the
    coordinator afterwards, with a process still in the workspace, unmounts everything."""

    async def broken(intent, view):
        raise RuntimeError("policy bug")

    state = tmp_path / "s"
    holder = None
    async with Coordinator.open(state, repo, backend="fuse", policies=[broken]) as coord:
        a = await coord.root.fork("alice")
        r = await sh(a.path, "echo x > new.py")
        assert r.returncode != 0
        (denial,) = blocked(coord.log(a))
        assert denial.decision is not None and "policy bug" in denial.decision.reason
        holder = subprocess.Popen(["sh", "-c", "exec 3<README.md; sleep 30"], cwd=a.path)
    try:
        assert mounts_under(state) == []
    finally:
        holder.kill()
        holder.wait()


_HOLD = """
import asyncio, sys
sys.path.insert(0, {root!r})
from coordinator import Coordinator

async def main():
    async with Coordinator.open({state!r}, {repo!r}, backend="fuse") as coord:
        a = await coord.root.fork("alice")
        await a.write("kept.txt", b"kept\\n")
        print(a.path, flush=True)
        await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_sigkill_then_reopen_leaves_no_stale_mount(tmp_path: Path, repo: Path):
    """A process holding a fuse coordinator is SIGKILLed: its mounts are stale until the
    state directory is reopened, which clears them and rebuilds the workspaces."""
    state = tmp_path / "s"
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD.format(root=root, state=str(state), repo=str(repo))],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = await asyncio.to_thread(proc.stdout.readline)
    assert line, "the child coordinator did not start"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert any("/ws/F/" in p for p in mounts_under(state))
    async with Coordinator.open(state, repo, backend="fuse", policies=[deny_a]) as coord:
        a = coord.scope("alice")
        assert (a.path / "kept.txt").read_bytes() == b"kept\n"
        r = await sh(a.path, "echo x > a.py")
        assert r.returncode != 0
        r = await sh(a.path, "echo y > other.py")
        assert r.returncode == 0, r.stderr
        assert coord.trace.read(a.head, "other.py") == b"y\n"
        live = [p for p in mounts_under(state) if "/ws/F/" in p]
        assert len(live) == 2  # root and alice, fresh
    assert mounts_under(state) == []
