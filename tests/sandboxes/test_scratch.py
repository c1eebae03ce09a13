"""Run scratch bases left by a killed process are swept once their owner is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandboxes import OverlayBackend
from sandboxes._scratch import exec_base
from tests.sandboxes.conftest import mounts_under, overlay_only, populate_base

pytestmark = overlay_only

_CRASHER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from sandboxes import OverlayBackend
    from tests.sandboxes.conftest import populate_base
    backend = OverlayBackend(Path(sys.argv[1]))
    ws = backend.base("k", populate_base)
    ws.run(["true"], timeout=20)
    print("ran", flush=True)
    os.kill(os.getpid(), 9)
    """
)


def test_a_killed_owners_scratch_base_is_swept_by_the_next_backend(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("scratch bases are tmpfs mounts only when running as root")
    crashed_root = tmp_path / "crashed"
    proc = subprocess.run(
        [sys.executable, "-c", _CRASHER, str(crashed_root)],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2],
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "ran" in proc.stdout
    # the base the killed process mounted outlives it, owned by a root that still exists
    leftover = exec_base(crashed_root.resolve())
    # (exec_base just re-used it; forget it in this process so the sweep may take it)
    from sandboxes import _scratch

    _scratch._bases.discard(leftover)
    assert os.path.ismount(leftover)
    assert (leftover / ".root").read_text() == str(crashed_root.resolve())

    kept_root = tmp_path / "kept"
    kept = OverlayBackend(kept_root)
    kept.base("k", populate_base).run(["true"], timeout=20)
    kept.close()
    # its owner still exists: a new backend elsewhere leaves it for that owner
    assert os.path.ismount(leftover)

    # the owner goes away, as a deleted temporary state directory does
    for point in mounts_under(crashed_root):
        subprocess.run(["umount", "-l", point], check=True)
    subprocess.run(["rm", "-rf", str(crashed_root)], check=True)
    fresh = OverlayBackend(tmp_path / "fresh")
    try:
        fresh.base("k", populate_base).run(["true"], timeout=20)
    finally:
        fresh.close()
    assert not leftover.exists()
    assert mounts_under(leftover) == []
