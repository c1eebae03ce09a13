"""Moving a scope through history: rewind to an earlier commit, merge another branch."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pygit2

from sandboxes import Change, Workspace, apply_changes

from ._effect_path import InThread, Result
from ._effects import (
    Effect,
    FileChange,
    Intent,
    MergeOutcome,
    MergeStrategy,
    NoOutcome,
    Outcome,
    ScopeMerge,
    ScopeRewind,
)
from ._errors import MergeError, RewindError, ScopeDiscarded
from ._merge import MergeResult, Resolver, three_way
from ._trace import ARCHIVE_PREFIX, TreeChanges

if TYPE_CHECKING:
    from ._coordinator import Coordinator
    from ._scope import Scope

__all__ = ["History"]


class History:
    """Rewind and merge for a Scope (a mixin: Scope provides the state)."""

    # Provided by Scope: the state the one path works on.
    _coord: Coordinator
    _lock: asyncio.Lock
    _seq: int
    name: str
    head: str

    fork_point: str
    workspace: Workspace

    if TYPE_CHECKING:

        def _check_live(self) -> None: ...

        def _next_effect(self, intent: Intent, *, cause: str | None, **fields: Any) -> Effect: ...

        async def _perform(self, *args: Any, **kwargs: Any) -> Result: ...

        async def _record(self, *args: Any, **kwargs: Any) -> Result: ...

    async def rewind(
        self, to: str | None = None, *, steps: int | None = None, cause: str | None = None
    ) -> Result:
        """Move this scope back to an earlier commit of its branch: the workspace
        becomes exactly that commit's tree. Give `to` (a commit id) or `steps`
        (effects back along the branch).

        Raises RewindError for a target before the fork point or off the branch,
        NotFound for an unknown commit.
        """
        if (to is None) == (steps is None):
            raise RewindError("give exactly one of `to` or `steps`")
        if steps is not None and steps < 0:
            raise RewindError("steps must be >= 0")
        coord = self._coord
        trace = coord.trace
        async with self._lock:
            self._check_live()
            head = self.head

            def plan() -> tuple[str, str, str]:
                target = self._rewind_target(to, steps)
                archive = self._unique_ref(f"{ARCHIVE_PREFIX}{self.name}/rewound-")
                return target, archive, str(trace.commit(target).tree_id)

            target, archive, tree = await coord.io(plan)
            intent = ScopeRewind(to=target, head=head)

            def act(_: Intent) -> tuple[Outcome, TreeChanges]:
                with coord.metrics.timed("rewind"):
                    self._rewind_workspace(head, target)
                    trace.set_ref(archive, head)
                return NoOutcome(), {}

            return await self._perform(
                intent, InThread(act), cause=cause, parents=[target], tree=tree
            )

    def _rewind_target(self, to: str | None, steps: int | None) -> str:
        """The commit a rewind goes to. Walks back from the head only as far as
        the target (or the fork point): the cost follows the steps rewound, not
        the length of the branch."""
        trace = self._coord.trace
        fork_point = pygit2.Oid(hex=self.fork_point)
        wanted = None if to is None else trace.commit(to).id
        commit = trace.commit(self.head)
        taken = 0
        while True:
            if commit.id == wanted or taken == steps:
                return str(commit.id)
            if commit.id == fork_point or not commit.parent_ids:
                break
            commit = commit.parents[0]
            taken += 1
        if steps is not None:
            raise RewindError(
                f"cannot rewind {steps} steps: scope {self.name!r} has only "
                f"{taken} effects since its fork point"
            )
        assert wanted is not None
        if trace.is_ancestor(str(wanted), self.fork_point):
            raise RewindError(f"{to!r} is before the fork point of scope {self.name!r}")
        raise RewindError(f"{to!r} is not on the branch of scope {self.name!r}")

    def _rewind_workspace(self, head: str, target: str) -> None:
        """Make the workspace equal tree(target): apply the tree diff, and drop
        ignored files written by the effects being rewound."""
        trace = self._coord.trace
        old_tree = str(trace.commit(head).tree_id)
        new_tree = str(trace.commit(target).tree_id)
        changes = trace.diff_trees(old_tree, new_tree)
        self._apply_tree_changes(changes, extra_deletes=trace.ignored_since(head, target))

    def _apply_tree_changes(
        self, changes: TreeChanges, extra_deletes: set[str] | frozenset[str] = frozenset()
    ) -> None:
        trace = self._coord.trace
        todo = [
            Change(p, trace.blob(v[0]) if v else None, v[1] if v else 0o100644)
            for p, v in changes.items()
        ]
        for p in sorted(extra_deletes - set(changes)):
            if (self.workspace.backing / p).exists() or (self.workspace.backing / p).is_symlink():
                todo.append(Change(p, None))
        apply_changes(self.workspace.backing, todo)

    def _unique_ref(self, prefix: str) -> str:
        # Probe names one by one: listing every ref grows with the trace's history.
        trace = self._coord.trace
        head, _, tail = prefix.rpartition("/")
        if head != ARCHIVE_PREFIX.rstrip("/") and trace.ref(head) is not None:
            # `archive/x-3` is another scope's discard: no refs can go below it
            prefix = f"{head}.{tail}"
        n = self._seq
        while not trace.ref_name_free(f"{prefix}{n}"):
            n += 1
        return f"{prefix}{n}"

    async def merge(
        self,
        other: Scope | str,
        *,
        strategy: MergeStrategy = "fail",
        dry_run: bool = False,
        resolver: Resolver | None = None,
        cause: str | None = None,
    ) -> MergeResult:
        """Three-way merge of `other`'s branch into this scope (merge base = their
        real merge base, usually the fork point), committed with two parents.

        Returns a MergeResult. With strategy "fail" and conflicts, nothing is
        merged and `.conflicts` says where, with each side's writing effect.
        `dry_run` computes the same result and writes nothing. Raises
        ScopeDiscarded when either scope is discarded.
        """
        coord = self._coord
        trace = coord.trace
        theirs = coord.scope(other) if isinstance(other, str) else other
        if theirs.discarded:
            raise ScopeDiscarded(f"cannot merge discarded scope {theirs.name!r}")
        if theirs is self:
            raise MergeError("cannot merge a scope into itself")
        if strategy not in ("fail", "ours", "theirs", "union"):
            raise MergeError(f"unknown merge strategy {strategy!r}")
        async with self._lock:
            self._check_live()
            ours_head, theirs_head = self.head, theirs.head
            base = await coord.io(trace.merge_base, ours_head, theirs_head)
            if base is None:
                raise MergeError(f"{self.name!r} and {theirs.name!r} share no history")
            with coord.metrics.timed("merge"):
                result = await coord.io(
                    three_way, trace, base, ours_head, theirs_head, strategy, resolver
                )
            coord.metrics.conflicts(len(result.conflicts))
            if dry_run:
                return MergeResult(
                    result.base, result.tree, result.conflicts, result.changes, None, True
                )
            conflicts = tuple(c.path for c in result.conflicts)
            intent = ScopeMerge(other=theirs.name, other_head=theirs_head, strategy=strategy)
            if result.tree is None:
                failed = self._next_effect(
                    intent,
                    cause=cause,
                    status="failed",
                    outcome=MergeOutcome(base=base, conflicts=conflicts),
                    error=f"{len(conflicts)} conflicting path(s): {', '.join(conflicts)}",
                )
                await self._record(failed)
                return result
            file_changes = tuple(
                FileChange(path=p, blob=v[0] if v else None, mode=v[1] if v else 0o100644)
                for p, v in sorted(result.changes.items())
            )

            async def act(_: Intent) -> tuple[Outcome, TreeChanges]:
                await coord.io(self._apply_tree_changes, result.changes)
                return MergeOutcome(base=base, conflicts=conflicts, changes=file_changes), {}

            done = await self._perform(
                intent, act, cause=cause, parents=[ours_head, theirs_head], tree=result.tree
            )
            if not done.ok:
                return MergeResult(result.base, None, result.conflicts, result.changes)
            coord._settled(theirs.name, "merged")
            return MergeResult(
                result.base, result.tree, result.conflicts, result.changes, done.commit
            )
