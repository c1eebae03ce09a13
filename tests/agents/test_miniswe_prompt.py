"""mini-swe-agent in a team (`corral run --agent mini-swe-agent` with two tasks) is told
what it has: bash, no send_message (the built-in agent's tool)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

pytest.importorskip("minisweagent")

from agents.model_server import Reply
from coordinator.cli import app
from tests.agents._helpers import CALC, call, steps_of
from tests.conftest import make_repo


def test_a_task_about_send_message_keeps_its_words() -> None:
    """Only the team prompt's instruction goes: a task that names a send_message
    function is left as written."""
    from agents.miniswe import NO_MESSAGES, with_its_tools

    task = "Fix send_message() in chat.py."
    assert with_its_tools(task) == task
    told = with_its_tools(task + "\nUse send_message if your work affects theirs.")
    assert told == f"{task}\n{NO_MESSAGES}"


@pytest.mark.slow
def test_mini_swe_agent_in_a_team_is_not_told_to_use_send_message(
        tmp_path: Path, served) -> None:
    """Each agent's first request names its teammate's task, offers bash alone, and no
    message in it mentions send_message; it says messaging is not available."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    payloads: list[dict[str, Any]] = []

    def script(payload: dict[str, Any]) -> Reply:
        payloads.append(payload)
        if steps_of(payload) == 0:
            return call("bash", command="ls")
        return call("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")

    url = served({"m": script})
    result = CliRunner().invoke(app, [
        "run", "--repo", str(repo), "--task", "add mul.py", "--task", "add div.py",
        "--agent", "mini-swe-agent", "--model", "openai/m", "--base-url", url,
        "--state", str(tmp_path / "state"), "--json"])
    assert result.exit_code == 0, result.output
    first = [p for p in payloads if steps_of(p) == 0]
    assert len(first) == 2
    for p in first:
        assert [t["function"]["name"] for t in p["tools"]] == ["bash"]
        text = json.dumps(p["messages"])
        assert "send_message" not in text
        assert "add mul.py" in text and "add div.py" in text  # its own task and the other's
        assert "cannot send the other agents messages" in text
