"""A recorded two-agent run for the rollout tests, and a tree grown from it.

agent-1 adds `mul` to calc.py and tells agent-2 that calc.py is its; agent-2 waits for the
message, then tries to add `sub` to calc.py twice (the conflict guard blocks both) and gives
up, so the merged run fails `check.py`. In the tree, agent-2's siblings at each block get a
seed: seed 4n+1 and 4n+3 put `sub` into sub.py (the check passes), 4n+2 puts a wrong one
there (it fails), 4n tries calc.py again (blocked) and gives up.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.model_server import Reply, ScriptedModelServer
from agents.rollouts import TreeRecord, fork_points, grow, siblings
from agents.run import run_tasks
from coordinator import Coordinator
from tests.agents._helpers import by_step, call
from tests.conftest import make_repo

CALC = "def add(a, b):\n    return a + b\n"
CHECK = "from calc import mul\nfrom sub import sub\nassert mul(2, 3) == 6 and sub(5, 3) == 2\n"
TEST = "python3 check.py"
MUL = dict(path="calc.py", old="    return a + b\n",
           new="    return a + b\n\n\ndef mul(a, b):\n    return a * b\n")
SUB = dict(path="calc.py", old="    return a + b\n",
           new="    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
TOLD = "calc.py is mine"


def agent_1() -> Any:
    return by_step([call("edit", **MUL), call("send_message", to="agent-2", text=TOLD),
                    call("finish", summary="mul")])


def agent_2(payload: dict[str, Any]) -> Reply:
    messages = payload["messages"]
    if not any(TOLD in str(m.get("content")) for m in messages):
        return call("run", command="sleep 0.05")
    tools = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
    blocked = sum("BLOCKED" in t for t in tools)
    seed = payload.get("seed")
    if seed is None:  # the recorded run
        return call("edit", **SUB) if blocked < 2 else call("finish", summary="gave up")
    if any("wrote sub.py" in t for t in tools) or (seed % 4 == 0 and blocked >= 1):
        return call("finish", summary="done")
    if seed % 4 == 0:
        return call("edit", **SUB)
    body = "a + b" if seed % 4 == 2 else "a - b"
    return call("write_file", path="sub.py", content=f"def sub(a, b):\n    return {body}\n")


@dataclass
class Grown:
    state: Path
    tree: TreeRecord
    requests: list[dict[str, Any]]
    """The model server's requests while the tree grew."""
    base_url: str


def scripts() -> dict[str, Any]:
    return {"a1": agent_1(), "a2": agent_2}


async def record_run(tmp: Path, base_url: str) -> Path:
    """The recorded run's state directory (token ids asked for), its models served at
    `base_url` from `scripts()`."""
    repo = make_repo(tmp / "repo", {"calc.py": CALC, "check.py": CHECK})
    state = tmp / "state"
    report = await run_tasks(repo, ["add mul", "add sub"], model=["openai/a1", "openai/a2"],
                             base_url=base_url, state=state, tokens=True, max_steps=12)
    assert [a.status for a in report.agents] == ["finished", "finished"]
    return state


async def grow_tree(tmp: Path) -> Grown:
    async with ScriptedModelServer() as server:
        for model, script in scripts().items():
            server.script(model, script)
        state = await record_run(tmp, server.base_url)
        async with Coordinator.open(state) as coord:
            heads = {m: coord.scope(m).head for m in ("agent-1", "agent-2")}
            points = await coord.io(lambda: fork_points(coord.trace, heads, interventions=True))
            before = len(server.requests)
            tree = await grow(coord, list(heads), points, siblings(4, seed=0), test=TEST,
                              base_url=server.base_url, tree_id="rt-test", max_steps=12)
            requests = [r.json() for r in server.requests[before:]]
        return Grown(state, tree, requests, server.base_url)


def grown(tmp: Path) -> Grown:
    return asyncio.run(grow_tree(tmp))
