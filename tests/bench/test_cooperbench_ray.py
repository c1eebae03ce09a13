"""`--executor ray` against a local Ray cluster the test starts (and stops, by pid)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_pairs_run_as_ray_tasks_on_a_local_cluster(tmp_path: Path) -> None:
    """Units run as Ray tasks on the cluster at --address and stream back into the
    results file; the report counts them like a local run."""
    ray_bin = Path(sys.executable).with_name("ray")
    if not ray_bin.exists():
        pytest.skip("no ray command next to this interpreter")
    port = _free_port()
    # A loopback cluster without token auth (Ray 2.5x enables it by default); a short
    # temp dir, since Ray's socket paths must fit in 107 bytes.
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    temp = Path(f"/tmp/corral-ray-{port}")
    head = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
         f"--temp-dir={temp}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        out = tmp_path / "run"
        argv = [sys.executable, "-m", "coordinator.cli", "bench", "cooperbench", "--task",
                "kvstore", "--pairs", "1-2,3-4", "--settings", "coop", "--executor", "ray",
                "--address", f"127.0.0.1:{port}", "--out", str(out),
                "--json", str(tmp_path / "report.json")]
        deadline = time.monotonic() + 60
        while True:  # the head needs a moment before it takes drivers
            r = subprocess.run(argv, capture_output=True, text=True, env=env)
            if r.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert r.returncode == 0, r.stderr[-2000:]
        report = json.loads((tmp_path / "report.json").read_text())
        assert report["executor"] == "ray"
        row = report["rows"][0]
        assert (row["row"], row["pairs"], row["passed"], row["errors"]) == ("coop/plain", 2, 1, 0)
        lines = (out / "results.jsonl").read_text().splitlines()
        assert len(lines) == 2
        # each worker process ran its units on a task state directory of its own
        assert any(p.name.startswith("ray-") for p in (out / "traces").rglob("ray-*"))
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp, ignore_errors=True)
