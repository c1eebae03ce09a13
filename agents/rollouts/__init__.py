"""Rollout trees: a finished run forked at chosen points into sibling continuations,
graded, kept in the trace, and exported for RL trainers (see docs/rollouts.md)."""

from ._grow import Budget, Executor, LocalExecutor, SiblingJob, TeamPolicy, grow, new_tree_id
from ._points import ForkPoint, Selector, fork_points, team_cut
from ._state import default_team, grow_in_state, load_selector, siblings
from ._tree import (
    ForkNode,
    Grade,
    LeafNode,
    MemberNode,
    Sampling,
    TreeRecord,
    read_tree,
    tree_names,
)

__all__ = [
    "Budget",
    "Executor",
    "ForkNode",
    "ForkPoint",
    "Grade",
    "LeafNode",
    "LocalExecutor",
    "MemberNode",
    "Sampling",
    "Selector",
    "SiblingJob",
    "TeamPolicy",
    "TreeRecord",
    "default_team",
    "fork_points",
    "grow",
    "grow_in_state",
    "load_selector",
    "new_tree_id",
    "read_tree",
    "siblings",
    "team_cut",
    "tree_names",
]
