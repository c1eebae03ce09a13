"""Policies: the supervisor's rules, each one async callable `(intent, view) -> Decision | None`.

The protocol and the decisions (`Policy`, `View`, `allow`, `block`, `defer`,
`rewrite`) and every built-in policy: the conflict guard, the human gate and
the pool of external reviewers (processes answering over the API).
"""

from ._chain import (
    Policy,
    PolicyChain,
    ScopeInfo,
    View,
    allow,
    allow_all,
    block,
    defer,
    rewrite,
)
from ._gate import GateRule, HumanGate
from ._guard import Claim, ConflictGuard
from ._reviewers import ReviewerPool
from ._settings import load_policy

__all__ = [
    "Claim",
    "ConflictGuard",
    "GateRule",
    "HumanGate",
    "Policy",
    "PolicyChain",
    "ReviewerPool",
    "ScopeInfo",
    "View",
    "allow",
    "allow_all",
    "block",
    "defer",
    "load_policy",
    "rewrite",
]
