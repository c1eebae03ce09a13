"""A task's Corral state: its `env` scope is built once, and again after a killed build."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.cooperbench import TaskState
from bench.cooperbench._repos import git
from tests.bench._calc import calc_task


def test_an_env_a_killed_build_left_is_built_again(repo: Path, tmp_path: Path,
                                                    env_cache: Path) -> None:
    """A run killed while building the environment leaves a live `env` scope with
    nothing in it; the next run (same state, as --resume does) must not take it for
    a built one."""
    from coordinator import Coordinator

    task, state = calc_task(tmp_path / "task"), tmp_path / "state"
    head = git(repo, "rev-parse", "HEAD").stdout.strip()

    async def go() -> tuple[bool, bool]:
        async with Coordinator.open(state, repo=repo, base=head) as coord:
            await coord.root.fork("env")  # the kill came right after the fork
        async with TaskState.open(task, repo, state, env_cache, mini=True) as opened:
            env_dir = opened.env.path / opened.recipe.paths[0]
            return env_dir.is_dir(), opened.env.discarded

    built, discarded = asyncio.run(go())
    assert built and not discarded
