"""Rollout trees: a finished run forked at chosen points into sibling continuations,
graded, kept in the trace, and exported for RL trainers; and the ablation of its
supervisor decisions (see docs/rollouts.md)."""

from ._ablate import Ablation, KindSummary, Pair, ablate, ablate_in_state, ablation, mcnemar_exact
from ._export import (
    FORMATS,
    Export,
    Format,
    Trajectory,
    Turn,
    advantages,
    export_tree,
    flatten,
    records,
    skyrl_batch,
    trajectories,
)
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
from ._variant import Intervention, Variant, intervention

__all__ = [
    "FORMATS",
    "Ablation",
    "Intervention",
    "KindSummary",
    "Pair",
    "Variant",
    "ablate",
    "ablate_in_state",
    "ablation",
    "intervention",
    "mcnemar_exact",
    "Budget",
    "Export",
    "Executor",
    "ForkNode",
    "ForkPoint",
    "Format",
    "Grade",
    "LeafNode",
    "LocalExecutor",
    "MemberNode",
    "Sampling",
    "Selector",
    "SiblingJob",
    "TeamPolicy",
    "TreeRecord",
    "Trajectory",
    "Turn",
    "advantages",
    "default_team",
    "export_tree",
    "flatten",
    "fork_points",
    "grow",
    "grow_in_state",
    "load_selector",
    "new_tree_id",
    "read_tree",
    "records",
    "siblings",
    "skyrl_batch",
    "team_cut",
    "trajectories",
    "tree_names",
]
