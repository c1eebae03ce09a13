"""A consistent-cut rewind inside a CooperBench unit: in `supervised-team` the LLM
supervisor marks the team (`mark_team`) once both members are done, a member then
breaks the build, and the supervisor takes the whole team back (`rewind_team`).
Builtin agents and the supervisor are scripted models behind the local model server,
reached through the real OpenAI SDK, on the bundled mini suite."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from agents.model_server import Reply, ScriptedCall, ScriptedModelServer
from bench.cooperbench import AgentOptions, RunSpec
from tests.agents._helpers import call, steps_of
from tests.bench._mini import one_result, prompt_text
from tests.bench.test_cooperbench_agents import DEFAULTS, KEYS

pytestmark = pytest.mark.slow

BREAK = "BREAK-THE-BUILD"
"""The supervisor's note that makes agent2 break things (the scripted 'mistake')."""
WRONG = "WRONG-WAY: drop your work"
"""What agent2 tells agent1 while breaking things: after the rewind nobody may read it."""


def _member(payload: dict[str, Any]) -> Reply:
    """agent<k> claims task k, does that feature, notes it, completes it, finishes; told
    to BREAK, it breaks the package, writes junk to the scratchpad, adds and claims a
    bogus task, messages its teammate and finishes."""
    msgs = payload["messages"]
    task = str(next(m["content"] for m in msgs if m["role"] == "user"))
    me = re.search(r"pad_write notes/(\S+)\.md", task)
    assert me is not None
    scope = me.group(1)
    sections = re.split(r"^## Task ", task, flags=re.M)[1:]
    ids = [s.split(":", 1)[0] for s in sections]
    mine = int(scope[-1]) - 1
    told = next((i for i, m in enumerate(msgs) if m["role"] == "user" and
                 BREAK in str(m.get("content"))), None)
    if told is not None:
        k = sum(1 for m in msgs[told:] if m["role"] == "assistant")
        added = re.search(r"added (\S+)", prompt_text({"messages": msgs[told:]}))
        mate = scope[:-1] + ("2" if scope.endswith("1") else "1")
        steps = [call("write_file", path="kvstore/__init__.py", content="raise ImportError\n"),
                 call("pad_write", path="notes/junk.md", content="junk"),
                 call("task_add", title="bogus"),
                 call("task_claim", task=added.group(1) if added else "?"),
                 call("send_message", to=mate, text=WRONG),
                 call("finish", summary="broke it")]
        return steps[min(k, len(steps) - 1)]
    plan = KEYS if "keys()" in sections[mine] else DEFAULTS
    steps = [call("task_claim", task=ids[mine]), *plan,
             call("pad_write", path=f"notes/{scope}.md", content=f"{ids[mine]} in store.py"),
             call("task_complete", task=ids[mine], note="done in kvstore/store.py"),
             call("finish", summary="done")]
    return steps[min(steps_of(payload), len(steps) - 1)]


class Supervisor:
    """Marks the team once both members finished and tells agent2 to break things (one
    reply, two tool calls); at agent2's next finish rewinds the team to the mark."""

    def __init__(self) -> None:
        self.marked = self.rewound = False

    def __call__(self, payload: dict[str, Any]) -> Reply:
        text = prompt_text(payload)
        done = set(re.findall(r"(\S*agent[12])#\d+ \S+ finish", text))
        if not self.marked and len(done) == 2:
            self.marked = True
            agent2 = next(n for n in done if n.endswith("agent2"))
            return Reply(tool_calls=[ScriptedCall("mark_team", {"name": "good"}),
                                     ScriptedCall("inject", {"worker": agent2,
                                                             "text": BREAK})])
        last = _last_user(payload)
        if self.marked and not self.rewound and re.search(r"agent2#\d+ \S+ finish", last):
            self.rewound = True
            return Reply(tool_calls=[ScriptedCall("rewind_team", {
                "name": "good", "reason": "agent2 broke the package"})])
        return call("noop", reason="fine")


def _last_user(payload: dict[str, Any]) -> str:
    users = [m for m in payload["messages"] if m["role"] == "user"]
    return prompt_text({"messages": users[-1:]})


def test_supervisor_rewinds_the_team_to_its_mark(server: ScriptedModelServer,
                                                 tmp_path: Path) -> None:
    """kvstore 3-4 in supervised-team: after the rewind every member's files, the task
    list's claims, the scratchpad and the inboxes are as at the mark (the junk, the
    bogus task and the message are gone; agent1 never reads the message), the rewind is
    one decision per member with the cause `cut:good`, and the unit is graded: passed."""
    sup = Supervisor()
    server.script("team", _member)
    server.script("sup", sup)
    spec = RunSpec(out=tmp_path, task="kvstore", pairs="3-4", settings=("supervised-team",),
                   agent="builtin", workers=1, supervisor="llm:openai/sup",
                   options=AgentOptions(model="openai/team", base_url=server.base_url))
    r = one_result(spec)
    assert sup.marked and sup.rewound, r.supervisor_actions
    assert r.status == "passed" and r.merge_status == "clean", r.reason
    # The task list as at the mark: no bogus task, each feature's done by its claimer.
    assert len(r.team_tasks) == 2 and all(" done " in t for t in r.team_tasks), r.team_tasks
    assert {t.split(": ", 1)[0].split()[2][-6:] for t in r.team_tasks} == {"agent1", "agent2"}
    # The scratchpad as at the mark: each member's note, no junk.
    assert sorted(p[-9:] for p in r.team_notes) == ["agent1.md", "agent2.md"], r.team_notes
    assert all(text.endswith(" in store.py") for text in r.team_notes.values())
    assert any(a.startswith("rewind * ") and "'cut': 'good'" in a
               for a in r.supervisor_actions), r.supervisor_actions
    to_agent1 = [x for x in server.requests if x.model == "team" and WRONG.encode() in x.body
                 and b"agent1.md" in x.body]
    assert not to_agent1, "agent1 read the message sent after the mark"
    asyncio.run(_check_trace(Path(r.trace)))


async def _check_trace(store: Path) -> None:
    """The trace: the cut; each member's branch goes from its cut head straight to its
    rewind (same tree), whose cause is a decision caused by `cut:good` on the line it
    rewound away from; agent2's line held the breakage and the message."""
    from coordinator import Coordinator, ScopeRewind, SupervisorAction

    async with Coordinator.open(store) as coord:
        trace = coord.trace
        cut = await coord.read_cut("good")
        assert len(cut.members) == 2 and all(not m.inbox for m in cut.members)
        for m in cut.members:
            head = coord.last_discard(m.scope)
            assert head is not None
            after = [x for x in trace.log(head) if x.effect is not None
                     and isinstance(x.effect.intent, ScopeRewind)]
            assert len(after) == 1 and after[0].parents == (m.head,)
            rewind = after[0]
            assert rewind.tree == trace.tree_id(m.head)  # the member's files as at the mark
            assert isinstance(rewind.effect.intent, ScopeRewind)
            left = [x.effect for x in trace.log(rewind.effect.intent.head)
                    if x.effect is not None]
            decision = left[-1]
            assert decision.id == rewind.effect.cause and decision.cause == "cut:good"
            assert isinstance(decision.intent, SupervisorAction)
            assert decision.intent.action == "rewind" and decision.intent.detail["cut"] == "good"
            past = [e.summary() for e in left if e.seq > trace.show(m.head).effect.seq]
            if m.scope.endswith("agent2"):
                assert any("kvstore/__init__.py" in x for x in past), past
                assert any("notes/junk.md" in x for x in past), past
                assert any("'bogus'" in x for x in past), past
                assert any(x.startswith("team.task claim") for x in past), past
                assert any("message" in x and "agent1" in x for x in past), past
