"""The pair's team in the harness: the LLM supervisor (`--supervisor llm:...`),
`--messaging off`, and equal budgets per pair.
Models are the real OpenAI and Anthropic SDKs against the local scripted model server,
on the bundled mini suite."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from agents import AgentContext, AgentResult
from agents.model_server import Reply, ScriptedModelServer
from bench.cooperbench import AgentOptions, RunSpec, run
from tests.agents._helpers import call, steps_of
from tests.bench._mini import ADJACENT, IMPORTS, one_result, prompt_text

pytestmark = pytest.mark.slow

def _last(payload: dict[str, Any]) -> str:
    c = payload["messages"][-1].get("content")
    return c if isinstance(c, str) else " ".join(str(b.get("text", "")) for b in c or [])


def _handoff_on_block(payload: dict[str, Any]) -> Reply:
    """A supervisor that hands a blocked agent's work to the other one."""
    blocked = re.search(r"(\S*agent[12])#\d+\S* .*blocked", _last(payload))
    if blocked:
        giver = blocked.group(1)  # a scope name ending in agent1 or agent2
        receiver = giver[:-1] + ("2" if giver.endswith("1") else "1")
        return call("handoff", **{"from": giver, "to": receiver, "note": "finish both"})
    return call("noop", reason="fine")


def _noop(payload: dict[str, Any]) -> Reply:
    return call("noop", reason="let them be")


def test_llm_supervisor_handoff_changes_the_outcome(server: ScriptedModelServer,
                                                    tmp_path: Path) -> None:
    """Under an LLM supervisor (Anthropic SDK) that hands the blocked oracle's work to
    the other, the adjacent-lines pair merges clean and passes; under one (OpenAI SDK)
    that does nothing, the blocked hunk is lost and the pair fails. The decisions are
    recorded in the result and as effects of the supervisor's scope."""
    server.script("handoff", _handoff_on_block)
    server.script("idle", _noop)
    common: dict[str, Any] = {**ADJACENT, "settings": ("supervised",), "workers": 1}
    steered = one_result(RunSpec(out=tmp_path / "a", supervisor="llm:anthropic/handoff",
                           supervisor_base_url=server.anthropic_base_url, **common))
    idle = one_result(RunSpec(out=tmp_path / "b", supervisor="llm:openai/idle",
                        supervisor_base_url=server.base_url, **common))
    assert steered.status == "passed", steered.reason
    assert steered.handoffs == 1 and steered.blocked == 1 and steered.merge_status == "clean"
    assert len(steered.handed_off) == 1 and steered.handed_off[0] not in steered.empty
    assert any(re.match(r"handoff \S*agent[12] ", a) for a in steered.supervisor_actions)
    assert steered.supervisor == "llm:anthropic/handoff" and steered.supervisor_tokens > 0
    assert idle.status == "failed" and idle.handoffs == 0 and idle.blocked == 1
    assert idle.supervisor_actions and all(a.startswith("noop") for a in
                                           idle.supervisor_actions)
    asked = [r for r in server.requests if r.model == "handoff"]
    assert asked and asked[0].api == "anthropic"
    assert "blocked" in prompt_text(json.loads(asked[0].body))
    # The decision is an effect on the branch it acts on (the receiver's), caused by
    # the supervisor's model call; the unit's scopes were discarded with it, their
    # branches kept in the archive.
    from coordinator import Coordinator

    async def decisions() -> list[Any]:
        async with Coordinator.open(Path(steered.trace)) as coord:
            # The unit left nothing live: agents, evaluation, supervisor all discarded.
            assert {n for n, sc in coord.scopes.items() if not sc.discarded} == {"root", "env"}
            heads = {coord.last_discard(f"1-3.supervised.agent{i}") for i in (1, 2)}
            seen = {x.effect.id: x.effect for h in heads if h is not None
                    for x in coord.trace.log(h) if x.effect is not None}
            return [e for e in seen.values() if e.kind == "decision"]

    found = asyncio.run(decisions())
    assert [e.intent.action for e in found].count("handoff") == 1
    # ... or by that handoff (its note to the receiver).
    ids = {e.id for e in found}
    assert all(e.cause and ("supervisor#" in e.cause or e.cause in ids) for e in found)


def test_llm_supervisor_steers_builtin_agents(server: ScriptedModelServer,
                                              tmp_path: Path) -> None:
    """Two builtin agents (CodingAgent over the OpenAI SDK) write the same new file; the
    guard blocks the second; the LLM supervisor hands the blocked agent's work to the
    other, who is told so and runs on with the rest of the pair's budget."""

    def worker(payload: dict[str, Any]) -> Reply:
        text = prompt_text(payload)
        if "handed you" in text:
            return call("finish", summary="took over")
        if steps_of(payload) == 0:
            mine = "keys" if "keys()" in text else "defaults"
            return call("write_file", path="kvstore/notes.py", content=f"# {mine}\n")
        return call("finish", summary="done")

    server.script("w", worker)
    server.script("sup", _handoff_on_block)
    spec = RunSpec(out=tmp_path, task="kvstore", pairs="3-4", settings=("supervised",),
                   agent="builtin", options=AgentOptions(model="openai/w",
                                                         base_url=server.base_url),
                   supervisor="llm:openai/sup", workers=1, max_steps=12)
    r = one_result(spec)
    assert r.status in ("passed", "failed") and r.max_steps == 12
    assert r.blocked == 1 and r.handoffs == 1, (r.reason, r.supervisor_actions)
    assert any(a.startswith("handoff") for a in r.supervisor_actions)
    told = [x for x in server.requests if x.model == "w" and b"handed you" in x.body]
    assert told, "the receiver never ran on after the handoff"
    assert r.supervisor_tokens > 0 and r.steps <= 12


def test_messaging_off_supervised_oracle_cannot_hand_off(tmp_path: Path) -> None:
    """With messaging on, the guarded oracle hands its blocked hunk over and the pair
    passes; with messaging off it cannot tell the other agent: no handoff, the hunk is
    lost, the pair fails."""
    common: dict[str, Any] = {**ADJACENT, "settings": ("supervised",), "workers": 1}
    on = one_result(RunSpec(out=tmp_path / "on", **common))
    off = one_result(RunSpec(out=tmp_path / "off", messaging=False, **common))
    assert on.status == "passed" and on.handoffs == 1 and on.messaging
    assert off.status == "failed" and off.handoffs == 0 and not off.messaging


def _result(ctx: AgentContext, steps: int, prompt_tokens: int = 0,
            error: str | None = None) -> AgentResult:
    return AgentResult(name=ctx.name, status="finished", summary="", steps=steps,
                       prompt_tokens=prompt_tokens, cached_tokens=0, completion_tokens=0,
                       blocked=0, patch="", head=ctx.scope.head, error=error)


async def chatty(ctx: AgentContext) -> AgentResult:
    """A plug-in agent that messages its teammate, then reads its inbox."""
    notes: list[str] = []
    sent = 0
    for mate in ctx.teammates:
        r = await ctx.scope.send(mate, f"hello from {ctx.name}")
        notes.append("blocked" if r.blocked else "sent")
        sent += not r.blocked
    # Wait for the teammates' messages (as many as went out: the policy is the
    # same both ways), not for a pause that a slow machine outlasts.
    received: list[str] = []
    for _ in range(1000):
        received += [m.text for m in ctx.scope.take_messages()]
        if len(received) >= sent:
            break
        await asyncio.sleep(0.01)
    notes.extend(received)
    return _result(ctx, 1, error="; ".join(notes))  # surfaced in the result's reason


def test_messaging_off_blocks_messages_between_agents(tmp_path: Path) -> None:
    """A message from one agent to the other is delivered with messaging on and blocked
    by the policy chain (never delivered) with it off."""
    common: dict[str, Any] = {"task": "kvstore", "pairs": "3-4", "settings": ("coop",),
                              "workers": 1, "agent": "tests.bench.test_cooperbench_team:chatty"}
    on = one_result(RunSpec(out=tmp_path / "on", **common))
    off = one_result(RunSpec(out=tmp_path / "off", messaging=False, **common))
    assert "sent" in on.reason and ".coop.agent" in on.reason
    # an agent's name is its scope's (AgentContext.name), not the bare role
    assert re.search(r"hello from 3-4\.coop\.agent[12]\b", on.reason), on.reason
    assert "blocked" in off.reason and "hello" not in off.reason and "sent" not in off.reason


def test_messaging_off_builtin_agents_get_no_message_tool(server: ScriptedModelServer,
                                                          tmp_path: Path) -> None:
    """The builtin agents' requests offer no send_message tool and say nothing of it."""
    server.script("m", [call("finish", summary="nothing")] * 4)
    spec = RunSpec(out=tmp_path, task="kvstore", pairs="3-4", settings=("coop",),
                   agent="builtin", options=AgentOptions(model="openai/m",
                                                         base_url=server.base_url),
                   messaging=False, workers=1)
    run(spec)
    bodies = [json.loads(r.body) for r in server.requests if r.model == "m"]
    assert len(bodies) == 2
    for b in bodies:
        assert "send_message" not in json.dumps(b)


def test_budgets_are_equal_per_pair_and_enforced(server: ScriptedModelServer,
                                                 tmp_path: Path) -> None:
    """A model that never finishes: solo takes the pair's whole step budget, each coop
    agent half of it; the budget is recorded in every result."""
    server.script("busy", lambda p: call("list_files", path=""))
    spec = RunSpec(out=tmp_path, task="kvstore", pairs="3-4", settings=("solo", "coop"),
                   agent="builtin", options=AgentOptions(model="openai/busy",
                                                         base_url=server.base_url),
                   max_steps=6, workers=1)
    from bench.cooperbench._report import summarize

    done = run(spec)["results"]
    results = {r.setting: r for r in done}
    assert results["solo"].steps == results["coop"].steps == 6
    assert {r.max_steps for r in results.values()} == {6}
    assert summarize(done)["budget"] == {"steps": [6], "tokens": [None], "equal": True}


async def greedy(ctx: AgentContext) -> AgentResult:
    """A plug-in agent that ignores its step budget and calls its model forever."""
    from agents import ModelBlocked, ModelCaller
    from agents.providers import ModelRequest, UserMessage

    assert ctx.provider is not None
    caller = ModelCaller(ctx.coord, ctx.provider)
    steps = prompt_tokens = 0
    try:
        for _ in range(100):
            r = await caller.call(ctx.scope, ModelRequest(
                model=ctx.provider.model, messages=(UserMessage(text="more"),)))
            steps += 1
            prompt_tokens += r.response.usage.prompt_tokens
    except ModelBlocked:
        pass
    return _result(ctx, steps, prompt_tokens)


def test_budget_policy_stops_an_agent_that_ignores_it(server: ScriptedModelServer,
                                                      tmp_path: Path) -> None:
    """The pair budget is a policy: a plug-in agent that keeps calling its model past
    its share is blocked there, in solo and in coop alike."""
    server.script("g", lambda p: Reply("ok"))
    spec = RunSpec(out=tmp_path, task="kvstore", pairs="3-4", settings=("solo", "coop"),
                   agent="tests.bench.test_cooperbench_team:greedy",
                   options=AgentOptions(model="openai/g", base_url=server.base_url),
                   max_steps=8, workers=1)
    results = {r.setting: r for r in run(spec)["results"]}
    assert results["solo"].steps == 8 and results["coop"].steps == 8
    assert len([r for r in server.requests if r.model == "g"]) == 16


def test_llm_supervisor_is_refused_for_agents_it_cannot_steer(tmp_path: Path) -> None:
    """Before any work: a plug-in agent under an LLM supervisor, or a supervisor spec
    without PROVIDER/MODEL."""
    with pytest.raises(ValueError, match="oracle and builtin"):
        run(RunSpec(out=tmp_path, **IMPORTS, settings=("supervised",),
                    agent="tests.bench.test_cooperbench_team:chatty",
                    supervisor="llm:openai/x"))
    with pytest.raises(ValueError, match="PROVIDER/MODEL"):
        run(RunSpec(out=tmp_path, **IMPORTS, settings=("supervised",), supervisor="llm:x"))
    assert not (tmp_path / "results.jsonl").exists()


def test_llm_supervisor_restart_starts_the_oracle_over(server: ScriptedModelServer,
                                                       tmp_path: Path) -> None:
    """A restart discards the blocked oracle's scope and starts its feature over in a
    fresh one; the pair is graded on the new scope (its hunks blocked again, as the
    other agent's work still stands)."""
    restarted: list[str] = []

    def once(payload: dict[str, Any]) -> Reply:
        blocked = re.search(r"(\S*agent[12])#\d+\S* .*blocked", _last(payload))
        if blocked and not restarted:
            restarted.append(blocked.group(1))
            return call("restart", worker=blocked.group(1))
        return call("noop", reason="fine")

    server.script("s", once)
    r = one_result(RunSpec(out=tmp_path, **ADJACENT, settings=("supervised",), workers=1,
                     supervisor="llm:openai/s", supervisor_base_url=server.base_url))
    assert r.status in ("passed", "failed"), r.reason
    assert restarted and any(a.startswith("discard") for a in r.supervisor_actions)
    assert r.blocked >= 2
    patch = (tmp_path / r.patches[restarted[0].rpartition(".")[2]]).read_text()
    assert patch, "the restarted agent's new scope has its feature again"
