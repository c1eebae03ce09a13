"""Forking scopes: the blocking part of one or many forks, done in one thread hop.

A fork is a new workspace over the parent's (taken back to the fork's commit when
that is not the parent's head), the commit of its `scope.fork` effect, and its refs.
A team forked at a cut (`Coordinator.fork_team`) forks every member at once: one
thread hop for all of them and one journal append for all their refs, so a fork of
the team waits for the io threads once, not once per member. The forks are all or
nothing: when one cannot be made, the workspaces already made are discarded and no
commit is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sandboxes import Workspace

from ..records._effects import Decision, Effect, NoOutcome, ScopeFork
from ..records._errors import RewindError, SandboxFailure
from ..store._trace import ARCHIVE_PREFIX, Trace
from ._history import rewind_workspace

__all__ = ["ForkPlan", "Forked", "make_forks"]


@dataclass(frozen=True, slots=True)
class ForkPlan:
    """One child to fork: what the caller read of its parent, under the parent's lock."""

    parent: str
    head: str
    """The parent's head (its workspace is at this commit)."""
    workspace: Workspace
    """The parent's workspace."""
    child: str
    at: str | None
    """The commit (any revision git reads) to fork at; None: the parent's head."""


@dataclass(frozen=True, slots=True)
class Forked:
    workspace: Workspace
    effect: Effect
    commit: str


def _rewound(trace: Trace, scope: str) -> list[str]:
    """The heads the rewinds of `scope` archived (its history before each rewind)."""
    return [c for r in trace.refs(f"{ARCHIVE_PREFIX}{scope}/rewound-")
            if (c := trace.ref(r)) is not None]


def _start(trace: Trace, plan: ForkPlan) -> str:
    """The commit `plan` forks at. Raises RewindError when it is not in the parent's
    history (or a history one of its rewinds left)."""
    if plan.at is None or plan.at == plan.head:  # the head itself needs no lookup
        return plan.head
    found = str(trace.commit(plan.at).id)
    if not (trace.is_ancestor(found, plan.head) or any(
            trace.is_ancestor(found, old) for old in _rewound(trace, plan.parent))):
        raise RewindError(f"{found[:12]} is not in the history of scope {plan.parent!r}")
    return found


def _fork_workspace(trace: Trace, plan: ForkPlan, start: str) -> Workspace:
    try:
        ws = plan.workspace.fork(plan.child)
    except Exception as e:
        raise SandboxFailure(f"could not fork {plan.parent!r}: {e}", cause=e) from e
    if start != plan.head:
        try:  # the workspace forked at the parent's head: take it back to `start`
            rewind_workspace(trace, ws.backing, plan.head, start)
        except BaseException:
            ws.discard()
            raise
    return ws


def make_forks(trace: Trace, plans: Sequence[ForkPlan], backend: str) -> list[Forked]:
    """Fork every plan (blocking: run on an io thread, each parent's lock held and its
    reads held off). Every fork point is checked before any workspace is made, and
    every workspace is made before any commit. Raises RewindError (a fork point
    outside its parent's history), SandboxFailure (a workspace that cannot be made)."""
    starts = [_start(trace, p) for p in plans]
    made: list[Workspace] = []
    try:
        for plan, start in zip(plans, starts, strict=True):
            made.append(_fork_workspace(trace, plan, start))
        effects = [Effect(
            id=f"{p.child}#0", scope=p.child, seq=0, parent=start, status="materialized",
            intent=ScopeFork(child=p.child, parent=p.parent, at=start, backend=backend),
            decision=Decision(verdict="allow"), outcome=NoOutcome(),
        ) for p, start in zip(plans, starts, strict=True)]
        commits = trace.commit_effects(
            [(e, trace.commit_tree(start), [start]) for e, start in zip(effects, starts,
                                                                          strict=True)])
    except BaseException:
        for ws in made:
            ws.discard()
        raise
    return [Forked(ws, e, c) for ws, e, c in zip(made, effects, commits, strict=True)]
