"""`corral demo`, the main job, end to end through the command line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coordinator.cli import app


def test_demo_blocks_rewinds_merges_and_passes_its_tests(tmp_path: Path) -> None:
    """The demo blocks bob's conflicting write with alice's provenance, rewinds bob,
    merges both into root, and root's tests pass there; its trace is plain git."""
    state, report_file = tmp_path / "state", tmp_path / "demo.json"
    result = CliRunner().invoke(
        app, ["demo", "--state", str(state), "--json", "-o", str(report_file)])
    assert result.exit_code == 0, result.output
    report = json.loads(report_file.read_text())
    # --json prints the same report on stdout, alone (the progress went to stderr)
    assert json.loads(result.stdout) == report
    [reason] = report["blocked"]
    assert "calc.py conflict with changes by scope alice (effect alice#1" in reason
    assert report["rewound"] and report["merged"] == ["alice", "bob"]
    assert report["tests_passed"] is True
    graph = subprocess.run(
        ["git", "--git-dir", str(state / "trace.git"), "log", "--oneline",
         "refs/corral/scopes/root"], capture_output=True, text=True, check=True,
    ).stdout
    assert "scope.merge alice" in graph and "scope.merge bob" in graph


@pytest.mark.slow
def test_demo_still_takes_the_old_json_file_form(tmp_path: Path) -> None:
    """`--json FILE` (the form before `-o/--json-out`) still writes the report,
    with a note on stderr; a stray FILE without --json is refused before any work."""
    report_file = tmp_path / "old.json"
    result = CliRunner().invoke(app, ["demo", "--state", str(tmp_path / "s"),
                                      "--json", str(report_file)])
    assert result.exit_code == 0, result.output
    assert json.loads(report_file.read_text())["tests_passed"] is True
    assert "old form" in result.stderr and "-o" in result.stderr
    stray = CliRunner().invoke(app, ["demo", "--state", str(tmp_path / "t"), "x.json"])
    assert stray.exit_code == 2 and "--json-out" in stray.stderr
    assert not (tmp_path / "t").exists()
