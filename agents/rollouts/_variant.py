"""One supervisor decision, taken or not taken in a sibling (the two arms of an ablation).

A decision is an intervention `fork_points` finds: an intent a policy blocked
(`block:<policy>`) or a supervisor's decision on a member's branch (`inject`, `handoff`,
`rewind`). The sibling is forked just before it, so the recorded decision is not in its
history; the arms differ in what happens next:

- a block, taken: nothing to do, the policies are the recorded ones and block the intent
  again when the model asks for it; not taken: the leaf's member gets a one-shot override
  (`TeamPolicy.allow_once`) that lets through the first intent of the same kind the same
  policy would stop;
- a supervisor decision, taken: it is carried out again on the leaf's member before its
  agent continues (the same inject text, the same rewind target, a handoff from the leaf's
  own giver, who then stops); not taken: the member continues without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from coordinator import Scope, SupervisorAction, Trace, control

from ._points import ForkPoint

__all__ = ["KINDS", "Intervention", "Variant", "intervention"]

KINDS = ("block", "inject", "handoff", "rewind")
"""The decisions an ablation can take away; other supervisor actions (a discard, a mark)
are left out of it."""


@dataclass(frozen=True, slots=True)
class Intervention:
    effect: str
    """The blocked intent's effect or the decision's."""
    member: str
    kind: str
    """`block:<policy>`, `inject`, `handoff` or `rewind`."""
    intent_kind: str | None = None
    """For a block: the blocked intent's kind (`fs.patch`...)."""
    policy: str | None = None
    """For a block: the policy that blocked it."""
    action: SupervisorAction | None = None
    """For a supervisor decision: what it did."""


@dataclass(frozen=True, slots=True)
class Variant:
    decision: Intervention
    taken: bool

    def starts(self) -> dict[str, str]:
        """Members that start at a commit of their own instead of the fork node's head:
        a rewind taken starts its member at the rewind's target."""
        d = self.decision
        if self.taken and d.kind == "rewind" and d.action is not None:
            return {d.member: str(d.action.detail["to"])}
        return {}

    @property
    def label(self) -> Literal["with", "without"]:
        return "with" if self.taken else "without"


def intervention(trace: Trace, heads: Mapping[str, str], point: ForkPoint
                 ) -> Intervention | str:
    """The decision at an intervention point, or why it cannot be ablated (blocking)."""
    if point.about is None:
        return "not an intervention"
    found = next((e.effect for e in trace.log(point.line or heads[point.member])
                  if e.effect is not None and e.effect.id == point.about), None)
    if found is None:
        return f"{point.about} is not on the branch of {point.member}"
    if found.status == "blocked":
        policy = found.decision.policy if found.decision is not None else "default"
        return Intervention(found.id, point.member, f"block:{policy}",
                            intent_kind=found.intent.kind, policy=policy)
    action = found.intent
    if not isinstance(action, SupervisorAction) or action.action not in KINDS:
        name = action.action if isinstance(action, SupervisorAction) else action.kind
        return f"a {name} decision is not ablated"
    if action.action == "handoff" and str(action.detail.get("from")) not in heads:
        return f"the handoff's giver {action.detail.get('from')} is not in the team"
    return Intervention(found.id, point.member, action.action, action=action)


async def apply(variant: Variant, allow_once: Callable[[str, str, str], None],
                scopes: Mapping[str, Scope]) -> set[str]:
    """Set a leaf up for its arm (`scopes`: member -> the leaf's scope). Returns the
    members whose agents must not run (a handoff's giver)."""
    d = variant.decision
    scope = scopes[d.member]
    if d.kind.startswith("block:"):
        if not variant.taken:
            assert d.policy is not None and d.intent_kind is not None
            allow_once(scope.name, d.policy, d.intent_kind)
        return set()
    if not variant.taken or d.action is None:
        return set()
    detail = d.action.detail
    if d.kind == "inject":
        await control.inject(scope, str(detail.get("text", "")),
                             sender=str(detail.get("sender", "supervisor")))
    elif d.kind == "handoff":
        giver = str(detail["from"])
        await control.handoff(scope, scopes[giver], strategy="fail")
        return {giver}
    return set()
