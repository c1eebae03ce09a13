"""The host-side environment of the stock-git workbench."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.cooperbench import Environment


def test_lab_runs_tests_offline() -> None:
    """Where namespaces work, the test command has no network interface but loopback."""
    env = Environment.current().env(Path("/tmp"))
    if env.get("CORRAL_BENCH_OFFLINE") != "1":
        pytest.skip("unshare --net is not available here")
    r = subprocess.run(["unshare", "--net", "--", "cat", "/proc/net/dev"], capture_output=True,
                       text=True)
    assert [ln.split(":")[0].strip() for ln in r.stdout.splitlines()[2:]] == ["lo"]
