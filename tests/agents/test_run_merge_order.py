"""`corral run --merge-order`: the finished agents' branches merge into the result fewest
conflicts first (the default) or in the --task order, and the report says which."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from coordinator.cli import app
from tests.agents._helpers import CALC, by_step, call
from tests.conftest import git, make_repo

MUL = CALC + "\n\ndef mul(a, b):\n    return a * b\n"
POW = CALC + "\n\ndef power(a, b):\n    return a ** b\n"
DOC = "# calc\n\nadd, sub.\n"


def _scripts() -> dict:
    """a1 adds mul to calc.py, a2 power at the same place (a clash), a3 edits README.md."""
    return {
        "a1": by_step([call("write_file", path="calc.py", content=MUL),
                       call("finish", summary="mul")]),
        "a2": by_step([call("write_file", path="calc.py", content=POW),
                       call("finish", summary="power")]),
        "a3": by_step([call("write_file", path="README.md", content=DOC),
                       call("finish", summary="doc")]),
    }


def _run(repo: Path, url: str, state: Path, *order: str) -> dict:
    result = CliRunner().invoke(app, [
        "run", "--repo", str(repo), "--task", "add mul", "--task", "add power",
        "--task", "document", "--model", "openai/a1", "--model", "openai/a2",
        "--model", "openai/a3", "--base-url", url, "--supervisor", "none",
        "--state", str(state), "--json", *order])
    assert result.stdout.startswith("{"), (result.output, result.exception)
    assert result.exit_code == 1  # a conflict is not a clean run
    return json.loads(result.stdout)


def test_fewest_conflicts_merges_past_an_early_conflict(tmp_path: Path, served) -> None:
    """Three agents where the --task order conflicts at the second: by default (fewest
    conflicts) agent-3 merges before agent-2's conflict, which is left as its branch;
    with --merge-order given the conflict comes first and agent-3 is not merged (left as
    its branch too). Each report keeps one merge outcome per agent, in team order, and
    names the rule and the order used."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC, "README.md": "# calc\n"})
    url = served(_scripts())
    picked = _run(repo, url, tmp_path / "s1")
    assert [m["outcome"] for m in picked["merges"]] == ["merged", "conflict", "merged"]
    assert picked["merges"][1]["conflicts"] == ["calc.py"]
    assert picked["merge_order"] == {"rule": "fewest-conflicts",
                                     "agents": ["agent-1", "agent-3", "agent-2"]}
    branch = picked["branch"]
    assert git(repo, "show", f"{branch}:calc.py") == MUL
    assert git(repo, "show", f"{branch}:README.md") == DOC
    assert set(picked["exports"]) == {"agent-2"}

    given = _run(repo, url, tmp_path / "s2", "--merge-order", "given")
    assert [m["outcome"] for m in given["merges"]] == ["merged", "conflict", "not merged"]
    assert given["merge_order"] == {"rule": "given",
                                    "agents": ["agent-1", "agent-2", "agent-3"]}
    assert git(repo, "show", f"{given['branch']}:README.md") == "# calc\n"
    assert set(given["exports"]) == {"agent-2", "agent-3"}
    record = json.loads((tmp_path / "s2" / "run.json").read_text())
    assert record["merge_order"] == "given"  # a resume merges the same way
    assert [a["merge"] for a in record["agents"]] == ["merged", "conflict", "not merged"]
