"""`--merge corral` for N agents (`_merge.merge_agents`): the agents' scopes folded into
a fork of agent 2's (agent 1, then agents 3..N), by `Coordinator.merge_team`; the tree
is stock git's sequential merges'; a conflict stops the fold unless the LLM resolver
(the real OpenAI SDK against the local scripted model server) resolves it."""

from __future__ import annotations

from pathlib import Path

from agents.model_server import ScriptedModelServer
from bench.cooperbench import load_tasks, mini_suite
from bench.cooperbench._agent_report import AgentReport
from bench.cooperbench._merge import merge_agents
from bench.cooperbench._repos import base_repo
from coordinator import Coordinator, Scope
from tests.bench.test_cooperbench_fold import _sequential_git
from tests.bench.test_cooperbench_merge import _resolve_union


async def _agents(coord: Coordinator, patches: list[str]) -> list[Scope]:
    scopes = []
    for k, patch in enumerate(patches, 1):
        s = await coord.root.fork(f"u.agent{k}")
        await s.patch(patch)
        scopes.append(s)
    return scopes


async def test_the_corral_merge_folds_n_agents_as_git_does(tmp_path: Path) -> None:
    """textkit 1-4-5 merges: the merged scope's tree is git's; 1-3-4 stops at agent 3
    (its import block conflicts with agent 2's) with that merge's conflicts."""
    task = load_tasks(mini_suite() / "dataset")["mini_textkit_task/task1"]
    repo = base_repo(task, mini_suite() / "repos", tmp_path / "cache")
    async with Coordinator.open(tmp_path / "state", repo=repo) as coord:
        clean = [task.features[f].patch for f in (1, 4, 5)]
        target, m = await merge_agents(coord, await _agents(coord, clean), "u.merged", None,
                                       None, AgentReport())
        step, tree = _sequential_git(repo, tmp_path / "ref", clean)
        assert m.tree is not None and step is None
        assert str(coord.trace.commit(target.head).tree_id) == tree
        for s in list(coord.scopes.values()):
            if s.name.startswith("u."):
                await s.discard()
        clash = [task.features[f].patch for f in (1, 3, 4)]
        target, m = await merge_agents(coord, await _agents(coord, clash), "u.merged", None,
                                       None, AgentReport())
        assert m.tree is None and [c.path for c in m.conflicts] == ["textkit/core.py"]
        assert b"separator" in await target.read("textkit/core.py")  # agent 1 merged


async def test_the_resolver_resolves_each_conflicting_step(server: ScriptedModelServer,
                                                          tmp_path: Path) -> None:
    """With an LLM resolver the conflicting step is resolved (both imports kept) and the
    fold goes on to the end."""
    server.script("r", _resolve_union)
    task = load_tasks(mini_suite() / "dataset")["mini_textkit_task/task1"]
    repo = base_repo(task, mini_suite() / "repos", tmp_path / "cache")
    async with Coordinator.open(tmp_path / "state", repo=repo) as coord:
        patches = [task.features[f].patch for f in (1, 3, 4)]
        report = AgentReport()
        target, m = await merge_agents(coord, await _agents(coord, patches), "u.merged",
                                       "llm:openai/r", server.base_url, report)
        assert m.tree is not None, report.notes
        text = await target.read("textkit/core.py")
        assert b"import string" in text and b"import unicodedata" in text
        assert b"separator" in text and report.record.get("resolved") == ("textkit/core.py",)
