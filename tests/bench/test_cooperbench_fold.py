"""A group's evaluation folds the agents' branches (agent 1 into agent 2, then agent 3,
4, ... into the result, as PR #75's `test_merged_n`): on both workbenches the verdict,
the step that conflicted and the merged tree are those of sequential `git merge`s of
the branches, done here with stock git, on the mini suite's gold patches. No tests run."""

from __future__ import annotations

import asyncio
from itertools import combinations
from pathlib import Path

import pytest

from bench.cooperbench import GitWorkbench, ScopeWorkbench, TaskState, load_tasks, mini_suite
from bench.cooperbench._dataset import Task
from bench.cooperbench._recipe import Recipe
from bench.cooperbench._repos import base_repo, git
from bench.cooperbench._task_state import UnitPolicy
from coordinator import Coordinator


def _task(lib: str) -> Task:
    return load_tasks(mini_suite() / "dataset")[f"mini_{lib}_task/task1"]


def _sequential_git(repo: Path, work: Path, patches: list[str]) -> tuple[int | None, str]:
    """The reference: branch k = base + patch k, then on agent2 `git merge` agent1 and
    each later branch in turn (each committed). (the k-th branch merged that conflicted,
    or None; the tree after the last merge that went through)."""
    work.parent.mkdir(parents=True, exist_ok=True)
    git(work.parent, "clone", "-q", "--shared", str(repo), str(work))
    base = git(work, "rev-parse", "HEAD").stdout.strip()
    for k, patch in enumerate(patches, 1):
        git(work, "checkout", "-q", "-b", f"b{k}", base)
        (work / ".git" / "p.patch").write_text(patch)
        git(work, "apply", ".git/p.patch")
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", f"feature {k}")
    git(work, "checkout", "-q", "b2")
    for k, branch in enumerate(["b1", *(f"b{i}" for i in range(3, len(patches) + 1))], 2):
        if git(work, "merge", "-q", "--no-edit", branch, check=False).returncode:
            return k, ""
    return None, git(work, "rev-parse", "HEAD^{tree}").stdout.strip()


def _check(lib: str, groups: list[tuple[int, ...]], tmp_path: Path, env_cache: Path
           ) -> dict[tuple[int, ...], tuple[int | None, str]]:
    """Both workbenches fold each group as `_sequential_git` does; its (step, tree)s."""
    task = _task(lib)
    repo = base_repo(task, mini_suite() / "repos", env_cache)
    patches = {g: [task.features[f].patch for f in g] for g in groups}
    want = {g: _sequential_git(repo, tmp_path / "ref" / "-".join(map(str, g)), patches[g])
            for g in groups}
    lab = GitWorkbench.create(tmp_path / "lab", repo,
                              git(repo, "rev-parse", "HEAD").stdout.strip())

    async def scopes() -> dict[tuple[int, ...], tuple[int | None, str]]:
        # Merges only: the task state's `env` scope holds no test environment (building
        # one is what a test run needs, and none runs here).
        async with Coordinator.open(tmp_path / "state", repo=repo) as coord:
            st = TaskState(task, coord, await coord.root.fork("env"),
                           Recipe("python", "", (), ()), UnitPolicy())
            out = {}
            for i, g in enumerate(groups):
                m = await ScopeWorkbench(st, f"g{i}").merge(patches[g])
                out[g] = (m.step, m.tree or "")
            return out

    by_git = {g: asyncio.run(lab.merge(patches[g])) for g in groups}
    assert {g: (m.step, m.tree or "") for g, m in by_git.items()} == want
    assert all(m.conflict == (m.step is not None) for m in by_git.values())
    assert asyncio.run(scopes()) == want
    return want


def test_the_fold_of_three_and_four_branches_is_sequential_git_merges(
        tmp_path: Path, env_cache: Path) -> None:
    """textkit: 1-2-3 conflicts at the first step (one function rewritten twice), 1-3-4
    at the second (3 and 4 extend one import block), 1-3-4-5 too; 4-1-5 merges."""
    groups = [(1, 2, 3), (1, 3, 4), (1, 3, 4, 5), (4, 1, 5)]
    want = _check("textkit", groups, tmp_path, env_cache)
    assert {g: step for g, (step, _) in want.items()} == {
        (1, 2, 3): 2, (1, 3, 4): 3, (1, 3, 4, 5): 3, (4, 1, 5): None}


@pytest.mark.slow
@pytest.mark.parametrize("lib", ["textkit", "invoice", "kvstore", "shapes"])
def test_every_mini_group_folds_as_sequential_git_merges(lib: str, tmp_path: Path,
                                                         env_cache: Path) -> None:
    """Every pair, triple and quadruple of the mini suite."""
    ids = list(_task(lib).features)
    groups = [g for n in (2, 3, 4) for g in combinations(ids, n)]
    _check(lib, groups, tmp_path, env_cache)
