"""Behaviour every sandbox backend must show (run against each one)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from sandboxes import (
    MODE_EXEC,
    MODE_FILE,
    MODE_LINK,
    Backend,
    Change,
    SandboxError,
    Workspace,
    apply_changes,
    snapshot_files,
)
from tests.sandboxes.conftest import expected_base, mounts_under, populate_base

SH = ["sh", "-c"]


def test_base_holds_the_populated_files(root_ws: Workspace) -> None:
    """A base workspace shows exactly what populate wrote, modes and symlinks included."""
    assert snapshot_files(root_ws.path) == expected_base()


def test_base_is_populated_once_per_key(live_backend: Backend) -> None:
    """A second workspace on the same key reuses the layer instead of populating again."""
    calls = []

    def populate(root: Path) -> None:
        calls.append(root)
        populate_base(root)

    a = live_backend.base("k", populate)
    b = live_backend.base("k", populate, name="second")
    assert len(calls) == 1
    assert snapshot_files(a.path) == snapshot_files(b.path) == expected_base()


def test_half_built_base_is_rebuilt(live_backend: Backend) -> None:
    """A populate that failed midway leaves no base behind: the next call builds it afresh."""

    def broken(root: Path) -> None:
        (root / "partial").write_text("x")
        raise RuntimeError("populate crashed")

    with pytest.raises(RuntimeError):
        live_backend.base("k", broken)
    ws = live_backend.base("k", populate_base)
    assert snapshot_files(ws.path) == expected_base()


def test_fork_isolation_both_ways(root_ws: Workspace) -> None:
    """After a fork, writes in the parent and in the child are invisible to the other."""
    child = root_ws.fork("child")
    (root_ws.path / "parent.txt").write_text("p")
    (child.path / "child.txt").write_text("c")
    (child.path / "README.md").write_text("changed by child")
    os.unlink(root_ws.path / "src/util.py")
    assert not (child.path / "parent.txt").exists()
    assert not (root_ws.path / "child.txt").exists()
    assert (root_ws.path / "README.md").read_bytes() == b"# sample\n"
    assert (child.path / "src/util.py").exists()


def test_siblings_are_isolated(root_ws: Workspace) -> None:
    """Two children of one parent do not see each other's writes."""
    (root_ws.path / "shared.txt").write_text("before fork")
    a, b = root_ws.fork("a"), root_ws.fork("b")
    (a.path / "shared.txt").write_text("a")
    (b.path / "shared.txt").write_text("b")
    assert (a.path / "shared.txt").read_text() == "a"
    assert (b.path / "shared.txt").read_text() == "b"
    assert (root_ws.path / "shared.txt").read_text() == "before fork"


def _dirty(ws: Workspace) -> dict[str, tuple[int, bytes]]:
    """Write, delete, replace a directory and add a symlink in `ws`; returns the
    expected files."""
    (ws.path / "new.txt").write_text("new")
    (ws.path / "src/app.py").write_text("edited")
    os.unlink(ws.path / "README.md")
    subprocess.run(["rm", "-rf", str(ws.path / "docs")], check=True)
    (ws.path / "docs").mkdir()
    (ws.path / "docs/fresh.md").write_text("fresh")
    os.symlink("new.txt", ws.path / "new-link")
    files = expected_base()
    for rel in ("README.md", "docs/guide.md", "docs/deep/more.md"):
        del files[rel]
    files.update(
        {
            "new.txt": (MODE_FILE, b"new"),
            "src/app.py": (MODE_FILE, b"edited"),
            "docs/fresh.md": (MODE_FILE, b"fresh"),
            "new-link": (MODE_LINK, b"new.txt"),
        }
    )
    return dict(sorted(files.items()))


def test_fork_of_dirty_parent_sees_its_state(root_ws: Workspace) -> None:
    """A child of a parent with writes, deletes and a replaced directory sees all of
    them, and the parent keeps working after the fork."""
    expected = _dirty(root_ws)
    child = root_ws.fork("child")
    assert snapshot_files(child.path) == expected
    assert snapshot_files(root_ws.path) == expected
    (root_ws.path / "after.txt").write_text("after")
    grandchild = child.fork("grandchild")
    assert snapshot_files(grandchild.path) == expected
    assert not (child.path / "after.txt").exists()


def test_fork_while_a_process_uses_the_parent(root_ws: Workspace) -> None:
    """Fork works while a process has its cwd and an open file in the parent: the
    child sees the parent's state, the process and the parent keep working."""
    expected = _dirty(root_ws)
    holder = subprocess.Popen(
        ["sh", "-c", "exec 3<new.txt; echo open; read line; cat <&3; echo done > holder.txt"],
        cwd=root_ws.path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"open\n"  # it holds it
        child = root_ws.fork("child")
        assert snapshot_files(child.path) == expected
        (root_ws.path / "parent-after.txt").write_text("still writable")
        out, _ = holder.communicate(b"go\n", timeout=10)
    finally:
        holder.kill()
        holder.wait()
    assert out == b"new"
    assert (root_ws.path / "holder.txt").read_text() == "done\n"
    assert not (child.path / "holder.txt").exists()
    assert not (child.path / "parent-after.txt").exists()
    (child.path / "child.txt").write_text("c")
    assert not (root_ws.path / "child.txt").exists()


def test_run_reports_writes_deletes_links_modes_and_replaced_dirs(root_ws: Workspace) -> None:
    """run() reports new and edited files, deleted files, symlinks, exec bits and
    every file under a replaced directory as deleted; directories are no change."""
    script = (
        "echo hi > new.txt && printf edited > src/app.py && rm README.md"
        " && ln -s new.txt link && chmod +x src/util.py && chmod -x bin/run.sh"
        " && rm -rf docs && mkdir docs && echo x > docs/new && mkdir -p empty/dir"
        " && touch src/app.py"
    )
    result = root_ws.run([*SH, script], timeout=20)
    assert result.returncode == 0, result.stderr
    assert not result.timed_out
    util = b"def helper():\n    return 1\n"
    run_sh = b"#!/bin/sh\necho run\n"
    assert result.changes == (
        Change("README.md", None),
        Change("bin/run.sh", run_sh, MODE_FILE),
        Change("docs/deep/more.md", None),
        Change("docs/guide.md", None),
        Change("docs/new", b"x\n", MODE_FILE),
        Change("link", b"new.txt", MODE_LINK),
        Change("new.txt", b"hi\n", MODE_FILE),
        Change("src/app.py", b"edited", MODE_FILE),
        Change("src/util.py", util, MODE_EXEC),
    )


def test_run_does_not_report_untouched_content(root_ws: Workspace) -> None:
    """A file rewritten with the same bytes and mode, or only touched, is no change."""
    result = root_ws.run(
        [*SH, "cp README.md /tmp/r && cat /tmp/r > README.md && touch docs/guide.md"], timeout=20
    )
    assert result.returncode == 0, result.stderr
    assert result.changes == ()


def test_run_leaves_the_workspace_unchanged(root_ws: Workspace) -> None:
    """The workspace is byte-for-byte the same after a run that changed everything."""
    _dirty(root_ws)
    before = snapshot_files(root_ws.path)
    result = root_ws.run(
        [*SH, "rm -rf * && echo x > y && mkdir -p a/b && echo z > a/b/c"], timeout=20
    )
    assert result.returncode == 0, result.stderr
    assert snapshot_files(root_ws.path) == before
    assert {c.path for c in result.changes if c.data is not None} == {"y", "a/b/c"}


def test_applying_run_changes_reproduces_the_run(root_ws: Workspace, tmp_path: Path) -> None:
    """apply_changes(run changes) on a copy of the workspace gives the tree the command made."""
    _dirty(root_ws)
    script = (
        "rm -rf src && echo f > src && mkdir -p docs/fresh.md.d && rm docs/fresh.md"
        " && echo n > docs/fresh.md.d/x && ln -sf src new-link && chmod +x new.txt"
    )
    result = root_ws.run([*SH, script + " && tar -cf /tmp/t.tar . && cat /tmp/t.tar"], timeout=20)
    assert result.returncode == 0, result.stderr
    direct = tmp_path / "direct"
    direct.mkdir()
    subprocess.run(["tar", "-xf", "-", "-C", str(direct)], input=result.stdout, check=True)
    replay = tmp_path / "replay"
    subprocess.run(["cp", "-a", f"{root_ws.path}/.", str(replay)], check=True)
    apply_changes(replay, result.changes)
    assert snapshot_files(replay) == snapshot_files(direct)


def test_run_cannot_write_outside_the_repo(root_ws: Workspace, tmp_path: Path) -> None:
    """Writes to /etc, /root and the sandbox root fail; the repo itself is writable."""
    outside = tmp_path / "outside.txt"
    targets = f"/etc/corral-x /root/corral-x /corral-x {outside}"
    script = f"for p in {targets}; do echo x > $p && echo WROTE $p; done; echo ok > inside"
    result = root_ws.run([*SH, script], timeout=20)
    assert b"WROTE" not in result.stdout, result.stdout
    assert not Path("/etc/corral-x").exists() and not Path("/root/corral-x").exists()
    assert not outside.exists()
    assert result.changes == (Change("inside", b"ok\n", MODE_FILE),)


def test_run_has_a_private_tmp(root_ws: Workspace, tmp_path: Path) -> None:
    """The command's /tmp shows nothing of the host's but the Python environment
    and PATH tools that live there (bound read-only), and its writes vanish."""
    import sys

    marker = Path("/tmp") / f"corral-host-marker-{os.getpid()}"
    marker.write_text("host")
    try:
        result = root_ws.run(
            [*SH, f"ls -A /tmp; test ! -e {marker} && echo > /tmp/mine"], timeout=20
        )
    finally:
        marker.unlink()
    assert result.returncode == 0, result.stderr
    tools = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             *os.environ.get("PATH", "").split(os.pathsep)]
    allowed = {Path(t).resolve().relative_to("/tmp").parts[0] for t in tools
               if t and Path(t).resolve().is_relative_to("/tmp")}
    assert set(result.stdout.decode().split()) <= allowed
    assert not Path("/tmp/mine").exists()
    assert result.changes == ()


def _connect_script(port: int) -> list[str]:
    code = (
        "import socket, sys\n"
        "s = socket.socket()\n"
        "s.settimeout(2)\n"
        "try:\n"
        f"    s.connect(('127.0.0.1', {port})); print('connected')\n"
        "except OSError as e:\n"
        "    print('refused', e); sys.exit(3)\n"
    )
    return ["python3", "-c", code]


def test_run_has_no_network_unless_asked(root_ws: Workspace) -> None:
    """A loopback server on the host is unreachable from a command, reachable with network=True."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        closed = root_ws.run(_connect_script(port), timeout=20)
        assert closed.returncode == 3, closed.stdout + closed.stderr
        opened = root_ws.run(_connect_script(port), timeout=20, network=True)
        assert opened.returncode == 0, opened.stdout + opened.stderr


def test_run_gets_exactly_the_given_env(root_ws: Workspace) -> None:
    """The environment is what the caller passed (plus PWD, set by bubblewrap), nothing
    inherited from the coordinator."""
    env = {"PATH": os.environ["PATH"], "CORRAL_X": "42"}
    result = root_ws.run(["env"], timeout=20, env=env)
    seen = set(result.stdout.decode().split())
    assert seen == {f"{k}={v}" for k, v in env.items()} | {"PWD=/workspace/repo"}


def test_run_timeout_kills_the_command(root_ws: Workspace) -> None:
    """A command past its time limit is killed quickly and reported as timed out."""
    start = time.monotonic()
    result = root_ws.run([*SH, "echo partial > p; sleep 30"], timeout=0.5)
    assert time.monotonic() - start < 5
    assert result.timed_out
    assert result.returncode < 0
    assert Change("p", b"partial\n", MODE_FILE) in result.changes


def test_discard_is_idempotent(root_ws: Workspace) -> None:
    """discard() twice is fine; the files are gone and the workspace refuses further use."""
    child = root_ws.fork("child")
    (child.path / "x").write_text("x")
    child.discard()
    child.discard()
    assert not (child.path / "x").exists()
    with pytest.raises(SandboxError):
        child.fork("grandchild")
    assert snapshot_files(root_ws.path) == expected_base()


def test_layer_bytes_counts_own_writes(root_ws: Workspace) -> None:
    """A workspace's own layer grows with what was written into it."""
    before = root_ws.layer_bytes
    (root_ws.path / "big").write_bytes(b"x" * 100_000)
    assert root_ws.layer_bytes >= before + 100_000


def test_close_leaves_nothing_mounted(live_backend: Backend, state_root: Path) -> None:
    """close() discards everything, also a busy workspace, and is idempotent."""
    ws = live_backend.base("k", populate_base)
    (ws.path / "x").write_text("x")
    child = ws.fork("child")
    holder = subprocess.Popen(["sleep", "30"], cwd=child.path)
    try:
        live_backend.close()
        live_backend.close()
    finally:
        holder.kill()
        holder.wait()
    assert mounts_under(state_root) == []
    with pytest.raises(SandboxError):
        live_backend.base("k", populate_base)


def test_close_after_an_exception_leaves_nothing_mounted(
    live_backend: Backend, state_root: Path
) -> None:
    """A failure mid-way (here a bad argv) does not stop close() from cleaning up."""
    ws = live_backend.base("k", populate_base)
    with pytest.raises(ValueError):
        ws.run([], timeout=5)
    live_backend.close()
    assert mounts_under(state_root) == []


def test_declared_toolchain_is_visible_whole_and_read_only(root_ws: Workspace) -> None:
    """A toolchain directory (a virtualenv made under /tmp, say) is shown whole and
    read-only with its bin/ first on PATH; an undeclared one on the caller's PATH
    stays invisible."""
    import tempfile

    tools = Path(tempfile.mkdtemp(prefix="corral-tools-", dir="/tmp"))
    (tools / "bin").mkdir()
    (tools / "bin" / "hello-corral").write_text("#!/bin/sh\necho hello\n")
    (tools / "bin" / "hello-corral").chmod(0o755)
    (tools / "lib").mkdir()
    (tools / "lib" / "pkg.txt").write_text("package data")
    tools.chmod(0o755)
    other = Path(tempfile.mkdtemp(prefix="corral-undeclared-", dir="/tmp"))
    other.chmod(0o755)
    try:
        r = root_ws.run(["sh", "-c", f"hello-corral && cat {tools}/lib/pkg.txt && "
                         f"(test -e {other} || echo hidden)"], timeout=30, toolchain=[tools])
        assert (r.returncode, r.stdout) == (0, b"hello\npackage datahidden\n"), r.stderr
        r = root_ws.run(["sh", "-c", f"echo x > {tools}/new"], timeout=30, toolchain=[tools])
        assert r.returncode != 0  # read-only
        assert not (tools / "new").exists()
    finally:
        shutil.rmtree(tools)
        shutil.rmtree(other)
