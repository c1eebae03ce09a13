"""What a supervisor decision is worth: each decision of a finished run taken away once.

`ablate` forks the team just before every decision `fork_points(interventions=True)`
finds (a block by a policy, an inject, a handoff, a rewind), through the team's
consistent cut, and continues it twice as a rollout tree (`grow` with `decisions`): the
leaf `f<i>s0` with the decision (`variant` "with") and `f<i>s1` without it ("without";
see `_variant` for what each arm does per kind). Both are sampled as the recorded run
(no seed or temperature of their own), their prefix served from the trace, and graded by
the test command in the merged team (a merge conflict is a fail).

The report (`Ablation`, from the tree record alone) pairs the two leaves of each
decision: the decision helped when with it the team passes and without it fails, hurt in
the reverse case; per kind how often it changed the outcome; over all decisions the exact
McNemar test (a two-sided sign test on the discordant pairs); the live tokens of each arm.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import comb
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from coordinator import Coordinator, Policy

from .._prices import load_prices
from ..providers import Provider
from ._grow import Budget, Grader, grow
from ._points import fork_points
from ._state import run_defaults, team_of
from ._tree import LeafNode, Sampling, TreeRecord
from ._variant import Intervention, intervention

__all__ = ["Ablation", "KindSummary", "Pair", "ablate", "ablate_in_state", "ablation",
           "mcnemar_exact"]


def mcnemar_exact(helped: int, hurt: int) -> float:
    """The two-sided exact McNemar p-value of `helped` against `hurt` discordant pairs
    (a binomial sign test with p = 1/2; 1.0 when there are none)."""
    n = helped + hurt
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(helped, hurt) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Pair(_Model):
    """One decision and its two leaves."""

    fork: str
    decision: str
    kind: str
    member: str
    with_leaf: str
    without_leaf: str
    with_reward: float | None
    without_reward: float | None
    with_tokens: int
    without_tokens: int
    without_conflicts: tuple[str, ...] = ()
    """Paths the "without" leaf's merge conflicted on."""
    with_merge: str | None = None
    without_merge: str | None = None
    """An evaluator's merge verdict on each leaf (`clean`, `conflicts`, ...)."""

    @property
    def graded(self) -> bool:
        return self.with_reward is not None and self.without_reward is not None

    @property
    def effect(self) -> str:
        """`helped` (with: pass, without: fail), `hurt` (the reverse), `same`, `ungraded`."""
        if not self.graded:
            return "ungraded"
        passed = (self.with_reward == 1.0, self.without_reward == 1.0)
        return {(True, False): "helped", (False, True): "hurt"}.get(passed, "same")


class KindSummary(_Model):
    kind: str
    decisions: int
    graded: int
    changed: int
    helped: int
    hurt: int
    with_tokens: int
    without_tokens: int


class Ablation(_Model):
    tree: str
    test: str | None
    pairs: tuple[Pair, ...]
    kinds: tuple[KindSummary, ...]
    helped: int
    hurt: int
    p_value: float
    """Exact McNemar over every graded decision."""
    with_tokens: int
    without_tokens: int
    skipped: tuple[str, ...] = ()
    """Interventions left out, and why."""


def _pair(record: TreeRecord, fork_id: str, leaves: Sequence[LeafNode]) -> Pair | None:
    fork = record.fork(fork_id)
    arms = {leaf.variant: leaf for leaf in leaves if leaf.parent == fork_id}
    with_, without = arms.get("with"), arms.get("without")
    if fork.decision is None or with_ is None or without is None:
        return None
    return Pair(fork=fork.id, decision=fork.decision, kind=fork.decision_kind or "",
                member=fork.member, with_leaf=with_.id, without_leaf=without.id,
                with_reward=with_.reward, without_reward=without.reward,
                with_tokens=with_.tokens, without_tokens=without.tokens,
                without_conflicts=without.grade.conflicts if without.grade else (),
                with_merge=with_.grade.merge_status if with_.grade else None,
                without_merge=without.grade.merge_status if without.grade else None)


def ablation(record: TreeRecord, skipped: Sequence[str] = ()) -> Ablation:
    """The report of an ablation tree (`ablate`'s record)."""
    pairs = [p for f in record.forks if (p := _pair(record, f.id, record.leaves)) is not None]
    kinds = []
    for kind in sorted({p.kind for p in pairs}):
        mine = [p for p in pairs if p.kind == kind]
        effects = [p.effect for p in mine]
        kinds.append(KindSummary(
            kind=kind, decisions=len(mine), graded=sum(p.graded for p in mine),
            changed=effects.count("helped") + effects.count("hurt"),
            helped=effects.count("helped"), hurt=effects.count("hurt"),
            with_tokens=sum(p.with_tokens for p in mine),
            without_tokens=sum(p.without_tokens for p in mine)))
    helped = sum(k.helped for k in kinds)
    hurt = sum(k.hurt for k in kinds)
    return Ablation(tree=record.id, test=record.test, pairs=tuple(pairs), kinds=tuple(kinds),
                    helped=helped, hurt=hurt, p_value=mcnemar_exact(helped, hurt),
                    with_tokens=sum(p.with_tokens for p in pairs),
                    without_tokens=sum(p.without_tokens for p in pairs),
                    skipped=tuple(skipped))


async def ablate(
    coord: Coordinator,
    team: Sequence[str],
    *,
    test: str | None = None,
    grader: Grader | None = None,
    team_policies: Sequence[Policy] | None = None,
    base_url: str | None = None,
    tokens: bool = True,
    provider_for: Callable[[str], Provider] | None = None,
    budget: Budget | None = None,
    max_steps: int = 30,
    parallel: int = 4,
    tree_id: str | None = None,
    test_timeout: float = 600.0,
) -> Ablation:
    """Ablate every supervisor decision on the branches of `team` (see the module); the
    two leaves of each are kept as the tree `tree_id`, graded with `test` or by `grader`
    (see `grow`, as `team_policies`). Raises ValueError when the run has no decision to
    ablate or nothing grades the leaves, plus what `grow` raises."""
    if test is None and grader is None:
        raise ValueError("an ablation needs a test command or a grader")
    heads = {m: coord.scope(m).head for m in team}
    points = await coord.io(lambda: fork_points(coord.trace, heads, interventions=True))
    found = [(p, await coord.io(intervention, coord.trace, heads, p)) for p in points]
    chosen = [(p, d) for p, d in found if isinstance(d, Intervention)]
    skipped = [f"{p.reason}: {d}" for p, d in found if isinstance(d, str)]
    if not chosen:
        raise ValueError("the run has no supervisor decision to ablate" + (
            f" ({'; '.join(skipped)})" if skipped else ""))
    record = await grow(
        coord, team, [p for p, _ in chosen], [Sampling()], test=test, base_url=base_url,
        tokens=tokens, provider_for=provider_for, budget=budget, max_steps=max_steps,
        parallel=parallel, tree_id=tree_id, test_timeout=test_timeout,
        decisions=[d for _, d in chosen], grader=grader, team_policies=team_policies)
    return ablation(record, skipped)


async def ablate_in_state(
    state: str | Path,
    *,
    test: str,
    team: Sequence[str] = (),
    base_url: str | None = None,
    tokens: bool = True,
    max_tokens: int | None = None,
    max_cost: float | None = None,
    prices: str | Path | None = None,
    max_steps: int | None = None,
    parallel: int = 4,
    tree_id: str | None = None,
) -> Ablation:
    """Open the state and ablate its run's decisions (the team, model server and step
    limit default as in `grow_in_state`)."""
    url, steps = run_defaults(state, base_url, max_steps)
    async with Coordinator.open(state) as coord:
        members = await team_of(coord, team, state)
        return await ablate(coord, members, test=test, base_url=url, tokens=tokens,
                            budget=Budget(max_tokens, max_cost, load_prices(prices)),
                            max_steps=steps, parallel=parallel, tree_id=tree_id)
