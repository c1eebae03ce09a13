"""Overlay-specific behaviour: freezing, the busy-parent copy, layer lifetime, crash cleanup."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxes import MODE_FILE, BackendUnavailable, OverlayBackend, choose_backend, snapshot_files
from sandboxes.overlay import SQUASH_AT, OverlayWorkspace
from tests.sandboxes.conftest import expected_base, mounts_under, overlay_only, populate_base

pytestmark = [overlay_only, pytest.mark.root]


@pytest.fixture(params=[False, True], ids=["disk", "tmpfs"])
def overlay(state_root: Path, request: pytest.FixtureRequest) -> Iterator[OverlayBackend]:
    backend = OverlayBackend(state_root, tmpfs=request.param)
    yield backend
    backend.close()


def _base(backend: OverlayBackend) -> OverlayWorkspace:
    ws = backend.base("k", populate_base)
    assert isinstance(ws, OverlayWorkspace)
    return ws


def test_clean_fork_shares_the_parents_layers(overlay: OverlayBackend) -> None:
    """Forking a parent with an empty upper freezes nothing: the child reuses its lowers."""
    ws = _base(overlay)
    child = ws.fork("child")
    assert child.lowers == ws.lowers
    assert list((overlay._state / "L").iterdir()) == []


def test_idle_dirty_fork_freezes_the_upper(overlay: OverlayBackend) -> None:
    """An idle dirty parent's upper becomes a frozen layer shared by parent and child."""
    ws = _base(overlay)
    (ws.path / "x").write_text("x")
    old = ws.lowers
    child = ws.fork("child")
    assert ws.lowers == child.lowers
    assert ws.lowers[1:] == old
    assert list(ws.upper.iterdir()) == []


def test_busy_fork_copies_the_upper_and_leaves_the_parent_mounted(
    overlay: OverlayBackend,
) -> None:
    """With a process inside the parent, the parent keeps its mount and layers; the child
    gets a copy of the upper, whiteouts and opaque directories included."""
    ws = _base(overlay)
    (ws.path / "x").write_text("x")
    os.unlink(ws.path / "README.md")
    subprocess.run(["rm", "-rf", str(ws.path / "docs")], check=True)
    (ws.path / "docs").mkdir()
    old = ws.lowers
    holder = subprocess.Popen(["sleep", "30"], cwd=ws.path)
    try:
        child = ws.fork("child")
        assert ws.lowers == old
        assert child.lowers[1:] == old
        assert (ws.upper / "x").exists()
        expected = expected_base()
        for rel in ("README.md", "docs/guide.md", "docs/deep/more.md"):
            del expected[rel]
        expected["x"] = (MODE_FILE, b"x")
        assert (
            snapshot_files(child.path) == snapshot_files(ws.path) == dict(sorted(expected.items()))
        )
        result = ws.run(["sh", "-c", "echo y > y"], timeout=20)
        assert [c.path for c in result.changes] == ["y"]
    finally:
        holder.kill()
        holder.wait()


def test_frozen_layers_are_deleted_when_unused(overlay: OverlayBackend) -> None:
    """A frozen layer lives while some workspace stacks on it, and no longer."""
    ws = _base(overlay)
    (ws.path / "x").write_text("x")
    child = ws.fork("child")
    (child.path / "y").write_text("y")
    grandchild = child.fork("grandchild")
    layers = overlay._state / "L"
    assert len(list(layers.iterdir())) == 2
    child.discard()
    grandchild.discard()
    assert len(list(layers.iterdir())) == 1
    ws.discard()
    assert list(layers.iterdir()) == []


@pytest.mark.slow
def test_deep_fork_chains_squash_and_stay_correct(overlay: OverlayBackend) -> None:
    """A chain of dirty forks deeper than one page of mount options and than
    SQUASH_AT keeps every file, and the stack stays bounded; discarding each parent
    keeps the layers its child still stacks on."""
    ws = _base(overlay)
    for i in range(SQUASH_AT + 10):
        (ws.path / f"f{i % 7}").write_text(str(i))
        if i % 5 == 0:
            os.unlink(ws.path / f"f{i % 7}")
        parent, ws = ws, ws.fork(f"c{i}")
        if i:
            parent.discard()
    assert len(ws.lowers) <= SQUASH_AT + 1
    last = SQUASH_AT + 9
    files = snapshot_files(ws.path)
    for k in range(7):
        writes = [i for i in range(last + 1) if i % 7 == k]
        i = writes[-1]
        if i % 5 == 0:
            assert f"f{k}" not in files
        else:
            assert files[f"f{k}"] == (MODE_FILE, str(i).encode())


def test_new_backend_cleans_up_after_a_crash(state_root: Path) -> None:
    """Mounts and workspaces left by a process that never closed are removed on start,
    and a completed base layer is reused."""
    crashed = OverlayBackend(state_root)
    ws = crashed.base("k", populate_base)
    (ws.path / "x").write_text("x")
    ws.fork("child")
    ws.run(["true"], timeout=20)
    assert mounts_under(state_root)
    calls = []
    fresh = OverlayBackend(state_root)
    try:
        assert mounts_under(state_root) == []
        assert list((state_root / "U").iterdir()) == []

        def populate(root: Path) -> None:
            calls.append(root)

        again = fresh.base("k", populate)
        assert calls == []
        assert snapshot_files(again.path) == expected_base()
    finally:
        fresh.close()
    assert mounts_under(state_root) == []


def test_choose_backend_prefers_overlay(tmp_path: Path) -> None:
    """choose_backend picks overlay where it works, and honours an explicit choice."""
    picked = choose_backend(tmp_path / "a")
    other = choose_backend(tmp_path / "b", prefer="copy")
    try:
        assert picked.name == "overlay"
        assert other.name == "copy"
    finally:
        picked.close()
        other.close()
    assert OverlayBackend.unavailable_reason() is None
    with pytest.raises(KeyError):
        choose_backend(tmp_path / "c", prefer="nope")
    assert issubclass(BackendUnavailable, Exception)
