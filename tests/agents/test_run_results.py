"""What `corral run` leaves: one commit per agent plus their merge by default, authored as
the user; `--history` keeps one commit per effect; `corral runs list|show|clean` see and
remove the run directories."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from agents.run import run_tasks
from coordinator.cli import app
from tests.agents._helpers import CALC, by_step, call
from tests.conftest import git, make_repo


def _scripts() -> dict[str, Any]:
    return {
        "a1": by_step([call("write_file", path="mul.py", content="def mul(a, b):\n    pass\n"),
                       call("write_file", path="mul.py", content="def mul(a, b):\n"
                            "    return a * b\n"),
                       call("finish", summary="mul")]),
        "a2": by_step([call("write_file", path="NOTES.md", content="mul\n"),
                       call("finish", summary="notes")]),
    }


def _run(repo: Path, url: str, *extra: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, [
        "run", "--repo", str(repo), "--task", "add mul", "--task", "write notes",
        "--model", "openai/a1", "--model", "openai/a2", "--base-url", url,
        "--supervisor", "none", "--json", *extra])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_result_is_one_commit_per_agent_plus_the_merge_by_the_user(
    tmp_path: Path, served: Callable[[dict[str, Any]], str]
) -> None:
    """By default the branch holds exactly one commit per agent over HEAD and their merge,
    authored and committed as the repository's user.name/user.email; each agent's message
    names its task, model, effects and tokens. --squash is still accepted."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    git(repo, "config", "user.name", "Ada Lovelace")
    git(repo, "config", "user.email", "ada@example.org")
    head = git(repo, "rev-parse", "HEAD").strip()
    url = served(_scripts())
    for extra in ((), ("--squash",)):
        report = _run(repo, url, *extra)
        branch = report["branch"]
        assert git(repo, "rev-list", "--count", f"{head}..{branch}").strip() == "3"
        parents = git(repo, "log", "-1", "--format=%P", branch).split()
        assert len(parents) == 2
        assert all(git(repo, "rev-parse", f"{p}^").strip() == head for p in parents)
        people = git(repo, "log", "--format=%an <%ae>|%cn <%ce>", f"{head}..{branch}")
        ada = "Ada Lovelace <ada@example.org>"
        assert people.splitlines() == [f"{ada}|{ada}"] * 3
        first = git(repo, "log", "-1", "--format=%B", parents[0])
        assert "task: add mul" in first and "model: openai/a1" in first
        assert "effects: " in first and "tokens: " in first
        assert git(repo, "show", f"{branch}:mul.py").endswith("return a * b\n")
        assert git(repo, "show", f"{branch}:NOTES.md") == "mul\n"


def test_history_keeps_one_commit_per_effect(
    tmp_path: Path, served: Callable[[dict[str, Any]], str]
) -> None:
    """--history leaves the trace's history: one commit per effect, records as messages."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    head = git(repo, "rev-parse", "HEAD").strip()
    report = _run(repo, served(_scripts()), "--history")
    subjects = git(repo, "log", "--format=%s", f"{head}..{report['branch']}").splitlines()
    assert len(subjects) > 10
    assert sum(s.startswith("fs.write mul.py") for s in subjects) == 2


def test_runs_list_show_and_clean(
    tmp_path: Path, served: Callable[[dict[str, Any]], str]
) -> None:
    """`corral runs list` shows every run with its status (finished, partial), tasks,
    branch and size; `show` one run; `clean` removes finished runs but keeps a partial
    one unless --all, and --older-than spares recent runs."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    url = served(_scripts())
    done = _run(repo, url)
    stop = asyncio.Event()
    stop.set()  # interrupted before the first step: a partial run
    partial = asyncio.run(run_tasks(repo, ["write notes"], model="openai/a2", base_url=url,
                                    supervisor="none", stop=stop))
    assert partial.status == "partial" and partial.resume is not None
    runner = CliRunner()

    listed = runner.invoke(app, ["runs", "list", "--repo", str(repo), "--json"])
    assert listed.exit_code == 0, listed.output
    runs = {r["run_id"]: r for r in json.loads(listed.stdout)}
    assert runs[done["run_id"]]["status"] == "finished"
    assert runs[done["run_id"]]["tasks"] == ["add mul", "write notes"]
    assert runs[done["run_id"]]["branch"] == done["branch"]
    assert runs[done["run_id"]]["bytes"] > 0
    assert runs[partial.run_id]["status"] == "partial"
    assert runs[partial.run_id]["resume"] == partial.resume
    table = runner.invoke(app, ["runs", "list", "--repo", str(repo)])
    assert done["run_id"] in table.output and "partial" in table.output

    shown = runner.invoke(app, ["runs", "show", done["run_id"], "--repo", str(repo), "--json"])
    assert shown.exit_code == 0, shown.output
    record = json.loads(shown.stdout)["record"]
    assert [a["name"] for a in record["agents"]] == ["agent-1", "agent-2"]
    assert record["agents"][0]["effects"] > 0
    missing = runner.invoke(app, ["runs", "show", "nope", "--repo", str(repo)])
    assert missing.exit_code == 1 and "no run 'nope'" in missing.output

    runs_dir = repo / ".git" / "corral" / "runs"
    recent = runner.invoke(app, ["runs", "clean", "--repo", str(repo), "--older-than", "1h"])
    assert recent.exit_code == 0 and len(list(runs_dir.iterdir())) == 2
    cleaned = runner.invoke(app, ["runs", "clean", "--repo", str(repo)])
    assert cleaned.exit_code == 0, cleaned.output
    assert [p.name for p in runs_dir.iterdir()] == [partial.run_id]
    assert git(repo, "rev-parse", "--verify", done["branch"])  # the branch stays
    everything = runner.invoke(app, ["runs", "clean", "--repo", str(repo), "--all"])
    assert everything.exit_code == 0 and list(runs_dir.iterdir()) == []
    bad = runner.invoke(app, ["runs", "clean", "--repo", str(repo), "--older-than", "soon"])
    assert bad.exit_code == 1 and "bad duration" in bad.output
