"""The team's shared state as the built-in agent's tools, through the real OpenAI SDK
against the local scripted model server: a lead plans into the task list and the
scratchpad, a member claims (losing one it may not have), reads, completes, and asks
the lead, who answers from its inbox; an agent in no team is as before."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agents import AgentContext, CodingAgent, LLMSupervisor, ModelCaller
from agents.model_server import Reply, ScriptedCall, ScriptedModelServer
from agents.providers import OpenAIProvider
from agents.team_tools import TEAM_TOOL_NAMES, LocalTeam, call_team_tool
from coordinator import Coordinator, TeamTask, ToolCall
from tests.agents._helpers import CALC, by_step, call
from tests.conftest import make_repo

pytestmark = pytest.mark.asyncio

LEAD = [
    call("task_add", title="add mul", detail="mul(a, b) in calc.py", assignee="a"),
    call("task_add", title="add div", assignee="b"),
    call("pad_write", path="plan.md", content="a: mul, b: div\n"),
    call("finish", summary="planned"),
    # run again when a's request is in its inbox:
    call("respond", request="r1", body="yes, ship it"),
    call("finish", summary="answered"),
]
MEMBER = [
    call("tasks"),
    call("task_claim", task="t2"),  # b's: lost
    call("task_claim", task="t1"),
    call("pad_read", path="plan.md"),
    call("task_complete", task="t1", note="mul is in calc.py"),
    call("request", to="lead", kind="review", body="is mul right?"),
    call("wait_response", request="r1", timeout=20),
    call("finish", summary="mul done"),
]


def _sent(server: ScriptedModelServer, model: str) -> list[dict]:
    """The request bodies the server got for `model`, in order."""
    return [r.json() for r in server.requests if r.model == model]


def _results(payload: dict) -> list[str]:
    """The tool results the agent was shown (OpenAI messages of role tool)."""
    return [m["content"] for m in payload["messages"] if m.get("role") == "tool"]


async def test_a_team_plans_claims_completes_and_answers_through_its_tools(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    """Each team tool is an effect on the calling agent's branch (cause: its model call)
    and a tool.call record; a lost claim, a typed request and its answer read as the
    model should read them."""
    server.script("lead", by_step(LEAD))
    server.script("a", by_step(MEMBER))
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    async with Coordinator.open(tmp_path / "s", repo, backend="copy") as coord:
        scopes = [await coord.root.fork(n) for n in ("lead", "a", "b")]
        await coord.create_team("dev", scopes, lead=scopes[0])
        providers = {n: OpenAIProvider(n, base_url=server.base_url) for n in ("lead", "a")}

        def agent(name: str) -> CodingAgent:
            ctx = AgentContext(coord=coord, scope=coord.scope(name), task=f"{name}'s part",
                               provider=providers[name], name=name, team="dev")
            return CodingAgent.from_context(ctx)

        planned = await agent("lead").run()
        assert planned.status == "finished"
        team = coord.team("dev")
        assert [(t.id, t.assignee) for t in await team.tasks()] == [("t1", "a"), ("t2", "b")]
        assert await team.read("plan.md") == b"a: mul, b: div\n"

        async def lead_answers() -> None:
            while not coord.scope("lead").inbox:
                await asyncio.sleep(0.02)
            assert (await agent("lead").run()).summary == "answered"

        async with asyncio.TaskGroup() as tg:
            tg.create_task(lead_answers())
            worked = await agent("a").run()
        for p in providers.values():
            await p.aclose()

        assert worked.status == "finished"
        [t1, _] = await team.tasks()
        assert (t1.status, t1.owner, t1.note) == ("done", "a", "mul is in calc.py")
        shown = _results(_sent(server, "a")[-1])
        assert "t1 [open] for=a add mul" in shown[0]
        assert shown[1].startswith("you did not get t2: b has it")
        assert shown[2] == "you own t1" and shown[3] == "a: mul, b: div\n"
        assert shown[5].startswith("sent request r1 to lead")
        assert shown[6] == "response from lead: yes, ship it"
        lead_saw = json.dumps(_sent(server, "lead")[-1]["messages"])
        assert "Request r1 (review) from a: is mul right?" in lead_saw
        system = _sent(server, "a")[0]["messages"][0]["content"]
        assert "You are a in team dev, led by lead" in system
        assert TEAM_TOOL_NAMES <= {t["function"]["name"]
                                   for t in _sent(server, "a")[0]["tools"]}

        log = coord.log("a")
        claims = [e for e in log if isinstance(e.intent, TeamTask)]
        assert [(e.intent.op, e.outcome.won) for e in claims[:2]] == [("claim", False),
                                                                       ("claim", True)]
        model_calls = {e.id for e in log if e.kind == "model.call"}
        assert all(e.cause in model_calls for e in claims)
        tools = [e.intent.tool for e in log if isinstance(e.intent, ToolCall)]
        assert tools[:3] == ["tasks", "task_claim", "task_claim"]


async def test_an_agent_in_no_team_has_no_team_tools(tmp_path: Path,
                                                     server: ScriptedModelServer) -> None:
    """Without a team in its context the agent's tools and prompt are as before, and a
    team tool the model asks for anyway is an unknown tool."""
    server.script("m", by_step([call("tasks"), call("finish", summary="ok")]))
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    provider = OpenAIProvider("m", base_url=server.base_url)
    async with Coordinator.open(tmp_path / "s", repo, backend="copy") as coord:
        scope = await coord.root.fork("w")
        agent = CodingAgent.from_context(AgentContext(coord=coord, scope=scope, task="t",
                                                      provider=provider))
        assert agent.team is None and not TEAM_TOOL_NAMES & {t.name for t in agent.tools}
        assert "team" not in agent.system
        await agent.run()
        caller = ModelCaller(coord, provider)
        assert caller.provider is provider
    await provider.aclose()
    assert _results(_sent(server, "m")[-1])[0] == "unknown tool 'tasks'"


async def test_team_tools_say_what_went_wrong_instead_of_raising(tmp_path: Path) -> None:
    """A refused operation, a bad argument and an unanswered wait are texts for the model
    (is_error), never exceptions out of the agent's loop."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    async with Coordinator.open(tmp_path / "s", repo, backend="copy") as coord:
        scopes = [await coord.root.fork(n) for n in ("lead", "a")]
        team = await coord.create_team("dev", scopes)
        a = LocalTeam(team.member("a"))
        assert await call_team_tool(a, "tasks", {}) == ("the task list is empty", False)
        said, err = await call_team_tool(a, "task_complete", {"task": "t7"})
        assert err and said == "error: no task t7 in the team's task list"
        said, err = await call_team_tool(a, "task_add", {"title": 3})
        assert err and "must be a string" in said
        rid = (await call_team_tool(a, "request", {"to": "lead", "kind": "plan",
                                                   "body": "?"}))[0].split()[2]
        said, err = await call_team_tool(a, "wait_response", {"request": rid, "timeout": 0.05})
        assert err and said == f"no response to {rid} within 0.05s"
        said, err = await call_team_tool(a, "pad_read", {"path": "none.md"})
        assert err and "no file 'none.md'" in said


async def test_the_supervisor_sees_the_teams_effects_and_its_task_list(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    """The LLM supervisor is shown the workers' team operations like their other effects
    (a claim won or lost, a refused completion, which triggers a round) with the team's
    task list, and its note reaches the worker."""
    def calls(*made: tuple[str, dict]) -> Reply:  # several tool calls in one model turn
        return Reply(tool_calls=[ScriptedCall(name, args) for name, args in made])

    server.script("a", by_step([calls(("task_claim", {"task": "t1"}),
                                      ("finish", {"summary": "a"}))]))
    server.script("b", by_step([calls(("task_claim", {"task": "t1"}),
                                      ("task_complete", {"task": "t1"})),
                                call("finish", summary="b")]))

    def decide(payload: dict) -> Reply:
        last = payload["messages"][-1]["content"]
        if "[failed]" in last:
            return Reply(tool_calls=[ScriptedCall("inject", {"worker": "b",
                                                             "text": "t1 is a's; add t2"})])
        return Reply(tool_calls=[ScriptedCall("noop", {"reason": "fine"})])

    server.script("sup", decide)
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    providers = {n: OpenAIProvider(n, base_url=server.base_url) for n in ("a", "b", "sup")}
    async with Coordinator.open(tmp_path / "s", repo, backend="copy") as coord:
        scopes = [await coord.root.fork(n) for n in ("a", "b")]
        team = await coord.create_team("dev", scopes)
        await team.member("a").add("parse")
        workers = [CodingAgent.from_context(AgentContext(
            coord=coord, scope=s, task=f"{s.name}'s part", provider=providers[s.name],
            name=s.name, team="dev")) for s in scopes]
        async with LLMSupervisor(coord, ModelCaller(coord, providers["sup"]), workers) as sup:
            for w in workers:
                w.before_step = sup.settle
            await workers[0].run()
            await workers[1].run()
            await sup.settle()
    for p in providers.values():
        await p.aclose()
    seen = "\n".join(m["content"] for r in _sent(server, "sup") for m in r["messages"]
                     if m.get("role") == "user" and isinstance(m.get("content"), str))
    assert "team.task claim t1 [dev] (won)" in seen
    assert "team.task claim t1 [dev] (lost: a has it)" in seen
    assert "team.task complete t1 [dev] [failed]: task t1 is owned by a" in seen
    assert "Team dev's tasks:\n- t1 [in_progress] owner=a parse" in seen
    b_saw = json.dumps(_sent(server, "b")[-1]["messages"])
    assert "t1 is a's; add t2" in b_saw
