"""Exporting a rollout tree for RL trainers: verl's, SkyRL's and rLLM's records, loaded back
and checked against the trace's own token ids, and against each trainer's documented type
(verl's own class builds them in `corral bench verl`, bench/verl_check.py: verl needs a
venv of several GB, so the suite checks its documented fields)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agents.providers import Tokens
from agents.rollouts import (
    advantages,
    export_tree,
    read_tree,
    skyrl_batch,
    trajectories,
)
from coordinator.cli import app
from coordinator.store import open_trace
from tests.agents._rollouts_run import Grown

# verl 0.9.1, verl/experimental/agent_loop/agent_loop.py, class AgentLoopOutput:
# https://github.com/volcengine/verl/blob/main/verl/experimental/agent_loop/agent_loop.py
VERL_FIELDS = {"prompt_ids", "response_ids", "response_mask", "response_logprobs",
               "routed_experts", "multi_modal_data", "reward_score", "num_turns", "metrics",
               "extra_fields", "mm_processor_kwargs", "mm_processor_output"}
VERL_REQUIRED = {"prompt_ids", "response_ids", "response_mask", "metrics"}
VERL_METRICS = {"generate_sequences", "tool_calls"}  # class AgentLoopMetrics
# SkyRL, skyrl-train/skyrl_train/generators/base.py, class GeneratorOutput (a TypedDict):
# https://github.com/NovaSky-AI/SkyRL/blob/main/skyrl-train/skyrl_train/generators/base.py
SKYRL_FIELDS = {"prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons",
                "rollout_metrics", "rollout_logprobs", "trajectory_ids", "is_last_step",
                "sampling_masks"}
SKYRL_TRAJECTORY_ID = {"instance_id", "repetition_id"}  # class TrajectoryID
# rLLM, rllm/agents/agent.py, Step.to_dict / Trajectory.to_dict / Episode.to_dict:
# https://github.com/rllm-org/rllm/blob/main/rllm/agents/agent.py
RLLM_STEP = {"prompt_ids", "response_ids", "logprobs", "chat_completions", "observation",
             "thought", "action", "model_response", "model_output", "info", "reward", "done",
             "mc_return", "advantage", "weight_version"}
RLLM_TRAJECTORY = {"uid", "name", "task", "steps", "reward", "info"}
RLLM_EPISODE = {"id", "task", "termination_reason", "is_correct", "trajectories", "metrics",
                "info"}
TREE_FIELDS = {"tree_id", "node_id", "parent_node_id", "advantage"}


pytestmark = pytest.mark.slow  # the session's rollout tree takes seconds to grow


@pytest.fixture
def tree(rollout_tree: Grown) -> Grown:
    return rollout_tree


def _export(tree: Grown, fmt: str, path: Path) -> list[dict[str, Any]]:
    trace = open_trace(tree.state)
    try:
        done = export_tree(trace, "rt-test", fmt, path)  # type: ignore[arg-type]
    finally:
        trace.close()
    assert done.skipped == 0
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == done.records
    return rows


def _turn_tokens(tree: Grown) -> dict[tuple[str, str], list[Tokens]]:
    """Each leaf member's calls' tokens, as the trace keeps them."""
    trace = open_trace(tree.state)
    try:
        record = read_tree(trace, "rt-test")
        return {(t.leaf.id, t.member.member): [turn.tokens for turn in t.turns if turn.tokens]
                for t in trajectories(trace, record)}
    finally:
        trace.close()


def test_verl_records_line_up_with_the_recorded_tokens(tree: Grown, tmp_path: Path) -> None:
    """One verl record per leaf member: the prompt and response are the last call's prompt
    and completion, the mask is 1 exactly on the completions' ids, logprobs sit on them,
    and the replayed prefix is flagged up to the fork (all of agent-1, finished there)."""
    rows = _export(tree, "verl", tmp_path / "v.jsonl")
    assert len(rows) == 2 * len(tree.tree.leaves)
    calls = _turn_tokens(tree)
    for row in rows:
        toks = calls[(row["node_id"], row["agent"])]
        n = len(row["response_ids"])
        assert (len(row["response_mask"]) == len(row["response_logprobs"])
                == len(row["is_replayed_prefix"]) == n)
        last = toks[-1]
        assert row["prompt_ids"] + row["response_ids"] == [*(last.prompt_ids or ()),
                                                           *(last.completion_ids or ())]
        model = [i for i, m in zip(row["response_ids"], row["response_mask"], strict=True) if m]
        assert model == [i for t in toks for i in t.completion_ids or ()]
        probs = [p for p, m in zip(row["response_logprobs"], row["response_mask"], strict=True)
                 if m]
        assert probs == [p for t in toks for p in t.logprobs or ()]
        fork = tree.tree.fork(row["parent_node_id"])
        replayed = sum(r for r, m in zip(row["is_replayed_prefix"], row["response_mask"],
                                         strict=True) if m)
        if row["agent"] == "agent-1":
            assert all(row["is_replayed_prefix"]) and row["branch_step"] == 3
        else:
            assert row["branch_step"] == fork.branch_step
            assert replayed == sum(len(t.completion_ids or ()) for t in toks[:fork.branch_step])
            assert row["is_replayed_prefix"][-1] == 0
        assert row["reward_score"] == next(
            leaf.reward for leaf in tree.tree.leaves if leaf.id == row["node_id"])


def test_advantages_sum_to_zero_in_each_sibling_group(tree: Grown, tmp_path: Path) -> None:
    """A leaf's advantage is its reward less its fork node's mean: zero-sum per group, the
    same for both members of a leaf, in every format."""
    adv = advantages(tree.tree)
    for fork in tree.tree.forks:
        group = [adv[leaf.id] for leaf in tree.tree.leaves if leaf.parent == fork.id]
        assert len(group) == 4 and abs(sum(group)) < 1e-9 and group == [-0.5, 0.5] * 2
    for fmt in ("verl", "skyrl"):
        rows = _export(tree, fmt, tmp_path / f"{fmt}.jsonl")
        for node in {r["parent_node_id"] for r in rows}:
            for agent in ("agent-1", "agent-2"):
                group = [r["advantage"] for r in rows
                         if r["parent_node_id"] == node and r["agent"] == agent]
                assert len(group) == 4 and abs(sum(group)) < 1e-9
    episodes = _export(tree, "rllm", tmp_path / "r.jsonl")
    for node in ("f1", "f2"):
        assert abs(sum(e["advantage"] for e in episodes if e["parent_node_id"] == node)) < 1e-9


def test_verl_records_have_agent_loop_outputs_fields(tree: Grown, tmp_path: Path) -> None:
    """Every AgentLoopOutput field the records carry is one of its documented fields, the
    required ones are there, and the metrics are AgentLoopMetrics'."""
    rows = _export(tree, "verl", tmp_path / "v.jsonl")
    for row in rows:
        own = set(row) - {"is_replayed_prefix", "branch_step", "agent", "scope", "sibling",
                          "seed", "temperature", "feature_rewards", "merge_clean"} - TREE_FIELDS
        assert own <= VERL_FIELDS and VERL_REQUIRED <= own
        assert set(row["metrics"]) == VERL_METRICS and isinstance(row["num_turns"], int)


def test_skyrl_rows_stack_into_a_generator_output(tree: Grown, tmp_path: Path) -> None:
    """SkyRL rows carry GeneratorOutput's per-trajectory fields; stacked they are a
    GeneratorOutput whose lists line up (SkyRL does not import on Python 3.11: checked
    against its documented TypedDict)."""
    rows = _export(tree, "skyrl", tmp_path / "s.jsonl")
    batch = skyrl_batch(rows)
    assert set(batch) <= SKYRL_FIELDS
    assert {"prompt_token_ids", "response_ids", "rewards", "loss_masks"} <= set(batch)
    n = len(rows)
    assert all(len(batch[k]) == n for k in ("prompt_token_ids", "response_ids", "rewards",
                                            "loss_masks", "rollout_logprobs"))
    for ids, mask, probs in zip(batch["response_ids"], batch["loss_masks"],
                                batch["rollout_logprobs"], strict=True):
        assert len(ids) == len(mask) == len(probs) and set(mask) == {0, 1}
    assert all(set(t) == SKYRL_TRAJECTORY_ID for t in batch["trajectory_ids"])
    assert all(isinstance(r, float) for r in batch["rewards"])


def test_rllm_episodes_are_one_per_leaf(tree: Grown, tmp_path: Path) -> None:
    """One rLLM Episode per leaf, one Trajectory per member, one Step per model call with
    its own prompt and completion ids; the steps before the fork say so."""
    episodes = _export(tree, "rllm", tmp_path / "r.jsonl")
    assert len(episodes) == len(tree.tree.leaves)
    calls = _turn_tokens(tree)
    for e in episodes:
        assert RLLM_EPISODE <= set(e) and TREE_FIELDS <= set(e)
        assert e["is_correct"] == (e["reward"] == 1.0)
        assert [t["name"] for t in e["trajectories"]] == ["agent-1", "agent-2"]
        fork = tree.tree.fork(e["parent_node_id"])
        for t in e["trajectories"]:
            assert set(t) == RLLM_TRAJECTORY
            toks = calls[(e["node_id"], t["name"])]
            assert [s["response_ids"] for s in t["steps"]] == [list(x.completion_ids or ())
                                                              for x in toks]
            for s in t["steps"]:
                assert set(s) == RLLM_STEP and len(s["logprobs"]) == len(s["response_ids"])
            if t["name"] == "agent-2":
                flags = [s["info"]["is_replayed_prefix"] for s in t["steps"]]
                assert flags == [True] * fork.branch_step + [False] * (
                    len(flags) - fork.branch_step)
            assert t["steps"][-1]["done"] and t["steps"][-1]["reward"] == e["reward"]


def test_parquet_holds_what_jsonl_holds(tree: Grown, tmp_path: Path) -> None:
    """The same records read back from Parquet (pyarrow) as from JSON lines."""
    for fmt in ("verl", "rllm"):
        lines = _export(tree, fmt, tmp_path / f"{fmt}.jsonl")
        table = _export(tree, fmt, tmp_path / f"{fmt}.parquet")
        key = "node_id"
        assert [r[key] for r in table] == [r[key] for r in lines]
        if fmt == "verl":
            assert [r["response_mask"] for r in table] == [r["response_mask"] for r in lines]
            assert [r["advantage"] for r in table] == [r["advantage"] for r in lines]


def test_the_cli_exports_a_tree(tree: Grown, tmp_path: Path) -> None:
    """`corral rollouts export TREE -f skyrl -o FILE` writes the rows; an unknown format is
    an error."""
    out = tmp_path / "s.jsonl"
    done = CliRunner().invoke(app, ["rollouts", "export", "rt-test", "--state", str(tree.state),
                                    "-f", "skyrl", "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert len(out.read_text().splitlines()) == 2 * len(tree.tree.leaves)
    bad = CliRunner().invoke(app, ["rollouts", "export", "rt-test", "--state", str(tree.state),
                                   "-f", "nope", "-o", str(out)])
    assert bad.exit_code == 1 and "unknown format" in bad.output


def test_export_needs_no_coordinator(tree: Grown, tmp_path: Path) -> None:
    """Export reads the trace read-only, so it runs while the state is open elsewhere."""

    async def with_open() -> int:
        from coordinator import Coordinator

        async with Coordinator.open(tree.state):
            return len(_export(tree, "verl", tmp_path / "v.jsonl"))

    assert asyncio.run(with_open()) == 2 * len(tree.tree.leaves)
