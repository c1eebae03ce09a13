"""Recording a command's changes follows nothing it left, and is bounded (issue 22).

The coordinator records a command's files as root. These attacks each leave
something for that recording to trip on: a symlinked parent directory leading
into the host (an equality oracle on host files, host files read into the
coordinator's memory, a hang on /proc/kmsg), a directory swapped for a symlink
while the command runs, FIFOs and device nodes, sparse files and many files.
Run through the public API on the overlay and copy backends, and through
`Workspace.run` without a base tree. Needs root and bubblewrap.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import sandboxes
from coordinator import Coordinator, ExecError, ExecOutcome
from sandboxes import Change, Limits, apply_changes
from sandboxes._layers import upper_changes

from .test_escape import _why_skip

pytestmark = [pytest.mark.skipif(_why_skip() is not None, reason=str(_why_skip())),
              pytest.mark.root, pytest.mark.slow]

GUESS = b"GUESS-4f1c\n"
BACKENDS = pytest.mark.parametrize("backend", ["overlay", "copy"])


@pytest.fixture
def host_file(tmp_path: Path) -> Path:
    """A host file outside every workspace, holding exactly GUESS."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "f").write_bytes(GUESS)
    return host / "f"


@pytest.fixture
async def coord(sample_repo: Path, tmp_path: Path, backend: str) -> AsyncIterator[Coordinator]:
    async with Coordinator.open(tmp_path / "state", sample_repo, backend=backend) as c:
        yield c


async def sh(coord: Coordinator, script: str, timeout: float = 60) -> ExecOutcome:
    s = coord.scopes.get("a") or await coord.root.fork("a")
    r = await asyncio.wait_for(s.exec(["sh", "-c", script], timeout=timeout), timeout + 30)
    assert isinstance(r.outcome, ExecOutcome), r.effect
    assert r.outcome.returncode == 0, coord.trace.blob(r.outcome.stderr)
    return r.outcome


def vm(field: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def reset_peak_rss() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS


@BACKENDS
@pytest.mark.parametrize("guess", ["right", "wrong"])
async def test_symlinked_parent_is_no_oracle_on_host_files(
    coord: Coordinator, host_file: Path, guess: str
) -> None:
    """`ln -s / d`, then `rm d; mkdir -p d/<host dir>; echo GUESS > d/<host>/f`:
    the file is a new file whether or not its content equals the host file's
    (the old recorder compared it with the host file through the old symlink,
    and dropped a right guess)."""
    rel = f"d{host_file}"
    content = GUESS if guess == "right" else b"wrong\n"
    await sh(coord, "ln -s / d")
    out = await sh(coord, f"rm d && mkdir -p {os.path.dirname(rel)} && "
                          f"printf '{content.decode().strip()}\\n' > {rel}")
    changes = {c.path: c.blob for c in out.changes}
    assert rel in changes, changes
    assert coord.trace.blob(changes[rel] or "") == content
    assert "d" in changes and changes["d"] is None  # the old symlink is deleted
    assert (coord.scopes["a"].path / rel).read_bytes() == content


@BACKENDS
async def test_host_file_behind_old_symlink_is_never_read(
    coord: Coordinator, tmp_path: Path
) -> None:
    """A 600 MB host file behind the old symlink: writing a file at its path in
    the sandbox does not make the coordinator read it (its peak RSS stays)."""
    big = tmp_path / "big" / "f"
    big.parent.mkdir()
    with open(big, "wb") as f:  # real blocks: page cache, not a sparse hole
        chunk = b"h" * (1 << 20)
        for _ in range(600):
            f.write(chunk)
    await sh(coord, "ln -s / d")
    reset_peak_rss()
    before = vm("VmRSS")
    out = await sh(coord, f"rm d && mkdir -p d{big.parent} && printf x > d{big}")
    assert vm("VmHWM") - before < 200 << 20
    assert f"d{big}" in {c.path for c in out.changes}


@BACKENDS
@pytest.mark.parametrize("target", ["/proc", "/dev"])
@pytest.mark.timeout(120)
async def test_symlink_to_proc_or_dev_does_not_hang(coord: Coordinator, target: str) -> None:
    """d -> /proc (then d/kmsg written) or d -> /dev (d/zero, d/kmsg): recorded
    as new files at once; the old recorder read /proc/kmsg as root and hung."""
    await sh(coord, f"ln -s {target} d")
    out = await sh(coord, "rm d && mkdir d && echo x > d/kmsg && echo y > d/zero", timeout=30)
    got = {c.path: coord.trace.blob(c.blob) for c in out.changes if c.blob}
    assert got == {"d/kmsg": b"x\n", "d/zero": b"y\n"}


@BACKENDS
@pytest.mark.timeout(180)
async def test_symlink_swapped_while_running(coord: Coordinator, host_file: Path) -> None:
    """A background loop swaps `d` between a directory and a symlink to / while
    the command writes; after it is stopped and d is left a directory holding
    the guess, the guess is recorded; nothing of the host is."""
    (host_file.parent / "secret").write_text("host-only-secret")
    rel = f"d{host_file}"
    # The loop stops itself at a flag, between iterations: a `kill` would leave the
    # step it was in (an rm -rf d, say) running on past the write below.
    loop = (f"while [ ! -e stop ]; do rm -rf d; ln -s / d; rm d; mkdir -p d{host_file.parent}; "
            f"printf x > {rel}; done")
    await sh(coord, "ln -s / d")
    write = f"printf '{GUESS.decode().strip()}\\n' > {rel}"
    out = await sh(coord, f"({loop}) & pid=$!; sleep 1; touch stop; wait $pid; rm stop; "
                          f"rm -rf d; mkdir -p d{host_file.parent}; {write}")
    changes = {c.path: c.blob for c in out.changes}
    assert coord.trace.blob(changes[rel] or "") == GUESS
    assert not any(p.endswith("secret") for p in changes)


@BACKENDS
@pytest.mark.timeout(180)
async def test_symlink_swapped_as_the_command_exits(coord: Coordinator, host_file: Path) -> None:
    """The swapping loop still runs when the command's shell exits: whatever
    state is recorded, no host file's name or content is in it."""
    (host_file.parent / "secret").write_text("host-only-secret")
    loop = (f"while :; do rm -rf d; ln -s / d; rm d; mkdir -p d{host_file.parent}; "
            f"printf x > d{host_file}; done")
    await sh(coord, "ln -s / d")
    for _ in range(3):
        out = await sh(coord, f"({loop}) >/dev/null 2>&1 & sleep 0.3; exit 0")
        for c in out.changes:
            assert not c.path.endswith("secret"), c.path
            if c.blob:
                assert coord.trace.blob(c.blob) in (b"x", b"/"), c.path


@BACKENDS
@pytest.mark.timeout(120)
async def test_fifo_is_not_recorded(coord: Coordinator) -> None:
    """A FIFO the command leaves (nobody writing it) is no change: never opened
    (a FIFO's open would block the coordinator)."""
    out = await sh(coord, "mkfifo p && echo ok > ok")
    assert {c.path for c in out.changes} == {"ok"}


@BACKENDS
@pytest.mark.timeout(120)
async def test_sparse_files_past_changed_bytes_are_refused(coord: Coordinator) -> None:
    """`truncate -s 1000M s1 s2 s3 s4` costs the command nothing on disk; recording
    it would take 4 GB: the exec fails naming changed_bytes, nothing is applied,
    and the coordinator's peak RSS does not grow by the apparent size."""
    a = await coord.root.fork("a")
    reset_peak_rss()
    before = vm("VmRSS")
    with pytest.raises(ExecError, match="changed_bytes"):
        await a.exec(["sh", "-c", "truncate -s 1000M s1 s2 s3 s4 && echo ok > ok"], timeout=30)
    assert vm("VmHWM") - before < 200 << 20
    assert not (a.path / "s1").exists() and not (a.path / "ok").exists()
    r = await a.exec(["sh", "-c", "echo ok > ok"], timeout=30)  # the scope still works
    assert isinstance(r.outcome, ExecOutcome) and await a.read("ok") == b"ok\n"


@BACKENDS
@pytest.mark.timeout(120)
async def test_one_sparse_file_past_a_lowered_changed_bytes(coord: Coordinator) -> None:
    """With changed_bytes=64M, one 600 MB sparse file (under the default ceiling
    alone) is refused before it is read: no 600 MB in the coordinator."""
    coord.runtime.with_settings(
        exec_limits=dataclasses.replace(coord.settings.exec_limits, changed_bytes=64 << 20))
    a = await coord.root.fork("a")
    reset_peak_rss()
    before = vm("VmRSS")
    with pytest.raises(ExecError, match=r"changed_bytes.*--limit changed_bytes="):
        await a.exec(["sh", "-c", "truncate -s 600M s1"], timeout=30)
    assert vm("VmHWM") - before < 200 << 20
    assert not (a.path / "s1").exists()


@BACKENDS
@pytest.mark.timeout(180)
async def test_too_many_files_past_changed_files_are_refused(coord: Coordinator) -> None:
    """With changed_files=1000, a command making 1500 files fails naming
    changed_files, and none of them is applied."""
    coord.runtime.with_settings(
        exec_limits=dataclasses.replace(coord.settings.exec_limits, changed_files=1000))
    a = await coord.root.fork("a")
    with pytest.raises(ExecError, match="changed_files"):
        await a.exec(["sh", "-c", "mkdir m && cd m && seq 1500 | xargs touch"], timeout=60)
    assert not (a.path / "m").exists()
    r = await a.exec(["sh", "-c", "mkdir m && cd m && seq 900 | xargs touch"], timeout=60)
    assert isinstance(r.outcome, ExecOutcome) and len(r.outcome.changes) == 900


# ---- the sandboxes package alone: no base tree, the workspace read without following


def _populate(root: Path) -> None:
    (root / "README.md").write_text("hi\n")


@pytest.fixture(params=["overlay", "copy"])
def workspace(tmp_path: Path, request: pytest.FixtureRequest) -> sandboxes.Workspace:
    cls = sandboxes.backends[request.param]
    backend = cls(tmp_path / "sb")
    request.addfinalizer(backend.close)
    return backend.base("k", _populate)


def _run(ws: sandboxes.Workspace, script: str, **kw: object) -> tuple[Change, ...]:
    r = ws.run(["sh", "-c", script], timeout=60, **kw)  # type: ignore[arg-type]
    assert r.returncode == 0, r.stderr
    apply_changes(ws.backing, r.changes)
    return r.changes


def test_workspace_run_without_base_is_no_oracle(workspace: sandboxes.Workspace,
                                                  host_file: Path) -> None:
    """Workspace.run with no base tree: the right guess is a new file, read from
    the workspace without following its symlink `d`."""
    _run(workspace, "ln -s / d")
    changes = _run(workspace, f"rm d && mkdir -p d{host_file.parent} && "
                              f"printf '{GUESS.decode().strip()}\\n' > d{host_file}")
    assert Change(f"d{host_file}", GUESS) in changes


def test_workspace_run_touch_is_still_no_change(workspace: sandboxes.Workspace) -> None:
    """A `touch` of an unchanged file, a rewrite with the same bytes and an
    unchanged symlink copied up stay no change."""
    _run(workspace, "ln -s README.md l")
    assert _run(workspace, "touch README.md && printf 'hi\\n' > README.md && "
                           "chown -h 0:0 l 2>/dev/null; true") == ()


def test_device_node_and_fifo_in_an_upper_are_never_opened(tmp_path: Path) -> None:
    """An upper holding a FIFO, a char device with /dev/kmsg's numbers and a
    block device (made by root here: a command cannot) records only the file."""
    upper, lower = tmp_path / "u", tmp_path / "l"
    upper.mkdir()
    lower.mkdir()
    os.mkfifo(upper / "fifo")
    os.mknod(upper / "kmsg", stat.S_IFCHR | 0o600, os.makedev(1, 11))
    os.mknod(upper / "blk", stat.S_IFBLK | 0o600, os.makedev(7, 0))
    (upper / "f").write_bytes(b"x")
    assert upper_changes(upper, lower) == [Change("f", b"x")]


def test_whiteout_under_a_symlinked_parent_names_no_host_path(tmp_path: Path) -> None:
    """A whiteout below an opaque directory that replaced a symlink to the host
    deletes only the symlink: the host directory's names are not listed."""
    host = tmp_path / "hostdir"
    host.mkdir()
    (host / "private-name").write_text("p")
    upper, lower = tmp_path / "u", tmp_path / "l"
    upper.mkdir()
    lower.mkdir()
    os.symlink(tmp_path, lower / "d")
    (upper / "d").mkdir()
    os.mknod(upper / "d" / "hostdir", stat.S_IFCHR, os.makedev(0, 0))
    assert upper_changes(upper, lower) == [Change("d", None)]


def test_limits_parse_the_recording_ceilings() -> None:
    """`--limit changed_bytes=2G` and `changed_files=...` parse like the others."""
    got = sandboxes.parse_limits(["changed_bytes=2G", "changed_files=500000"])
    assert (got.changed_bytes, got.changed_files) == (2 << 30, 500_000)
    assert Limits().changed_bytes == 1 << 30 and Limits().changed_files == 100_000
