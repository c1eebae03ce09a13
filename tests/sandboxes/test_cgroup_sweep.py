"""A command's cgroup left by a process killed mid-command is removed by the next
process that opens one; a live process's group is left alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sandboxes import _cgroup
from sandboxes._cgroup import CommandGroup, _parents


def test_groups_of_gone_processes_are_swept(monkeypatch: pytest.MonkeyPatch) -> None:
    parents = _parents()
    if parents is None:
        pytest.skip("no writable memory+pids cgroup here (needs root and cgroup access)")
    gone = 4194305  # above the largest pid_max: never a live process
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    orphans = [p / f"corral-exec-{gone}-7" for p in parents]
    kept = [p / f"corral-exec-{live.pid}-7" for p in parents]
    try:
        for d in orphans + kept:
            d.mkdir()
        monkeypatch.setattr(_cgroup, "_swept", False)
        group = CommandGroup.open(64 << 20, 64)
        assert group is not None
        group.close()
        assert not any(d.exists() for d in orphans)
        assert all(d.exists() for d in kept)  # its owner may still close it
    finally:
        live.kill()
        live.wait()
        for d in orphans + kept:
            if d.exists():
                d.rmdir()
