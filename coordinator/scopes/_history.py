"""Moving a scope through history: rewind to an earlier commit, merge another branch.

Functions over explicit state (the trace, a workspace's backing tree, an
effect path), which `Scope.rewind` and `Scope.merge` call with their own.
"""

from __future__ import annotations

from pathlib import Path

from sandboxes import Change, apply_changes

from ..records._effects import (
    FileChange,
    MergeOutcome,
    MergeStrategy,
    NoOutcome,
    ScopeMerge,
    ScopeRewind,
)
from ..records._errors import MergeError, RewindError
from ..store._merge import MergeResult, Resolver, three_way
from ..store._trace import ARCHIVE_PREFIX, Trace, TreeChanges
from ._effect_path import ActInput, EffectPath, InThread, Result

__all__ = [
    "apply_tree_changes",
    "check_rewind",
    "merge",
    "rewind",
    "rewind_target",
    "rewind_workspace",
    "unique_ref",
]


def check_rewind(to: str | None, steps: int | None) -> None:
    """The one check of a rewind's arguments (the Python API, the control action
    and the HTTP route all pass here): exactly one of `to` and `steps`, and
    `steps` an integer of at least 1 (a rewind by 0 steps would record an
    effect that changes nothing). Raises RewindError."""
    if (to is None) == (steps is None):
        raise RewindError("give exactly one of `to` or `steps`")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)):
        raise RewindError(f"steps must be an integer, not {type(steps).__name__}")
    if steps is not None and steps < 1:
        raise RewindError("steps must be >= 1")


def rewind_target(
    trace: Trace, name: str, head: str, fork_point: str, to: str | None, steps: int | None
) -> str:
    """The commit a rewind of scope `name` (at `head`, forked at `fork_point`)
    goes to: `to`, or `steps` effects back. Walks back from the head only as
    far as the target (or the fork point): the cost follows the steps rewound,
    not the length of the branch. Raises RewindError, NotFound."""
    check_rewind(to, steps)
    wanted = None if to is None else str(trace.commit(to).id)
    commit = trace.commit(head)
    taken = 0
    while True:
        if str(commit.id) == wanted or taken == steps:
            return str(commit.id)
        if str(commit.id) == fork_point or not commit.parent_ids:
            break
        commit = commit.parents[0]
        taken += 1
    if steps is not None:
        raise RewindError(
            f"cannot rewind {steps} steps: scope {name!r} has only "
            f"{taken} effects since its fork point"
        )
    assert wanted is not None
    if trace.is_ancestor(str(wanted), fork_point):
        raise RewindError(f"{to!r} is before the fork point of scope {name!r}")
    raise RewindError(f"{to!r} is not on the branch of scope {name!r}")


def apply_tree_changes(
    trace: Trace,
    backing: Path,
    changes: TreeChanges,
    extra_deletes: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Write tree `changes` into the workspace tree `backing` and delete
    `extra_deletes` (ignored files the tree does not know) where present."""
    todo = [
        Change(p, trace.blob(v[0]) if v else None, v[1] if v else 0o100644)
        for p, v in changes.items()
    ]
    for p in sorted(extra_deletes - set(changes)):
        if (backing / p).exists() or (backing / p).is_symlink():
            todo.append(Change(p, None))
    apply_changes(backing, todo)


def rewind_workspace(trace: Trace, backing: Path, head: str, target: str) -> None:
    """Make the workspace at `head` equal tree(target): apply the tree diff, and
    drop ignored files written by the effects being rewound."""
    changes = trace.diff_trees(trace.tree_id(head), trace.tree_id(target))
    apply_tree_changes(trace, backing, changes, extra_deletes=trace.ignored_since(head, target))


def unique_ref(trace: Trace, prefix: str, start: int) -> str:
    """The first free ref `<prefix><n>` for n from `start`."""
    # Probe names one by one: listing every ref grows with the trace's history.
    head, _, tail = prefix.rpartition("/")
    if head != ARCHIVE_PREFIX.rstrip("/") and trace.ref(head) is not None:
        # `archive/x-3` is another scope's discard: no refs can go below it
        prefix = f"{head}.{tail}"
    n = start
    while not trace.ref_name_free(f"{prefix}{n}"):
        n += 1
    return f"{prefix}{n}"


async def rewind(
    path: EffectPath, backing: Path, fork_point: str, to: str | None, steps: int | None,
    cause: str | None,
) -> Result:
    """Rewind the scope of `path` (workspace tree `backing`); the caller holds its lock."""
    rt = path.rt
    trace = rt.trace
    head = path.head

    def plan() -> tuple[str, str, str]:
        target = rewind_target(trace, path.name, head, fork_point, to, steps)
        archive = unique_ref(trace, f"{ARCHIVE_PREFIX}{path.name}/rewound-", path.seq)
        return target, archive, trace.tree_id(target)

    target, archive, tree = await rt.io(plan)

    def act(_: ActInput) -> tuple[NoOutcome, TreeChanges]:
        with rt.metrics.timed("rewind"):
            rewind_workspace(trace, backing, head, target)
            trace.set_ref(archive, head)
        return NoOutcome(), {}

    return await path.run(ScopeRewind(to=target, head=head), InThread(act), cause=cause,
                          parents=[target], tree=tree)


async def merge(
    path: EffectPath,
    backing: Path,
    theirs: str,
    theirs_head: str,
    strategy: MergeStrategy,
    dry_run: bool,
    resolver: Resolver | None,
    cause: str | None,
) -> MergeResult:
    """Merge branch `theirs` (at `theirs_head`) into the scope of `path`
    (workspace tree `backing`); the caller holds its lock."""
    rt = path.rt
    trace = rt.trace
    ours_head = path.head
    base = await rt.io(trace.merge_base, ours_head, theirs_head)
    if base is None:
        raise MergeError(f"{path.name!r} and {theirs!r} share no history")
    with rt.metrics.timed("merge"):
        result = await rt.io(three_way, trace, base, ours_head, theirs_head, strategy, resolver)
    rt.metrics.conflicts(len(result.conflicts))
    if dry_run:
        return MergeResult(result.base, result.tree, result.conflicts, result.changes, None, True)
    conflicts = tuple(c.path for c in result.conflicts)
    intent = ScopeMerge(other=theirs, other_head=theirs_head, strategy=strategy)
    if result.tree is None:
        failed = path.next_effect(
            intent,
            cause=cause,
            status="failed",
            outcome=MergeOutcome(base=base, conflicts=conflicts),
            error=f"{len(conflicts)} conflicting path(s): {', '.join(conflicts)}",
        )
        await path.commit(failed)
        return result
    file_changes = tuple(
        FileChange(path=p, blob=v[0] if v else None, mode=v[1] if v else 0o100644)
        for p, v in sorted(result.changes.items())
    )

    async def act(_: ActInput) -> tuple[MergeOutcome, TreeChanges]:
        await rt.io(apply_tree_changes, trace, backing, result.changes)
        return MergeOutcome(base=base, conflicts=conflicts, changes=file_changes), {}

    done = await path.run(intent, act, cause=cause, parents=[ours_head, theirs_head],
                          tree=result.tree)
    if not done.ok:
        return MergeResult(result.base, None, result.conflicts, result.changes)
    rt.settled(theirs, "merged")
    return MergeResult(result.base, result.tree, result.conflicts, result.changes, done.commit)
