"""Growing a tree in a state directory: the team, its model server and its limits found in
the run's record when there is one (`run.json` of `corral run`), else given."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from coordinator import Coordinator

from .._prices import load_prices
from .._transcript import model_calls
from ..runs import read_record
from ._grow import Budget, Executor, _Grower, grow
from ._points import Selector, fork_points
from ._tree import Sampling, TreeRecord, read_tree, tree_names

__all__ = ["default_team", "grow_in_state", "load_selector", "siblings"]


def load_selector(spec: str) -> Selector:
    """The function `module:attr` names. Raises ValueError when it names none."""
    module, _, attr = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module), attr) if attr else None
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load {spec!r}: {e}") from e
    if not callable(found):
        raise ValueError(f"{spec!r} is not module:function")
    return cast(Selector, found)


def siblings(k: int, seed: int | None = 0, temperature: float | None = None
             ) -> list[Sampling]:
    """K siblings' sampling: seeds `seed`, `seed+1`... (None: no seed), one temperature."""
    if k < 1:
        raise ValueError("k must be at least 1")
    return [Sampling(seed=None if seed is None else seed + j, temperature=temperature)
            for j in range(k)]


def default_team(coord: Coordinator) -> list[str]:
    """The run's agents (its record's), else every live scope a model drove that is no
    supervisor's and no rollout tree's (blocking)."""
    record = read_record(coord.state)
    if record is not None:
        names = [f"agent-{i}" for i in range(1, len(record.tasks) + 1)]
        return [n for n in names if n in coord.scopes]
    trees = {t for t in tree_names(coord.trace)}
    mine: set[str] = set()
    for t in trees:
        tree = read_tree(coord.trace, t)
        mine |= {m.scope for f in tree.forks for m in f.members}
        mine |= {m.scope for leaf in tree.leaves for m in leaf.members}
        mine |= {leaf.grade.scope for leaf in tree.leaves if leaf.grade}
    return [n for n, s in coord.scopes.items() if n != "root" and not n.startswith("supervisor")
            and n not in mine and not s.discarded
            and any(e.scope == n for _, e in model_calls(coord.trace, s.head))]


def run_defaults(state: str | Path, base_url: str | None, max_steps: int | None
                 ) -> tuple[str | None, int]:
    """The model server and step limit: as given, else the run record's (else none, 30)."""
    record = read_record(state)
    url = base_url if base_url is not None else record.base_url if record else None
    steps = max_steps if max_steps is not None else record.max_steps if record else 30
    return url, steps


async def team_of(coord: Coordinator, team: Sequence[str], state: str | Path) -> list[str]:
    """`team`, else the scopes a model drove. Raises ValueError when there are none."""
    members = list(team) or await coord.io(default_team, coord)
    if not members:
        raise ValueError(f"{state} holds no scope a model drove: name the team (--scope)")
    return members


async def grow_in_state(
    state: str | Path,
    *,
    team: Sequence[str] = (),
    interventions: bool = False,
    every: int | None = None,
    effects: Sequence[str] = (),
    select: str | None = None,
    k: int = 4,
    seed: int | None = 0,
    temperature: float | None = None,
    test: str | None = None,
    base_url: str | None = None,
    tokens: bool = True,
    max_tokens: int | None = None,
    max_cost: float | None = None,
    prices: str | Path | None = None,
    max_steps: int | None = None,
    parallel: int = 4,
    tree_id: str | None = None,
    executor: str = "local",
    address: str | None = None,
) -> TreeRecord:
    """Open the state, choose the fork points and grow the tree (see `grow`). The team
    defaults to `default_team`; `base_url` and `max_steps` to the run record's. With
    `executor="ray"` each sibling is a Ray task (`on_ray.RayExecutor`) on the cluster at
    `address` (None: a local one started here). Raises ValueError when no fork point is
    chosen (or for a bad option, or Ray missing), plus what `grow` raises."""
    url, steps = run_defaults(state, base_url, max_steps)
    chosen = load_selector(select) if select else None
    run_on = executor_for(executor, address, url, tokens)
    async with Coordinator.open(state) as coord:
        members = await team_of(coord, team, state)
        heads = {m: coord.scope(m).head for m in members}
        points = await coord.io(lambda: fork_points(
            coord.trace, heads, interventions=interventions, every=every, effects=effects,
            select=chosen))
        if not points:
            raise ValueError("no fork point: give --interventions, --every K, --at EFFECT or "
                             "--select (and check the run has such effects)")
        return await grow(
            coord, members, points, siblings(k, seed, temperature), test=test, base_url=url,
            tokens=tokens, budget=Budget(max_tokens, max_cost, load_prices(prices)),
            max_steps=steps, parallel=parallel, tree_id=tree_id, executor=run_on)


def executor_for(name: str, address: str | None, base_url: str | None, tokens: bool
                 ) -> Callable[[_Grower], Executor] | None:
    """The executor named `name` ("local": None, grow's default; "ray": connected to
    the cluster at `address`). Raises ValueError for another name or Ray missing."""
    if name == "local":
        return None
    if name != "ray":
        raise ValueError(f"unknown executor {name!r}: local or ray")
    try:
        from .on_ray import RayExecutor, connect
    except ImportError as e:
        raise ValueError(f"--executor ray needs Ray (pip install 'ray'): {e}") from e
    connect(address)
    return lambda g: RayExecutor(g, base_url=base_url, tokens=tokens)
