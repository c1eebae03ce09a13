"""mini-swe-agent (the real package) in a team, against the local scripted model server:
its `corral-team` actions are answered by Corral (the team's task list, scratchpad and
typed requests, each an effect on its branch), never run in the sandbox."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("minisweagent")

from agents import AgentContext, ModelCaller
from agents._team_commands import TEAM_COMMANDS_HELP, is_team_command
from agents.miniswe import BLOCKED_RETURNCODE, MiniSweAgent, run, with_its_tools
from agents.model_server import ScriptedModelServer
from agents.providers import OpenAIProvider
from agents.team_tools import LocalTeam
from coordinator import Coordinator, Decision, Intent, TeamWrite, View
from tests.agents._helpers import CALC, call
from tests.conftest import make_repo

SCRIPT = [
    call("bash", command="corral-team tasks"),
    call("bash", command="corral-team claim t2"),  # the lead's: lost, exit 2
    call("bash", command="corral-team claim t1"),
    call("bash", command="corral-team pad write notes/a.md <<'EOF'\nmul goes in calc.py\nEOF"),
    call("bash", command="corral-team pad write secret.md --text 'hunter2'"),  # blocked
    call("bash", command="corral-team tasks | cat"),  # not on its own: refused
    call("bash", command="corral-team request lead review 'is mul right?'"),
    call("bash", command="corral-team wait r1 --timeout 20"),
    call("bash", command="corral-team inbox"),
    call("bash", command="corral-team done t1 'mul is in calc.py'"),
    call("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
]


def _observations(payload: dict) -> list[str]:
    return [m["content"] for m in payload["messages"] if m.get("role") == "tool"]


async def _no_secrets(intent: Intent, view: View) -> Decision | None:
    if isinstance(intent, TeamWrite) and intent.path.startswith("secret"):
        return Decision(verdict="block", reason="no secrets in the scratchpad")
    return None


@pytest.mark.slow
@pytest.mark.asyncio
async def test_mini_swe_agent_works_the_team_through_corral_team(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    """Claims (one lost, exit 2), a scratchpad write from a here-document, a write the
    supervisor blocks (exit 126), a pipeline refused, a request answered and waited
    for, the inbox, a completion: each answered in process as the model reads it."""
    server.script("m", SCRIPT)
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    provider = OpenAIProvider("m", base_url=server.base_url)
    async with Coordinator.open(tmp_path / "s", repo, backend="copy",
                                policies=[_no_secrets]) as coord:
        lead_scope, a_scope = await coord.root.fork("lead"), await coord.root.fork("a")
        team = await coord.create_team("dev", [lead_scope, a_scope], lead=lead_scope)
        lead = team.member("lead")
        await lead.add("add mul", assignee="a")
        await lead.add("review", assignee="lead")
        await lead_scope.send("a", "t1 is yours")

        async def lead_answers() -> None:
            while not await lead.requests():
                await asyncio.sleep(0.02)
            assert (await lead.respond("r1", "yes")).ok

        agent = MiniSweAgent(coord, a_scope, ModelCaller(coord, provider), "add mul",
                             team=LocalTeam(team.member("a")))
        async with asyncio.TaskGroup() as tg:
            tg.create_task(lead_answers())
            result = await agent.run()
        await provider.aclose()

        assert result.status == "finished", result
        assert result.blocked == 1
        [t1, t2] = await team.tasks()
        assert (t1.owner, t1.status, t1.note) == ("a", "done", "mul is in calc.py")
        assert t2.owner is None
        assert await team.read("notes/a.md") == b"mul goes in calc.py\n"
        assert [f.path for f in await team.files()] == ["notes/a.md"]
        assert not (a_scope.path / "notes").exists()  # the scratchpad is not the repo
        log = coord.log(a_scope)
        kinds = [(e.kind, e.status) for e in log]
        assert ("team.write", "blocked") in kinds
        ran = [e.intent.argv[-1] for e in log if e.kind == "exec"]
        assert ran == ["echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]  # no corral-team ran
        model_calls = {e.id for e in log if e.kind == "model.call"}
        assert all(e.cause in model_calls for e in log if e.kind.startswith("team."))

    shown = [json.loads(o) for o in _observations(server.requests[-1].json())]
    said = [(o["returncode"], o["output"]) for o in shown]
    assert said[0][0] == 0 and "t1 [open] for=a add mul" in said[0][1]
    assert said[1] == (2, "you did not get t2: lead has it; pick another\n")
    assert said[2] == (0, "you own t1\n")
    assert said[3] == (0, "wrote notes/a.md\n")
    assert said[4][0] == BLOCKED_RETURNCODE and "no secrets in the scratchpad" in said[4][1]
    assert said[5][0] == 1 and "no pipes" in said[5][1]
    assert said[6][0] == 0 and said[6][1].startswith("sent request r1 to lead")
    assert said[7] == (0, "response from lead: yes\n")
    assert said[8] == (0, "Message from lead: t1 is yours\n")
    assert said[9] == (0, "t1 is done\n")
    first = server.requests[0].json()["messages"]
    assert any("corral-team claim <task>" in str(m.get("content")) for m in first)


def test_the_task_tells_a_team_member_its_command() -> None:
    """In a team the task carries `corral-team`'s usage instead of the no-messages note;
    outside one it is as before; only a `corral-team` action is answered by Corral."""
    task = "Do it. Use send_message to tell the others."
    assert with_its_tools(task, team=True).endswith(TEAM_COMMANDS_HELP)
    assert "send_message" not in with_its_tools(task, team=True)
    assert "You cannot send the other agents messages" in with_its_tools(task)
    assert is_team_command("  corral-team tasks") and not is_team_command("echo corral-team")
    assert callable(run) and AgentContext.__dataclass_fields__["team"].default is None
