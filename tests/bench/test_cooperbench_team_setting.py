"""CooperBench's team settings (`team`, `supervised-team`) end to end on the bundled
mini suite: the agents one Corral team, the lead's task list (one task per feature),
atomic claims, notes in the scratchpad, completed tasks. With the oracle and with the
builtin agent driven by the local scripted model server through the real OpenAI SDK."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agents.model_server import Reply, ScriptedModelServer
from bench.cooperbench import AgentOptions, RunSpec, run
from tests.agents._helpers import call
from tests.bench._mini import ADJACENT
from tests.bench.test_cooperbench_agents import DEFAULTS, KEYS

pytestmark = pytest.mark.slow


def test_oracle_team_claims_notes_and_completes(tmp_path: Path) -> None:
    """invoice 1-3 (adjacent lines): unsupervised, the team's branches conflict at the
    fold, as coop's do; under the supervisor the guard's handoff moves the blocked
    member's task to its teammate (released, claimed), and the group passes. Either
    way every task is done, by its owner, with notes in the scratchpad."""
    results = {r.setting: r for r in run(RunSpec(
        out=tmp_path, settings=("coop", "team", "supervised-team"), workers=1,
        **ADJACENT))["results"]}
    team, sup, coop = results["team"], results["supervised-team"], results["coop"]
    assert team.status == "failed" and team.merge_status == coop.merge_status == "conflicts"
    assert sup.status == "passed", sup.reason
    assert sup.merge_status == "clean" and sup.handoffs == 1
    for r in (team, sup):
        assert len(r.team_tasks) == 2
        assert all(" done " in t for t in r.team_tasks), r.team_tasks
        assert [t.split(": ", 1)[1].split(":")[0] for t in r.team_tasks] == [
            "feature 1", "feature 3"]
    # Unsupervised: each member owns the task of its own feature.
    assert [_owner(t).rsplit(".", 1)[1] for t in team.team_tasks] == ["agent1", "agent2"]
    assert set(team.team_notes) == {f"notes/{_owner(t)}.md" for t in team.team_tasks}
    # Supervised: one member did both; the other's note says it handed them over.
    owners = {_owner(t) for t in sup.team_tasks}
    assert len(owners) == 1
    gave = [text for text in sup.team_notes.values() if text.startswith("Handed")]
    assert len(gave) == 1 and "conflict" in gave[0]


def _owner(task: str) -> str:
    """The owner of a `team_tasks` line (`id status owner: title`)."""
    return task.split(": ", 1)[0].split()[2]


def _team_script(payload: dict[str, Any]) -> Reply:
    """A member as the team text asks: claim the first task it can get, do that
    feature's edits (Store.keys() or defaults), note them, complete the task, finish."""
    msgs = payload["messages"]
    task = next(m["content"] for m in msgs if m["role"] == "user")
    sections = re.split(r"^## Task ", task if isinstance(task, str) else str(task), flags=re.M)
    ids = [s.split(":", 1)[0] for s in sections[1:]]
    plans = {s.split(":", 1)[0]: KEYS if "keys()" in s else DEFAULTS for s in sections[1:]}
    owned = [(i, re.search(r"you own (\S+)", str(m.get("content")))) for i, m in enumerate(msgs)
             if m["role"] == "tool"]
    won = next(((i, m.group(1)) for i, m in owned if m), None)
    if won is None:
        lost = sum(1 for m in msgs if m["role"] == "tool"
                   and "you did not get" in str(m.get("content")))
        return call("task_claim", task=ids[lost]) if lost < len(ids) else call(
            "finish", summary="no task left")
    at, mine = won
    k = sum(1 for m in msgs[at:] if m["role"] == "assistant")
    plan = plans[mine]
    if k < len(plan):
        return plan[k]
    name = re.search(r"pad_write (notes/\S+\.md)", task if isinstance(task, str) else "")
    assert name is not None
    steps = [call("pad_write", path=name.group(1), content=f"{mine}: edited kvstore/store.py"),
             call("task_complete", task=mine, note="done in kvstore/store.py"),
             call("finish", summary="done")]
    return steps[min(k - len(plan), len(steps) - 1)]


@pytest.mark.parametrize("setting", ["team", "supervised-team"])
def test_builtin_team_through_the_sdk(server: ScriptedModelServer, tmp_path: Path,
                                      setting: str) -> None:
    """Two builtin agents (scripted model, real OpenAI SDK) claim kvstore 3-4's two
    tasks atomically (both reach for the first; one gets it, the other takes the
    second), implement them, note them and complete them; the fold passes."""
    server.script("team", _team_script)
    (r,) = run(RunSpec(out=tmp_path, task="kvstore", pairs="3-4", settings=(setting,),
                       agent="builtin", workers=1,
                       options=AgentOptions(model="openai/team", base_url=server.base_url)
                       ))["results"]
    assert r.status == "passed", r.reason
    assert r.merge_status == "clean"
    assert len(r.team_tasks) == 2 and all(" done " in t for t in r.team_tasks), r.team_tasks
    owners = [_owner(t) for t in r.team_tasks]
    assert len(set(owners)) == 2  # one task each
    assert sorted(r.team_notes) == sorted(f"notes/{o}.md" for o in owners)
    assert all("kvstore/store.py" in text for text in r.team_notes.values())
