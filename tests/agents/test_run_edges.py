"""`corral run`'s rough edges: a dirty tree is named, input is checked before any
progress bar, --model per agent, --squash, and unmerged work exported as a branch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coordinator.cli import app
from tests.agents._helpers import CALC, by_step, call
from tests.conftest import git, make_repo

MUL = CALC + "\n\ndef mul(a, b):\n    return a * b\n"
POW = CALC + "\n\ndef power(a, b):\n    return a ** b\n"


def _scripts() -> dict:
    return {
        "a1": by_step([call("write_file", path="calc.py", content=MUL),
                       call("finish", summary="mul")]),
        "a2": by_step([call("write_file", path="calc.py", content=POW),
                       call("finish", summary="power")]),
    }


@pytest.mark.slow
def test_models_per_agent_squash_and_export_of_unmerged_work(tmp_path: Path, served):
    """Each agent gets its own scripted model; without a guard both edit calc.py, so
    agent-2's merge conflicts: its work is left as corral/<id>-agent-2; with --squash
    each branch is one commit over HEAD holding the agent's tree."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    head = git(repo, "rev-parse", "HEAD").strip()
    url = served(_scripts())
    result = CliRunner().invoke(app, [
        "run", "--repo", str(repo), "--task", "add mul", "--task", "add power",
        "--model", "openai/a1", "--model", "openai/a2", "--base-url", url,
        "--supervisor", "none", "--squash", "--state", str(tmp_path / "s"), "--json"])
    assert result.stdout.startswith("{"), (result.output, result.exception)
    report = json.loads(result.stdout)
    assert [m["outcome"] for m in report["merges"]] == ["merged", "conflict"]
    branch, export = report["branch"], report["exports"]["agent-2"]
    assert export == branch + "-agent-2"
    assert git(repo, "show", f"{branch}:calc.py") == MUL
    assert git(repo, "show", f"{export}:calc.py") == POW
    for b in (branch, export):
        assert git(repo, "rev-list", "--count", f"{head}..{b}").strip() == "1"
        assert git(repo, "rev-parse", f"{b}^").strip() == head
    assert result.exit_code == 1  # a conflict is not a clean run


@pytest.mark.slow
def test_dirty_tree_is_named_and_bad_input_fails_before_progress(tmp_path: Path, served):
    """Uncommitted changes get a note (in the output and the JSON report); a model list
    that does not match the tasks fails with one line and no progress bar."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    (repo / "calc.py").write_text(CALC + "# local edit\n")
    url = served(_scripts())
    result = CliRunner().invoke(app, [
        "run", "--repo", str(repo), "--task", "add mul", "--model", "openai/a1",
        "--base-url", url, "--state", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    assert "uncommitted changes to 1 file(s)" in result.output
    assert "uncommitted" in json.loads(result.stdout)["notes"][0]
    bad = CliRunner().invoke(app, [
        "run", "--repo", str(repo), "--task", "a", "--task", "b", "--task", "c",
        "--model", "openai/a1", "--model", "openai/a2", "--base-url", url])
    assert bad.exit_code == 1
    assert "give --model once, or once per --task (3 tasks, 2 models)" in bad.output
    assert "agent-1" not in bad.output and "Traceback" not in bad.output
