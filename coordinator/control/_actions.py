"""The supervisor's control actions: inject, handoff, rewind, discard.

One implementation for every supervisor: the HTTP routes (an admin at the
dashboard, an external process) and the LLM supervisor in `agents` call these.
Each action is first a `decision` effect (a `SupervisorAction`) recorded on
the branch of the scope it acts on, through the policy chain like any effect;
when the chain allows it, the action is carried out with the decision's id as
its cause. So a scope's own log tells who steered it, why and when.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..records._effects import ControlAction, MergeStrategy, Message, NoOutcome, SupervisorAction
from ..scopes._effect_path import ActInput, Result
from ..scopes._scope import Scope
from ..store._merge import MergeResult
from ..store._trace import TreeChanges

__all__ = ["Handoff", "Steered", "decide", "discard", "handoff", "inject", "rewind"]

async def decide(
    scope: Scope,
    action: ControlAction,
    detail: Mapping[str, Any],
    *,
    target: str | None = None,
    cause: str | None = None,
    about: str | None = None,
) -> Result:
    """Record the decision to take `action` as a `decision` effect on `scope`
    (its target: `scope`'s name unless given, "*" for no scope). Returns the
    Result: `ok` when the policy chain allowed it."""
    intent = SupervisorAction(action=action, target=target or scope.name, detail=dict(detail),
                              about=about)
    return await scope.record(intent, NoOutcome(), cause=cause)


async def inject(
    scope: Scope, text: str, *, sender: str = "supervisor", cause: str | None = None,
    about: str | None = None,
) -> Result:
    """Deliver a note into `scope`'s inbox (its agent sees it at its next step):
    one decision effect whose world action is the delivery."""
    intent = SupervisorAction(action="inject", target=scope.name,
                              detail={"text": text, "sender": sender}, about=about)

    async def deliver(_: ActInput) -> tuple[NoOutcome, TreeChanges]:
        scope.inbox.append(Message(to=scope.name, text=text, sender=sender))
        return NoOutcome(), {}

    return await scope.perform(intent, deliver, cause=cause)


class Steered(NamedTuple):
    """A control action's decision and what carrying it out gave."""

    decision: Result
    """The recorded decision (not `ok`: blocked, and nothing else was done)."""
    result: Result | None
    """The action's effect (None when the decision was blocked, or for a
    discard, when the scope was discarded meanwhile)."""


class Handoff(NamedTuple):
    decision: Result
    """The recorded decision (not `ok`: blocked, nothing else done)."""
    merge: MergeResult | None
    """The merge of the giver's branch (None when the decision was blocked)."""


async def handoff(
    receiver: Scope,
    giver: Scope,
    *,
    strategy: MergeStrategy = "theirs",
    note: str = "",
    sender: str = "supervisor",
    cause: str | None = None,
    about: str | None = None,
) -> Handoff:
    """`receiver` takes over `giver`'s work: a decision on the receiver's
    branch, then a merge of the giver's branch with `strategy`, then, if it
    merged and `note` is given, the note injected into the receiver's inbox."""
    done = await decide(receiver, "handoff", {"from": giver.name, "head": giver.head},
                        cause=cause, about=about)
    if not done.ok:
        return Handoff(done, None)
    merged = await receiver.merge(giver, strategy=strategy, cause=done.effect.id)
    if merged.commit is not None and note:
        await inject(receiver, note, sender=sender, cause=done.effect.id)
    return Handoff(done, merged)


async def rewind(
    scope: Scope,
    to: str | None = None,
    *,
    steps: int | None = None,
    detail: Mapping[str, Any] | None = None,
    cause: str | None = None,
    about: str | None = None,
) -> Steered:
    """Rewind `scope` on a supervisor's decision. The target is resolved first
    (so the decision's own commit is not counted as a step) and recorded in the
    decision (`to`, plus `detail`). Raises RewindError, NotFound."""
    target = await scope.rewind_target(to, steps=steps)
    done = await decide(scope, "rewind", {"to": target, **(detail or {})}, cause=cause,
                        about=about)
    if not done.ok:
        return Steered(done, None)
    return Steered(done, await scope.rewind(target, cause=done.effect.id))


async def discard(
    scope: Scope,
    *,
    detail: Mapping[str, Any] | None = None,
    cause: str | None = None,
    about: str | None = None,
) -> Steered:
    """Discard `scope` on a supervisor's decision."""
    done = await decide(scope, "discard", detail or {}, cause=cause, about=about)
    if not done.ok:
        return Steered(done, None)
    return Steered(done, await scope.discard(cause=done.effect.id))
