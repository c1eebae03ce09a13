"""`corral demo`, the main job, end to end through the command line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from coordinator.cli import app


def test_demo_blocks_rewinds_merges_and_passes_its_tests(tmp_path: Path) -> None:
    """The demo blocks bob's conflicting write with alice's provenance, rewinds bob,
    merges both into root, and root's tests pass there; its trace is plain git."""
    state, report_file = tmp_path / "state", tmp_path / "demo.json"
    result = CliRunner().invoke(app, ["demo", "--state", str(state), "--json", str(report_file)])
    assert result.exit_code == 0, result.output
    report = json.loads(report_file.read_text())
    [reason] = report["blocked"]
    assert "calc.py conflict with changes by scope alice (effect alice#1" in reason
    assert report["rewound"] and report["merged"] == ["alice", "bob"]
    assert report["tests_passed"] is True
    graph = subprocess.run(
        ["git", "--git-dir", str(state / "trace.git"), "log", "--oneline",
         "refs/corral/scopes/root"], capture_output=True, text=True, check=True,
    ).stdout
    assert "scope.merge alice" in graph and "scope.merge bob" in graph
