"""Rollout trees end to end: a recorded two-agent run forked at its supervisor's blocks,
four siblings of the team each with its own seed, continued through the real `openai` SDK
against the scripted model server, graded by real test runs, kept in the trace."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agents.model_server import ScriptedModelServer
from agents.rollouts import Budget, fork_points, grow, read_tree, siblings
from coordinator import Coordinator, ExecOutcome, ModelCall
from coordinator.cli import app
from tests.agents._rollouts_run import TEST, TOLD, Grown, record_run, scripts

pytestmark = pytest.mark.slow  # the session's rollout tree takes seconds to grow


@pytest.fixture
def tree(rollout_tree: Grown) -> Grown:
    return rollout_tree


def test_each_block_forks_four_graded_siblings_that_differ(tree: Grown) -> None:
    """Both blocks of agent-2 are fork points; at each, four siblings with seeds 0-3 are
    graded by running check.py in the merged team: seeds 1 and 3 pass, 0 and 2 fail."""
    t = tree.tree
    assert [(f.id, f.member, f.branch_step, f.reason.split()[0]) for f in t.forks] == [
        ("f1", "agent-2", 1, "blocked"), ("f2", "agent-2", 2, "blocked")]
    assert [leaf.id for leaf in t.leaves] == [f"f{i}s{j}" for i in (1, 2) for j in range(4)]
    assert [leaf.sampling.seed for leaf in t.leaves] == [0, 1, 2, 3] * 2
    assert [leaf.reward for leaf in t.leaves] == [0.0, 1.0, 0.0, 1.0] * 2
    assert all(leaf.status == "graded" and leaf.grade and leaf.grade.merged
               for leaf in t.leaves)
    assert {leaf.grade.returncode for leaf in t.leaves if leaf.grade} == {0, 1}
    heads = {leaf.members[1].head for leaf in t.leaves}
    assert len(heads) == len(t.leaves)  # every sibling's agent-2 went its own way


def test_a_leaf_is_graded_by_a_test_run_in_its_own_scope(tree: Grown) -> None:
    """The grade is an `exec` effect of the leaf's grading scope whose tree holds both
    members' work; its outcome is the test's exit code."""

    async def check() -> None:
        async with Coordinator.open(tree.state) as coord:
            leaf = tree.tree.leaves[1]
            assert leaf.grade is not None and leaf.grade.effect is not None
            grade = coord.scope(leaf.grade.scope)
            run = [e.effect for e in coord.trace.log(grade.head)
                   if e.effect and e.effect.id == leaf.grade.effect]
            assert run and isinstance(run[0].outcome, ExecOutcome)
            assert run[0].outcome.returncode == 0
            assert " ".join(run[0].intent.argv).endswith(TEST)  # type: ignore[union-attr]
            assert b"def mul" in await grade.read("calc.py")
            assert b"a - b" in await grade.read("sub.py")

    asyncio.run(check())


def test_the_prefix_is_served_from_the_trace(tree: Grown) -> None:
    """No request repeats the recorded prefix: every request of the tree carries its
    sibling's seed and starts after the fork; agent-1, finished at the cut, makes none;
    the siblings' model calls before the fork are the recorded run's own commits."""
    assert tree.requests and all(isinstance(r.get("seed"), int) for r in tree.requests)
    assert {r["model"] for r in tree.requests} == {"a2"}
    live = sum(leaf.members[1].steps - tree.tree.fork(leaf.parent).branch_step
               for leaf in tree.tree.leaves)
    assert live == len(tree.requests)
    assert all(r.get("return_token_ids") and r.get("logprobs") for r in tree.requests)

    async def check() -> None:
        async with Coordinator.open(tree.state) as coord:
            fork = tree.tree.forks[0]
            node = fork.members[1]
            fork_effect = coord.trace.log(node.head)[-1]  # the node's own scope.fork
            assert fork_effect.parents[0] == fork.commit  # forked exactly at the point
            original = [e.commit for e in coord.trace.log(fork.commit)]
            for leaf in tree.tree.leaves[:4]:
                line = [e.commit for e in coord.trace.log(leaf.members[1].head)]
                assert line[: len(original)] == original
                calls = [e for e in coord.trace.log(leaf.members[1].head)[len(original):]
                         if e.effect and isinstance(e.effect.intent, ModelCall)]
                assert calls and all(e.effect.outcome.tokens for e in calls)  # type: ignore[union-attr]

    asyncio.run(check())


def test_the_cut_carries_the_message_in_flight(tree: Grown) -> None:
    """At the first block agent-2 had not yet taken agent-1's message (it took it in the
    very call that asked for the blocked edit): the fork node's inbox holds it and every
    sibling's first live request shows it. At the second block it was taken already."""
    first, second = tree.tree.forks
    assert [m.inbox for m in first.members] == [0, 1]
    assert [m.inbox for m in second.members] == [0, 0]
    firsts = [r for r in tree.requests
              if sum(1 for m in r["messages"] if m.get("role") == "assistant") == 1]
    assert len(firsts) == 4
    assert all(any(f"Message from agent-1: {TOLD}" == m.get("content") for m in r["messages"])
               for r in firsts)


def test_a_forked_teammates_earlier_write_is_still_guarded(tree: Grown) -> None:
    """In the seed-0 sibling agent-2 tries calc.py again: the conflict guard, comparing
    with this leaf's agent-1 only, still blocks it (its mul edit predates the fork)."""

    async def check() -> None:
        async with Coordinator.open(tree.state) as coord:
            leaf = tree.tree.leaves[0]
            own = [e.effect for e in coord.trace.log(leaf.members[1].head)
                   if e.effect and e.effect.scope == leaf.members[1].scope]
            blocked = [e for e in own if e.status == "blocked"]
            assert len(blocked) == 1 and "calc.py" in (blocked[0].decision.reason or "")  # type: ignore[union-attr]
            assert blocked[0].decision.policy == "conflict-guard"  # type: ignore[union-attr]

    asyncio.run(check())


def test_every_node_opens_with_corral_trace_and_stock_git(tree: Grown) -> None:
    """A leaf member is a scope `corral trace log` shows; the tree's manifest and every
    node are refs stock git reads."""
    runner = CliRunner()
    leaf = tree.tree.leaves[1]
    shown = runner.invoke(app, ["trace", "log", leaf.members[1].scope, "--state",
                                str(tree.state), "--json"])
    assert shown.exit_code == 0, shown.output
    kinds = [json.loads(line)["effect"]["intent"]["kind"] for line in shown.stdout.splitlines()]
    assert "model.call" in kinds and "fs.write" in kinds
    git = ["git", "--git-dir", str(tree.state / "trace.git")]
    manifest = subprocess.run([*git, "show", "refs/corral/rollouts/rt-test:tree.json"],
                              capture_output=True, text=True, check=True).stdout
    assert json.loads(manifest)["leaves"][1]["grade"]["reward"] == 1.0
    for node in (tree.tree.forks[0].members[1], leaf.members[1]):
        log = subprocess.run([*git, "log", "--format=%H", f"refs/corral/scopes/{node.scope}"],
                             capture_output=True, text=True, check=True).stdout.split()
        assert log[0] == node.head
    reachable = subprocess.run([*git, "rev-list", "refs/corral/rollouts/rt-test"],
                               capture_output=True, text=True, check=True).stdout.split()
    assert leaf.members[1].head in reachable


def test_the_cli_lists_and_shows(tree: Grown) -> None:
    """`corral rollouts list` and `show` read the tree; an unknown tree is an error."""
    runner = CliRunner()
    listed = runner.invoke(app, ["rollouts", "list", "--state", str(tree.state)])
    assert listed.exit_code == 0 and listed.stdout.startswith("rt-test\t2 forks\t8 leaves")
    shown = runner.invoke(app, ["rollouts", "show", "rt-test", "--state", str(tree.state),
                                "--json"])
    assert json.loads(shown.stdout)["id"] == "rt-test"
    missing = runner.invoke(app, ["rollouts", "show", "nope", "--state", str(tree.state)])
    assert missing.exit_code == 1 and "no rollout tree" in missing.output


def test_the_cli_grows_a_tree_from_a_run(tmp_path: Path, served: Any) -> None:
    """`corral rollouts grow` on a run's state finds its team and forks before every
    second model call, two siblings each, graded with --test."""
    url = served(scripts())
    state = asyncio.run(record_run(tmp_path, url))
    done = CliRunner().invoke(app, ["rollouts", "grow", "--state", str(state), "--every",
                                    "2", "-k", "2", "--seed", "1", "--test", TEST,
                                    "--base-url", url, "--tree", "rt-cli", "--json"])
    assert done.exit_code == 0, done.output
    record = json.loads(done.stdout)
    assert record["id"] == "rt-cli" and record["forks"]
    assert {f["member"] for f in record["forks"]} == {"agent-1", "agent-2"}
    assert all(f["reason"] == "every 2" for f in record["forks"])
    assert len(record["leaves"]) == 2 * len(record["forks"])
    assert all(leaf["grade"]["command"] == TEST for leaf in record["leaves"])
    nothing = CliRunner().invoke(app, ["rollouts", "grow", "--state", str(state)])
    assert nothing.exit_code == 1 and "no fork point" in nothing.output


async def test_a_budget_bounds_the_tree(tmp_path: Path, server: ScriptedModelServer) -> None:
    """With a token budget below one sibling's spending, the first sibling is stopped at
    its next step, no other starts, and the tree says why."""
    for model, script in scripts().items():
        server.script(model, script)
    state = await record_run(tmp_path, server.base_url)
    async with Coordinator.open(state) as coord:
        heads = {m: coord.scope(m).head for m in ("agent-1", "agent-2")}
        points = await coord.io(lambda: fork_points(coord.trace, heads, interventions=True))
        tree = await grow(coord, list(heads), points, siblings(4), test=TEST,
                          base_url=server.base_url, budget=Budget(max_tokens=500),
                          parallel=1, max_steps=12)
        assert len(tree.leaves) == 1 and tree.leaves[0].status == "stopped"
        assert tree.stopped is not None and "token budget" in tree.stopped
        assert tree.leaves[0].tokens >= 500 and tree.tokens == tree.leaves[0].tokens
        assert read_tree(coord.trace, tree.id) == tree
