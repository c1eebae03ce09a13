"""Counterfactual optimisation over a team run (`agents.rollouts.cro_team`): the team cut
before each member's first affected call, replayed together, graded as a merge, against a
full re-run of the team. The run is a real two-agent `corral run` against the local
scripted model server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents._transcript import model_calls
from agents.model_server import Reply, ScriptedModelServer
from agents.rollouts import Change, cro_team
from agents.run import run_tasks
from coordinator import Coordinator
from tests.agents._helpers import call, steps_of
from tests.conftest import make_repo

pytestmark = pytest.mark.slow

TEST = "grep -qx 1 answer.txt && test -f b.txt"
TEST_B = "grep -qx 1 answer.txt"
HINT = "the answer is 1"


def model(payload: dict[str, Any]) -> Reply:
    """Agent 1: list, run, write the answer (1 once told), finish. Agent 2: write b.txt,
    finish."""
    step = steps_of(payload)
    task = str(next(m.get("content") for m in payload["messages"] if m.get("role") == "user"))
    if task.startswith("Your task (agent-2)"):
        return call("write_file", path="b.txt", content="b\n") if step == 0 else call(
            "finish", summary="done")
    told = any(HINT in str(m.get("content")) for m in payload["messages"])
    script = [call("list_files", path="."), call("run", command="true"),
              call("write_file", path="answer.txt", content="1\n" if told else "0\n")]
    return script[step] if step < len(script) else call("finish", summary="done")


async def _run(tmp: Path, base_url: str) -> Path:
    state = tmp / "state"
    await run_tasks(make_repo(tmp / "repo", {"README.md": "team\n"}),
                    ["write the answer", "write b.txt"], model="openai/m", base_url=base_url,
                    state=state, supervisor="none", max_steps=8)
    return state


async def test_a_note_replays_the_affected_member_and_serves_the_other(tmp_path: Path
                                                                        ) -> None:
    """A note at step 3 affects agent 1 only (agent 2 made two calls): the team replays
    from agent 1's third call with agent 2 at its head (nothing of it re-run), the merged
    result passes as the full re-run's does, on fewer tokens."""
    async with ScriptedModelServer() as server:
        server.script("m", model)
        state = await _run(tmp_path, server.base_url)
        report = (await cro_team(state, ["agent-1", "agent-2"], Change(notes={3: HINT}),
                                 test=TEST, base_url=server.base_url)).as_dict()
    assert report["steps"] == {"agent-1": 3, "agent-2": None}
    assert report["reward"] == report["full_reward"] == 1.0
    assert 0 < report["tokens"] < report["full_tokens"]
    assert (report["replayed"], report["rerun"]) == ("agent-1-cro.", "agent-1-cro-full.")
    async with Coordinator.open(state) as coord:
        def own(scope: str) -> int:
            return sum(1 for _, e in model_calls(coord.trace, coord.scope(scope).head)
                       if e.scope == scope)

        made = await coord.io(lambda: {s: own(s) for s in (
            "agent-1-cro.agent-1", "agent-1-cro.agent-2", "agent-1-cro-full.agent-2")})
    # agent 1 re-ran its steps 3 and 4; agent 2 nothing (a re-run in full: its 2 calls)
    assert made == {"agent-1-cro.agent-1": 2, "agent-1-cro.agent-2": 0,
                    "agent-1-cro-full.agent-2": 2}


async def test_a_change_affecting_no_member_grades_the_recorded_team(tmp_path: Path
                                                                     ) -> None:
    async with ScriptedModelServer() as server:
        server.script("m", model)
        state = await _run(tmp_path, server.base_url)
        report = (await cro_team(state, ["agent-1", "agent-2"], Change(deny=("message",)),
                                 test=TEST, base_url=server.base_url)).as_dict()
    assert report["steps"] == {"agent-1": None, "agent-2": None}
    assert (report["reward"], report["replayed"], report["tokens"]) == (0.0, None, 0)


async def test_the_cli_tries_a_change_on_a_team(tmp_path: Path) -> None:
    """`corral rollouts cro STATE:agent-1 STATE:agent-2 --team --json` prints the team's
    report; members of two states are refused."""
    import asyncio
    import json

    from typer.testing import CliRunner

    from coordinator.cli import app

    async with ScriptedModelServer() as server:
        server.script("m", model)
        state = await _run(tmp_path, server.base_url)
        args = ["rollouts", "cro", f"{state}:agent-1", f"{state}:agent-2", "--team",
                "--test", TEST, "--note", f"3:{HINT}", "--no-full",
                "--base-url", server.base_url, "--json"]
        out = await asyncio.to_thread(CliRunner().invoke, app, args)
        again = await asyncio.to_thread(CliRunner().invoke, app, args)
        mixed = await asyncio.to_thread(CliRunner().invoke, app, [
            "rollouts", "cro", f"{state}:agent-1", f"{tmp_path}/other:agent-2", "--team",
            "--test", TEST])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["steps"] == {"agent-1": 3, "agent-2": None}
    assert (report["reward"], report["full_reward"], report["rerun"]) == (1.0, None, None)
    assert mixed.exit_code != 0 and "one state" in mixed.output
    assert again.exit_code == 0, again.output  # tried again: scopes of its own
    assert json.loads(again.stdout)["replayed"] == "agent-1-cro-2."


def chatty(payload: dict[str, Any]) -> Reply:
    """Agent a tells b the answer, then finishes; b lists, writes the answer (1 once told),
    finishes."""
    step = steps_of(payload)
    task = str(next(m.get("content") for m in payload["messages"] if m.get("role") == "user"))
    if task == "task a":
        return call("send_message", to="b", text=HINT) if step == 0 else call(
            "finish", summary="done")
    told = any(HINT in str(m.get("content")) for m in payload["messages"])
    script = [call("list_files", path="."),
              call("write_file", path="answer.txt", content="1\n" if told else "0\n")]
    return script[step] if step < len(script) else call("finish", summary="done")


async def test_a_teammate_that_took_a_message_sent_after_the_cut_is_replayed_too(
        tmp_path: Path) -> None:
    """a's message to b is denied: a is affected at its first call; b, unaffected, took
    the message at its second, so the cut moves it back before that and b re-runs, never
    told: the team fails as in the full re-run, where the recorded team passed."""
    from agents import CodingAgent, ModelCaller
    from agents.providers import OpenAIProvider

    state = tmp_path / "state"
    async with ScriptedModelServer() as server:
        server.script("m", chatty)
        provider = OpenAIProvider("m", base_url=server.base_url)
        async with Coordinator.open(state, make_repo(tmp_path / "repo", {"R": "r\n"})) as coord:
            a, b = await coord.root.fork("a"), await coord.root.fork("b")
            for steps in (1, 2, 3):  # b's step 1 before a speaks, its step 2 after
                for scope in (b, a):
                    await CodingAgent(coord, scope, ModelCaller(coord, provider),
                                      f"task {scope.name}", max_steps=steps).run()
        await provider.aclose()
        recorded = (await cro_team(state, ["a", "b"], Change(deny=("exec",)), test=TEST_B,
                                   base_url=server.base_url, full=False)).as_dict()
        report = (await cro_team(state, ["a", "b"], Change(deny=("message",)), test=TEST_B,
                                 base_url=server.base_url)).as_dict()
    assert (recorded["steps"], recorded["reward"]) == ({"a": None, "b": None}, 1.0)
    assert report["steps"] == {"a": 1, "b": None}
    assert (report["reward"], report["full_reward"]) == (0.0, 0.0)
    # a's first call is served (its request is the recording's; what it asked is then
    # denied); b is cut after its first call, and its second, untold, goes live
    assert report["served"] == {"a": 1, "b": 0}
