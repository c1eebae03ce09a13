"""`corral bench cooperbench --ablate`: a supervised unit's guard decision taken away.

Two builtin agents (CodingAgent over the real OpenAI SDK, scripted by the local model
server) on the mini suite's kvstore 3-4: agent 1 adds `keys()` at the end of store.py;
agent 2 adds the defaults and, at the same place, a `__repr__`, which conflicts with
agent 1's method, so the conflict guard blocks that write and agent 2 writes the defaults
alone. The unit passes. The ablation forks the team before the blocked call: with the
block the leaf passes again; without it agent 2's conflicting write lands, the plain merge
conflicts and CooperBench's rules fail both features."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agents.model_server import Reply, ScriptedModelServer
from bench.cooperbench import AgentOptions, RunSpec
from coordinator import Coordinator
from coordinator.cli import app
from tests.agents._helpers import call, steps_of
from tests.bench._mini import one_result, prompt_text

pytestmark = pytest.mark.slow

BASE = '''"""An in-memory key-value store."""


class Store:
    def __init__(self):
        self._data = {}

    def set(self, key, value):
        self._data[key] = value

    def get(self, key, default=None):
        return self._data.get(key, default)

    def delete(self, key):
        self._data.pop(key, None)

    def __len__(self):
        return len(self._data)
'''
KEYS = BASE + "\n    def keys(self):\n        return sorted(self._data)\n"
DEFAULTS = BASE.replace(
    "    def __init__(self):\n        self._data = {}\n",
    "    def __init__(self, defaults=None):\n        self._data = {}\n"
    "        self._defaults = dict(defaults or {})\n").replace(
    "        return self._data.get(key, default)\n",
    "        if key in self._data:\n            return self._data[key]\n"
    "        if default is None:\n            return self._defaults.get(key)\n"
    "        return default\n")
GREEDY = DEFAULTS + "\n    def __repr__(self):\n        return f\"Store({self._data!r})\"\n"
PATH = "kvstore/store.py"


def _last_tool(payload: dict[str, Any]) -> str:
    tools = [m for m in payload["messages"] if m.get("role") == "tool"]
    return str(tools[-1].get("content", "")) if tools else ""


def worker(server: ScriptedModelServer) -> Any:
    def reply(payload: dict[str, Any]) -> Reply:
        text = prompt_text(payload)
        step = steps_of(payload)
        if "keys()" in text.split("Another agent")[0]:  # agent 1: feature 3
            return call("write_file", path=PATH, content=KEYS) if step == 0 else call(
                "finish", summary="keys")
        # Agent 2 writes once agent 1's write is done (its second request came), so the
        # guard always sees agent 1's method first.
        first_done = any(steps_of(json.loads(r.body)) >= 1 and "keys()" in prompt_text(
            json.loads(r.body)).split("Another agent")[0] for r in server.requests)
        if not first_done:
            return call("list_files", path=".")
        wrote = [m for m in payload["messages"] if m.get("role") == "assistant"
                 and "write_file" in json.dumps(m)]
        if not wrote:
            return call("write_file", path=PATH, content=GREEDY)
        if "blocked" in _last_tool(payload).lower() and len(wrote) == 1:
            return call("write_file", path=PATH, content=DEFAULTS)
        return call("finish", summary="defaults")

    return reply


def _spec(server: ScriptedModelServer, out: Path, ablate: bool = True) -> RunSpec:
    return RunSpec(out=out, task="kvstore", pairs="3-4", settings=("supervised",),
                   agent="builtin", options=AgentOptions(model="openai/w",
                                                         base_url=server.base_url),
                   workers=1, max_steps=16, ablate=ablate)


def test_ablate_says_the_guards_block_made_the_unit_pass(server: ScriptedModelServer,
                                                         tmp_path: Path) -> None:
    server.script("w", worker(server))
    r = one_result(_spec(server, tmp_path))
    assert r.status == "passed" and r.blocked == 1, r.reason
    a = r.ablation
    assert a is not None and "kinds" in a, a
    (pair,) = a["pairs"]
    assert pair["kind"] == "block:conflict-guard"
    assert (pair["with_reward"], pair["without_reward"]) == (1.0, 0.0)
    assert (pair["with_merge"], pair["without_merge"]) == ("clean", "conflicts")
    (kind,) = a["kinds"]
    assert kind["decisions"] == kind["changed"] == kind["helped"] == 1 and kind["hurt"] == 0
    assert a["helped"] == 1 and a["hurt"] == 0
    assert kind["with_tokens"] > 0 and kind["without_tokens"] > 0

    # The leaves are a rollout tree in the task's trace, graded per feature by
    # CooperBench's rules; the unit's scopes and the tree's were discarded after it.
    async def tree() -> Any:
        from agents.rollouts import read_tree

        async with Coordinator.open(Path(r.trace)) as coord:
            assert {n for n, s in coord.scopes.items() if not s.discarded} == {"root", "env"}
            return read_tree(coord.trace, a["tree"])

    record = asyncio.run(tree())
    # The export's rewards carry the evaluator's per-feature results and merge verdict.
    from agents.rollouts import export_tree
    from coordinator.store import open_trace

    trace = open_trace(Path(r.trace))
    try:
        export_tree(trace, a["tree"], "rllm", tmp_path / "tree.jsonl")
    finally:
        trace.close()
    episodes = {e["node_id"]: e for e in map(json.loads,
                                             (tmp_path / "tree.jsonl").read_text().splitlines())}
    assert episodes[pair["with_leaf"]]["info"]["feature_rewards"] == [1.0, 1.0]
    assert episodes[pair["with_leaf"]]["info"]["merge_clean"] is True
    assert episodes[pair["without_leaf"]]["info"]["feature_rewards"] == [0.0, 0.0]
    assert episodes[pair["without_leaf"]]["info"]["merge_clean"] is False
    assert [episodes[pair[k]]["reward"] for k in ("with_leaf", "without_leaf")] == [1.0, 0.0]
    leaves = {leaf.variant: leaf for leaf in record.leaves}
    assert leaves["with"].grade.evaluator == "cooperbench"
    assert [(f.id, f.passed) for f in leaves["with"].grade.features] == [(3, True), (4, True)]
    assert not any(f.passed for f in leaves["without"].grade.features)
    assert leaves["without"].grade.merged is False


def test_the_cli_reports_the_ablation(server: ScriptedModelServer, tmp_path: Path) -> None:
    server.script("w", worker(server))
    out = CliRunner().invoke(app, [
        "bench", "cooperbench", "--task", "kvstore", "--pairs", "3-4",
        "--settings", "supervised", "--agent", "builtin", "--model", "openai/w",
        "--base-url", server.base_url, "--workers", "1", "--max-steps", "16", "--ablate",
        "--out", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    a = report["ablation"]
    assert a["units"] == a["ablated"] == 1 and a["helped"] == 1 and a["hurt"] == 0
    assert a["kinds"][0]["kind"] == "block:conflict-guard"
    assert "block:conflict-guard: 1 decisions, 1 changed" in out.stderr


def test_without_ablate_nothing_is_ablated(server: ScriptedModelServer,
                                           tmp_path: Path) -> None:
    server.script("w", worker(server))
    r = one_result(_spec(server, tmp_path, ablate=False))
    assert r.status == "passed" and r.ablation is None
