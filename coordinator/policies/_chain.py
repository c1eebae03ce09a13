"""The supervisor's policy chain: each policy sees an intent before it lands.

A policy is one async callable `(intent, view) -> Decision | None`; None means
abstain. The chain asks each policy in order and the first that does not
abstain decides; when all abstain the intent is allowed, and the decision says
so: its `policy` is `ABSTAINED` ("default"), which no policy's own decision
carries (a policy's decision is named after the policy). An entrance that must
tell "a policy allowed this" from "nobody had an opinion" (the Claude Code hook:
its "allow" skips the user's own permission prompt) reads that. A policy that
raises blocks the intent (fail closed) with the error as the reason.

Policies are named the same way everywhere (`load_policy`, in `_settings`
with the settings that name them): `conflict-guard`, an entry point name of
`corral.policies`, or `module:attr`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..records._effects import Decision, Intent
from ._view import ScopeInfo, View

__all__ = [
    "ABSTAINED",
    "Policy",
    "PolicyChain",
    "ScopeInfo",
    "View",
    "allow",
    "allow_all",
    "block",
    "defer",
    "policy_name",
    "rewrite",
]

ABSTAINED = "default"
"""The `Decision.policy` of the chain's own allow when every policy abstained."""


class Policy(Protocol):
    async def __call__(self, intent: Intent, view: View, /) -> Decision | None: ...


def allow(reason: str = "") -> Decision:
    return Decision(verdict="allow", reason=reason)


def block(reason: str) -> Decision:
    return Decision(verdict="block", reason=reason)


def rewrite(intent: Intent, reason: str = "") -> Decision:
    return Decision(verdict="rewrite", rewritten=intent, reason=reason)


def defer(until: str, reason: str = "") -> Decision:
    return Decision(verdict="defer", until=until, reason=reason)


async def allow_all(intent: Intent, view: View, /) -> Decision | None:
    """The trivial policy: allows everything."""
    return allow()


def policy_name(policy: object) -> str:
    """A policy's name (its `name`, else its function's or class's name)."""
    return str(
        getattr(policy, "name", None)
        or getattr(policy, "__name__", None)
        or type(policy).__name__
    )


class PolicyChain:
    """An ordered chain of policies; `decide` returns the first non-abstaining
    decision with the deciding policy's name."""

    def __init__(self, policies: Sequence[Policy] = ()) -> None:
        self.policies: list[Policy] = list(policies)

    def append(self, policy: Policy) -> None:
        self.policies.append(policy)

    async def decide(self, intent: Intent, view: View) -> Decision:
        """The first non-abstaining policy's decision (allow when all abstain),
        with the remarks policies noted on `view` appended to its reason."""
        decision = await self._decide(intent, view)
        notes = getattr(view, "notes", None)
        if notes:
            reason = "; ".join(r for r in (decision.reason, *notes) if r)
            decision = decision.model_copy(update={"reason": reason})
        return decision

    async def _decide(self, intent: Intent, view: View) -> Decision:
        for policy in self.policies:
            name = policy_name(policy)
            try:
                decision = await policy(intent, view)
            except Exception as e:  # fail closed: an unsure supervisor blocks
                return Decision(
                    verdict="block", reason=f"policy {name} failed: {e!r}", policy=name
                )
            if decision is not None:
                if decision.policy == ABSTAINED:
                    decision = decision.model_copy(update={"policy": name})
                return decision
        return Decision(verdict="allow", policy=ABSTAINED)
