"""The fuse backend's interception: every mutating call is asked first, reads are not,
a denial is EACCES with nothing changed, and no mount outlives its backend."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandboxes
from sandboxes import FuseBackend, MutationIntent, Workspace, snapshot_files
from tests.sandboxes.conftest import expected_base, mounts_under, populate_base

_REASON = FuseBackend.unavailable_reason()
pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(_REASON is not None,
                                 reason=f"fuse backend unavailable: {_REASON}")]


class Recorder:
    """An interceptor that denies the paths in `deny` and remembers every call."""

    def __init__(self, deny: frozenset[str] = frozenset()) -> None:
        self.deny = deny
        self.asked: list[MutationIntent] = []
        self.done_calls: list[MutationIntent] = []
        self.closed_paths: list[str] = []
        self.lock = threading.Lock()

    def decide(self, intent: MutationIntent, /) -> str | None:
        with self.lock:
            self.asked.append(intent)
        return "denied by test" if intent.path in self.deny else None

    def done(self, intent: MutationIntent, /) -> None:
        with self.lock:
            self.done_calls.append(intent)

    def closed(self, path: str, /) -> None:
        with self.lock:
            self.closed_paths.append(path)


@pytest.fixture
def fuse_ws(tmp_path: Path) -> Iterator[tuple[FuseBackend, Workspace]]:
    backend = FuseBackend(tmp_path / "state")
    try:
        yield backend, backend.base("k", populate_base)
    finally:
        backend.close()


def test_reads_are_not_asked(fuse_ws: tuple[FuseBackend, Workspace]) -> None:
    """Listing, stat, reading and following a symlink ask nothing."""
    _, ws = fuse_ws
    rec = Recorder()
    assert ws.intercept(rec)
    assert snapshot_files(ws.path) == expected_base()
    assert (ws.path / "app-link").read_bytes() == b"print('app')\n"
    subprocess.run(["grep", "-r", "helper", "."], cwd=ws.path, check=True, capture_output=True)
    assert rec.asked == []


def test_every_mutating_call_is_asked_before_it_happens(
    fuse_ws: tuple[FuseBackend, Workspace],
) -> None:
    """open for writing, create, truncate, unlink, rename, mkdir, rmdir, symlink, link and
    chmod each reach the interceptor with their op and paths."""
    _, ws = fuse_ws
    rec = Recorder()
    ws.intercept(rec)
    p = ws.path
    with open(p / "README.md", "r+b") as f:
        f.write(b"#")
    (p / "new.txt").write_text("n")
    os.truncate(p / "src/util.py", 3)
    os.unlink(p / "docs/guide.md")
    os.rename(p / "new.txt", p / "moved.txt")
    os.mkdir(p / "d")
    os.rmdir(p / "d")
    os.symlink("moved.txt", p / "sym")
    os.link(p / "moved.txt", p / "hard")
    os.chmod(p / "moved.txt", 0o755)
    asked = {(i.op, i.path, i.target) for i in rec.asked}
    assert asked >= {
        ("open_write", "README.md", None),
        ("create", "new.txt", None),
        ("truncate", "src/util.py", None),
        ("unlink", "docs/guide.md", None),
        ("rename", "new.txt", "moved.txt"),
        ("mkdir", "d", None),
        ("rmdir", "d", None),
        ("symlink", "sym", "moved.txt"),
        ("link", "hard", "moved.txt"),
        ("chmod", "moved.txt", None),
    }
    assert "README.md" in rec.closed_paths and "new.txt" in rec.closed_paths
    assert {i.op for i in rec.done_calls} >= {"unlink", "rename", "mkdir", "rmdir", "symlink",
                                               "link", "chmod"}
    # the backing tree holds the same files as the FUSE view
    assert snapshot_files(ws.backing) == snapshot_files(ws.path)


def test_denied_calls_fail_with_eacces_and_change_nothing(
    fuse_ws: tuple[FuseBackend, Workspace],
) -> None:
    """A denied write, create, unlink, rename, mkdir or chmod raises EACCES, and the tree
    is exactly what it was."""
    _, ws = fuse_ws
    ws.intercept(Recorder(deny=frozenset({"README.md", "x.txt", "src/app.py", "d"})))
    before = snapshot_files(ws.backing)
    mode = os.stat(ws.path / "src/app.py").st_mode
    calls = [
        lambda: open(ws.path / "README.md", "ab"),
        lambda: open(ws.path / "README.md", "wb"),
        lambda: (ws.path / "x.txt").write_text("x"),
        lambda: os.unlink(ws.path / "README.md"),
        lambda: os.rename(ws.path / "src/app.py", ws.path / "y.py"),
        lambda: os.mkdir(ws.path / "d"),
        lambda: os.chmod(ws.path / "src/app.py", 0o777),
    ]
    for call in calls:
        with pytest.raises(PermissionError) as info:
            call()
        assert info.value.errno == errno.EACCES
    assert snapshot_files(ws.backing) == before
    assert not (ws.path / "x.txt").exists() and not (ws.path / "d").exists()
    assert os.stat(ws.path / "src/app.py").st_mode == mode


def test_writes_to_the_backing_tree_are_not_asked_and_show_at_once(
    fuse_ws: tuple[FuseBackend, Workspace],
) -> None:
    """The owner's writes to `backing` are not intercepted and the FUSE view shows
    them immediately (no stale attribute cache)."""
    _, ws = fuse_ws
    rec = Recorder()
    ws.intercept(rec)
    assert (ws.path / "README.md").read_bytes() == b"# sample\n"
    (ws.backing / "README.md").write_bytes(b"a much longer readme than before\n")
    assert (ws.path / "README.md").read_bytes() == b"a much longer readme than before\n"
    assert rec.asked == []


def test_fork_of_a_busy_fuse_workspace(fuse_ws: tuple[FuseBackend, Workspace]) -> None:
    """A fork while a process holds a file open through FUSE sees the parent's state; both
    stay usable and isolated."""
    _, ws = fuse_ws
    (ws.path / "dirty.txt").write_text("dirty")
    with open(ws.path / "held.txt", "w") as held:
        held.write("held")
        child = ws.fork("child")
        held.write(" more")
    assert (child.path / "dirty.txt").read_text() == "dirty"
    (child.path / "only-child").write_text("c")
    assert not (ws.path / "only-child").exists()
    assert (ws.path / "held.txt").read_text() == "held more"


def test_close_unmounts_busy_mounts(tmp_path: Path) -> None:
    """close() leaves nothing mounted even while a process has its cwd and an open
    file in a FUSE workspace."""
    state = tmp_path / "state"
    backend = FuseBackend(state)
    ws = backend.base("k", populate_base)
    holder = subprocess.Popen(["sh", "-c", "exec 3<README.md; sleep 30"], cwd=ws.path)
    try:
        backend.close()
    finally:
        holder.kill()
        holder.wait()
    assert mounts_under(state) == []


_CRASH = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from sandboxes import FuseBackend
from tests.sandboxes.conftest import populate_base
b = FuseBackend(Path({state!r}))
ws = b.base("k", populate_base)
child = ws.fork("child")
print(ws.path, flush=True)
time.sleep(60)
"""


def test_start_up_clears_mounts_of_a_killed_process(tmp_path: Path) -> None:
    """FUSE mounts left by a SIGKILLed process are stale; a new backend on the same root
    unmounts them and works."""
    state = tmp_path / "state"
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [sys.executable, "-c", _CRASH.format(root=root, state=str(state))],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    path = Path(proc.stdout.readline().strip())
    proc.kill()
    proc.wait()
    assert any(p.startswith(str(state.resolve()) + "/F") for p in mounts_under(state))
    with pytest.raises(OSError) as info:
        os.stat(path / "README.md")
    assert info.value.errno == errno.ENOTCONN
    backend = FuseBackend(state)
    try:
        assert not any("/F/" in p for p in mounts_under(state))
        ws = backend.base("k", populate_base)
        assert snapshot_files(ws.path) == expected_base()
    finally:
        backend.close()
    assert mounts_under(state) == []


def test_fuse_is_never_chosen_automatically(tmp_path: Path) -> None:
    """choose_backend without a name never picks fuse (it is opt-in)."""
    chosen = sandboxes.choose_backend(tmp_path / "s")
    try:
        assert chosen.name != "fuse"
    finally:
        chosen.close()
    asked = sandboxes.choose_backend(tmp_path / "f", "fuse")
    try:
        assert asked.name == "fuse"
    finally:
        asked.close()
