"""The merge of a team: N members' branches folded into one scope, one after another, in an
order given or picked by dry runs.

Each step is the two-way `Scope.merge` (real git merge semantics, `store/_merge.py`) of
one member into the scope as the steps before left it, so the verdict and the tree are
those of `git merge` of each branch in turn into a checkout of the scope (the property
`tests/coordinator/test_team_merge.py` checks against stock git).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

from ..records._effects import MergeStrategy
from ..records._errors import MergeError, ScopeDiscarded
from ..records._merges import MergeResult, TeamMerge
from ..scopes._scope import Scope
from ..store._merge import three_way

__all__ = ["MergeOrder", "TeamMerge", "merge_team"]

MergeOrder = Literal["given", "fewest-conflicts"]
""""given": the members' order; "fewest-conflicts": picked step by step by dry runs."""


async def merge_team(
    into: Scope,
    members: Sequence[Scope],
    *,
    order: MergeOrder = "given",
    strategy: MergeStrategy = "fail",
    dry_run: bool = False,
    cause: str | None = None,
) -> TeamMerge:
    """Merge the branches of `members` into `into`, one after another, each with
    `Scope.merge(member, strategy=strategy)` against `into` as the merges before left it.

    `order="given"` folds them in the order given. `order="fewest-conflicts"` picks
    greedily: at each step the member whose merge into the current `into` conflicts in
    the fewest paths (dry runs, `Scope.merge(..., dry_run=True)`; ties go to the member
    given first), so the fold merges as much as it can before a conflict stops it. Its
    cost: with k members left, up to k dry runs before the k-th last merge (the scan
    stops at the first member that would merge clean: no later one can beat it; none
    with one left), so at most N(N+1)/2 - 1 dry runs and N merges for N members.

    A merge that does not merge (with strategy "fail", any conflict; with a favor, what
    git leaves conflicting; or one the policy chain blocks) stops the fold: nothing of
    that member or of the members after it is merged, and what merged before stays, as
    `git merge` of each branch in sequence would leave it (the failed merge is recorded
    on `into`'s branch as a failed effect, as `Scope.merge` records it). The fold is not
    one transaction: each merge is atomic, and writes to `into` between two merges land
    between them.

    `dry_run` computes the same fold and records nothing: it merges over commits no ref
    points at (only blobs, trees and those commits are written into the trace).

    Returns a TeamMerge: the order used, one MergeResult per member merged, the member it
    stopped at (and its failed merge), the tree `into` holds after. Raises MergeError for
    an unknown order or strategy, a member named twice, `into` among the members, or
    branches that share no history; ScopeDiscarded when `into` or a member is discarded
    (all checked before anything merges).
    """
    _check(into, members, order, strategy)
    fold = _DryFold(into, strategy) if dry_run else _Fold(into, strategy, cause)
    await fold.start()
    left = list(members)
    merges: list[MergeResult] = []
    while left:
        if order == "fewest-conflicts" and len(left) > 1:
            left = await _ranked(fold, left)
        member = left.pop(0)
        result = await fold.merge(member)
        if result.tree is None:
            return TeamMerge(order=(*fold.merged, member.name, *(m.name for m in left)),
                             merges=tuple(merges), tree=await fold.tree(),
                             stopped=member.name, conflict=result, dry_run=dry_run)
        merges.append(result)
    return TeamMerge(order=tuple(fold.merged), merges=tuple(merges), tree=await fold.tree(),
                     dry_run=dry_run)


def _check(into: Scope, members: Sequence[Scope], order: str, strategy: str) -> None:
    """Everything that would fail a merge halfway through, before the first one."""
    if order not in get_args(MergeOrder):
        raise MergeError(f"unknown merge order {order!r} (given or fewest-conflicts)")
    if strategy not in get_args(MergeStrategy):
        raise MergeError(f"unknown merge strategy {strategy!r}")
    names = [m.name for m in members]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise MergeError(f"member(s) named more than once: {', '.join(twice)}")
    if into.name in names:
        raise MergeError(f"cannot merge scope {into.name!r} into itself")
    for s in (into, *members):
        if s.discarded:
            raise ScopeDiscarded(f"cannot merge discarded scope {s.name!r}")


async def _ranked(fold: _Fold, left: list[Scope]) -> list[Scope]:
    """`left` with the member to merge next first: the fewest conflicting paths in a dry
    run against the fold's head, ties in the given order. A member that would merge clean
    ends the scan; otherwise all are ranked (the order reported when the fold stops)."""
    counts: list[int] = []
    for member in left:
        n = len((await fold.trial(member)).conflicts)
        if n == 0:
            return [member, *(m for m in left if m is not member)]
        counts.append(n)
    ranked = sorted(range(len(left)), key=lambda i: (counts[i], i))
    return [left[i] for i in ranked]


class _Fold:
    """The fold's steps on `into` itself: its real merges, and dry runs against its head."""

    def __init__(self, into: Scope, strategy: MergeStrategy, cause: str | None = None) -> None:
        self.into, self.strategy, self.cause = into, strategy, cause
        self.merged: list[str] = []

    async def start(self) -> None:
        pass

    async def trial(self, member: Scope) -> MergeResult:
        return await self.into.merge(member, strategy=self.strategy, dry_run=True)

    async def merge(self, member: Scope) -> MergeResult:
        result = await self.into.merge(member, strategy=self.strategy, cause=self.cause)
        if result.tree is not None:  # None: a conflict, or the chain blocked the merge
            self.merged.append(member.name)
        return result

    async def tree(self) -> str:
        rt = self.into.runtime
        return await rt.io(rt.trace.commit_tree, self.into.head)


class _DryFold(_Fold):
    """The same steps over a head of its own: each merge a commit that no ref points at,
    so the next step's merge base is the one git would find."""

    async def start(self) -> None:
        self.head = self.into.head

    async def trial(self, member: Scope) -> MergeResult:
        rt = self.into.runtime
        trace = rt.trace
        base = await rt.io(trace.merge_base, self.head, member.head)
        if base is None:
            raise MergeError(f"{self.into.name!r} and {member.name!r} share no history")
        r = await rt.io(three_way, trace, base, self.head, member.head, self.strategy)
        return MergeResult(r.base, r.tree, r.conflicts, r.changes, None, True)

    async def merge(self, member: Scope) -> MergeResult:
        result = await self.trial(member)
        if result.tree is not None:
            rt = self.into.runtime
            self.head = await rt.io(rt.trace.write_commit, result.tree,
                                    [self.head, member.head],
                                    f"dry run: merge {member.name} into {self.into.name}\n")
            self.merged.append(member.name)
        return result

    async def tree(self) -> str:
        rt = self.into.runtime
        return await rt.io(rt.trace.commit_tree, self.head)
