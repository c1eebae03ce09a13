"""Files ignored by .gitignore are acknowledged like any other: they survive a
SIGKILL of the server, follow rewinds and forks, and stay out of the trees
that merges see (issue 9, finding 7)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.client import CorralClient

from .server_fixtures import serve_process

ROOT = Path(__file__).parents[2]
ADMIN = "a.ignored-admin"


async def _start(state: Path, repo: Path | None) -> tuple[subprocess.Popen[str], str]:
    return await serve_process(state, repo, ADMIN)


@pytest.mark.slow
async def test_ignored_files_survive_a_sigkill(tmp_path, sample_repo):
    """An API write of build/out.o and a command's build/gen.txt, acknowledged,
    are there after `kill -9` and a restart; so is what a fork inherited; a
    deleted ignored file stays deleted; none of them is in a commit's tree."""
    state = tmp_path / "state"
    proc, url = await _start(state, sample_repo)
    try:
        async with CorralClient(url, ADMIN) as c:
            await c.fork("root", "a")
            r = await c.write("a", "build/out.o", b"\x7fELF object")
            assert r.ok and r.effect.outcome.ignored == ("build/out.o",)  # type: ignore[union-attr]
            r = await c.exec("a", ["sh", "-c", "mkdir -p build && echo generated > build/gen.txt"
                                   " && echo junk > build/tmp.txt && echo x > src/new.py"])
            assert r.ok and r.returncode == 0
            await c.exec("a", ["rm", "build/tmp.txt"])
            await c.write("a", "src/__pycache__/app.cpython-311.pyc", b"bytecode")
            await c.fork("a", "child")
            await c.write("a", "build/out.o", b"newer object")  # after the fork
            assert await c.read("a", "build/gen.txt") == b"generated\n"
            head = (await c.scope("a")).head
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
        proc.wait()

    proc, url = await _start(state, None)
    try:
        async with CorralClient(url, ADMIN) as c:
            assert (await c.scope("a")).head == head
            assert await c.read("a", "build/out.o") == b"newer object"
            assert await c.read("a", "build/gen.txt") == b"generated\n"
            assert await c.read("a", "src/__pycache__/app.cpython-311.pyc") == b"bytecode"
            with pytest.raises(FileNotFoundError):
                await c.read("a", "build/tmp.txt")
            assert await c.read("child", "build/out.o") == b"\x7fELF object"
            assert await c.read("child", "build/gen.txt") == b"generated\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    # After a clean close the trace is on disk: ignored files are not in the tree.
    tree = subprocess.run(["git", "--git-dir", str(state / "trace.git"), "ls-tree", "-r",
                           "--name-only", head], capture_output=True, text=True, check=True)
    assert "src/new.py" in tree.stdout.split()
    assert not any(p.startswith("build/") or "__pycache__" in p for p in tree.stdout.split())


@pytest.mark.slow
async def test_rewind_and_reopen_agree_on_ignored_files(tmp_path, sample_repo):
    """A rewind drops the ignored files written after its target; reopening the
    state directory gives the same workspace as the live rewind did."""
    state = tmp_path / "s"
    async with Coordinator.open(state, sample_repo) as coord:
        a = await coord.root.fork("a")
        await a.write("build/keep.o", b"kept")
        target = a.head
        await a.write("build/late.o", b"late")
        await a.write("build/keep.o", b"overwritten")
        await a.rewind(target)
        live = {p: (a.path / p).read_bytes() for p in ("build/keep.o",)
                if (a.path / p).exists()}
        assert not (a.path / "build/late.o").exists()
        await a.write("build/after.o", b"after")
    async with Coordinator.open(state) as coord:
        a = coord.scope("a")
        assert not (a.path / "build/late.o").exists()
        assert (a.path / "build/after.o").read_bytes() == b"after"
        reopened = {p: (a.path / p).read_bytes() for p in ("build/keep.o",)
                    if (a.path / p).exists()}
        assert reopened == live
