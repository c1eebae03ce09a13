"""The agent protocol: `corral run` hands any agent one frozen `AgentContext`, and the
scripted agent is such an agent."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from agents import AgentContext, AgentResult, Budget, ScriptedAgent, Write, run_tasks
from agents.providers import Provider, ScriptedProvider
from tests.agents._helpers import CALC
from tests.conftest import git, make_repo

SEEN: list[AgentContext] = []


async def recording_agent(ctx: AgentContext) -> AgentResult:
    """Records its context, then writes `<name>.txt` through the scripted agent."""
    SEEN.append(ctx)
    return await ScriptedAgent([Write(f"{ctx.name}.txt", f"{ctx.task}\n".encode())])(ctx)


async def test_run_hands_each_agent_its_context(tmp_path: Path) -> None:
    """`run_tasks(agent="module:attr")` calls the agent once per task with its scope, its
    team-aware task text, the provider, the run's budget, its name and its teammates; the
    scripted agent's writes merge into the run's branch."""
    SEEN.clear()
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    provider = ScriptedProvider()
    report = await run_tasks(
        repo, ["write one", "write two"], model="openai/m", provider=provider,
        agent="tests.agents.test_protocol:recording_agent", supervisor="none",
        state=tmp_path / "s", max_steps=7, max_tokens=1000, retries=2)
    assert report.ok and report.branch is not None
    by_name = {ctx.name: ctx for ctx in SEEN}
    assert sorted(by_name) == ["agent-1", "agent-2"]
    one = by_name["agent-1"]
    assert one.scope.name == "agent-1" and one.teammates == ("agent-2",)
    assert one.task.startswith("Your task (agent-1): write one") and "agent-2: write two" in (
        one.task)
    assert one.budget == Budget(max_steps=7, max_tokens=1000, retries=2)
    assert one.provider is provider and isinstance(one.provider, Provider)
    assert one.messaging and one.tools is None
    assert [a.status for a in report.agents] == ["finished", "finished"]
    assert [a.steps for a in report.agents] == [1, 1]
    assert git(repo, "show", f"{report.branch}:agent-2.txt").startswith("Your task (agent-2)")


def test_context_and_budget_are_frozen_values() -> None:
    """A context cannot be changed by the agent it is given to; budgets compare by value."""
    assert Budget() == Budget(max_steps=30, max_tokens=None, retries=4)
    with pytest.raises(FrozenInstanceError):
        Budget().max_steps = 3  # type: ignore[misc]
    assert "budget" in AgentContext.__dataclass_fields__
    assert AgentContext.__dataclass_params__.frozen  # type: ignore[attr-defined]
