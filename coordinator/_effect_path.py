"""The one path every effect takes: propose, decide, materialize, commit, answer.

The intent is published to observers, the policy chain decides, the act
carries it out, the trace records it and the ref moves, and only then does
the caller get its Result. A scope's effects are serialized by its lock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._effects import (
    Decision,
    Effect,
    Intent,
    Outcome,
)
from ._errors import (
    CorralError,
)
from ._events import Event
from ._policy import View
from ._trace import TreeChanges

if TYPE_CHECKING:
    from ._coordinator import Coordinator


__all__ = ["Act", "EffectPath", "InThread", "Result"]


@dataclass(frozen=True, slots=True)
class Result:
    """What became of one intent: its recorded effect and the trace commit."""

    effect: Effect
    commit: str | None

    @property
    def decision(self) -> Decision | None:
        return self.effect.decision

    @property
    def ok(self) -> bool:
        """True when the effect was materialized."""
        return self.effect.status == "materialized"

    @property
    def blocked(self) -> bool:
        return self.effect.status == "blocked"

    @property
    def reason(self) -> str:
        """The supervisor's reason for a blocked intent ('' otherwise)."""
        return self.effect.decision.reason if self.effect.decision else ""

    @property
    def outcome(self) -> Outcome | None:
        return self.effect.outcome


Act = Callable[[Intent], Awaitable[tuple[Outcome, TreeChanges]]]


@dataclass(frozen=True, slots=True)
class InThread:
    """An act that blocks (files, git): it runs on an io thread in the same hop
    as the commit that records it, so a write costs one thread hop, not two."""

    fn: Callable[[Intent], tuple[Outcome, TreeChanges]]
    ref: str | None = None
    """Where the commit goes (default: the scope's ref)."""
    after: Callable[[str], None] | None = None
    """Run with the new commit, in the same hop, once it is durable."""
    inline: bool = False
    """Small enough to run on the loop itself (a small file on the workspace, a
    few objects in memory, one append to the journal): under load, the hop to
    a thread and the GIL handoffs on the way back cost more than the work."""


_SETTLED = {
    "merged": "it merged",
    "discarded": "it was discarded",
    "gone": "there is no such scope",
    "timeout": "still not merged",
}


class _Blocked(Exception):
    """Raised inside an act when a second review (an exec's outcome) blocks."""

    def __init__(self, decision: Decision, outcome: Outcome, intent: Intent) -> None:
        self.decision, self.outcome, self.intent = decision, outcome, intent


class EffectPath:
    """The effect path of a Scope (a mixin: Scope provides the state)."""

    # Provided by Scope: the state the one path works on.
    touched: frozenset[str] | None
    _coord: Coordinator
    _lock: asyncio.Lock
    _seq: int
    name: str
    head: str

    if TYPE_CHECKING:

        def _check_live(self) -> None: ...

    async def perform(
        self, intent: Intent, act: Act | InThread, *, cause: str | None = None
    ) -> Result:
        """Propose `intent`, let the policy chain decide, and if allowed run `act`
        (which carries it out and returns the outcome and tree changes), commit,
        and return. A blocked intent returns a Result whose `reason` says why."""
        async with self._lock:
            return await self._perform(intent, act, cause=cause)

    async def _perform(
        self,
        intent: Intent,
        act: Act | InThread,
        *,
        cause: str | None = None,
        parents: Sequence[str] | None = None,
        tree: str | None = None,
    ) -> Result:
        self._check_live()
        coord = self._coord
        # Backpressure: while the trace's journal is full (writers outran its
        # checkpoints), effects wait here instead of the journal growing.
        await coord.trace.journal.room()
        coord.trace.renew_handle()
        pending = self._next_effect(intent, cause=cause)
        coord._pending[pending.id] = pending
        coord.events.publish(Event("intent", pending))
        try:
            decision = await self._decide(pending, intent)
            if not decision.allowed:
                return await self._record(
                    pending.model_copy(update={"status": "blocked", "decision": decision})
                )
            todo = decision.rewritten if decision.verdict == "rewrite" else intent
            assert todo is not None
            try:
                if isinstance(act, InThread):
                    return await self._act_and_record(pending, decision, todo, act, parents, tree)
                outcome, changes = await act(todo)
            except _Blocked as b:
                # The second review blocked: its decision is the effect's, and the
                # first one's reason (an approval at the gate, say) stays in it.
                blocking = b.decision
                if decision.reason:
                    blocking = blocking.model_copy(update={
                        "reason": f"{blocking.reason} (after: {decision.reason})"})
                return await self._record(
                    pending.model_copy(
                        update={
                            "status": "blocked",
                            "decision": blocking,
                            "outcome": b.outcome,
                            "intent": b.intent,
                        }
                    )
                )
            except CorralError as e:
                await self._record(
                    pending.model_copy(
                        update={"status": "failed", "decision": decision, "error": str(e)}
                    )
                )
                raise
            effect = pending.model_copy(
                update={"status": "materialized", "decision": decision, "outcome": outcome}
            )
            return await self._record(effect, changes, parents=parents, tree=tree)
        finally:
            coord._pending.pop(pending.id, None)

    async def review(self, intent: Intent, *, cause: str | None = None) -> Result:
        """Put `intent` to the policy chain without carrying it out: for an agent that acts
        outside Corral (a Claude Code hook asks before its tool runs). The effect is
        recorded with the decision and status `allowed`, `rewritten` or `blocked`, and a
        commit that changes no file; observers see it like any other intent."""
        async with self._lock:
            self._check_live()
            coord = self._coord
            pending = self._next_effect(intent, cause=cause)
            coord._pending[pending.id] = pending
            coord.events.publish(Event("intent", pending))
            try:
                decision = await self._decide(pending, intent)
                status = {"allow": "allowed", "rewrite": "rewritten"}.get(
                    decision.verdict, "blocked")
                return await self._record(
                    pending.model_copy(update={"status": status, "decision": decision}))
            finally:
                coord._pending.pop(pending.id, None)

    def _next_effect(self, intent: Intent, *, cause: str | None, **fields: Any) -> Effect:
        """A pending effect record for `intent`, taking the scope's next seq."""
        effect = Effect(
            id=f"{self.name}#{self._seq}",
            scope=self.name,
            seq=self._seq,
            parent=self.head,
            cause=cause,
            status=fields.pop("status", "pending"),
            intent=intent,
            **fields,
        )
        self._seq += 1
        return effect

    async def _decide(self, pending: Effect, intent: Intent) -> Decision:
        coord = self._coord
        decision = await coord.chain.decide(intent, View(coord, pending))
        if decision.verdict == "defer":
            decision = await self._defer(pending, intent, decision)
        coord.events.publish(Event("decision", pending.model_copy(update={"decision": decision})))
        coord.metrics.decision(intent.kind, decision.verdict)
        return decision

    async def _defer(self, pending: Effect, intent: Intent, deferred: Decision) -> Decision:
        """Hold a deferred intent (its scope waits with it) until the scope it
        waits on merges or is discarded, then ask the chain once more. A second
        deferral, or no merge within `Coordinator.defer_timeout`, blocks."""
        coord = self._coord
        until = deferred.until
        coord.events.publish(Event("decision", pending.model_copy(update={"decision": deferred})))
        coord.metrics.decision(intent.kind, "defer")
        if not until or until == pending.scope:
            why = "without naming the scope to wait for" if not until else \
                "until its own scope merges, which cannot happen while it waits"
            return deferred.model_copy(
                update={"verdict": "block", "reason": f"{deferred.reason}; deferred {why}"})
        start = time.perf_counter()
        how = await coord.until_settled(until, coord.defer_timeout)
        waited = f"deferred until {until!r} merged; {_SETTLED[how]} after " \
                 f"{time.perf_counter() - start:.1f} s"
        if how == "timeout":
            return deferred.model_copy(update={"verdict": "block",
                                               "reason": f"{deferred.reason}; {waited}"})
        again = await coord.chain.decide(intent, View(coord, pending))
        if again.verdict == "defer":
            return again.model_copy(update={"verdict": "block",
                                            "reason": f"{again.reason}; {waited}, still deferred"})
        reason = "; ".join(r for r in (again.reason, waited) if r)
        return again.model_copy(update={"reason": reason})

    async def _act_and_record(
        self,
        pending: Effect,
        decision: Decision,
        todo: Intent,
        act: InThread,
        parents: Sequence[str] | None,
        tree: str | None,
    ) -> Result:
        trace = self._coord.trace
        head = self.head

        def work() -> tuple[Effect, str, TreeChanges]:
            outcome, changes = act.fn(todo)
            effect = pending.model_copy(
                update={"status": "materialized", "decision": decision, "outcome": outcome}
            )
            t = tree or trace.build_tree(str(trace.commit(head).tree_id), changes)
            sha = trace.commit_effect(
                effect, t, parents if parents is not None else [head], ref=act.ref
            )
            if act.after is not None:
                act.after(sha)
            return effect, sha, changes

        effect, sha, changes = work() if act.inline else await self._coord.io(work)
        self._advance(sha, None if tree is not None else changes)
        self._coord.events.publish(Event("effect", effect, sha))
        return Result(effect, sha)

    async def _record(
        self,
        effect: Effect,
        changes: TreeChanges | None = None,
        *,
        parents: Sequence[str] | None = None,
        tree: str | None = None,
    ) -> Result:
        trace = self._coord.trace
        head = self.head

        def commit() -> str:
            t = tree or trace.build_tree(str(trace.commit(head).tree_id), changes or {})
            return trace.commit_effect(effect, t, parents if parents is not None else [head])

        sha = await self._coord.io(commit)
        self._advance(sha, None if tree is not None else (changes or {}))
        self._coord.events.publish(Event("effect", effect, sha))
        return Result(effect, sha)

    def _advance(self, sha: str, changes: TreeChanges | None) -> None:
        """Move the head; keep the paths changed since the fork up to date
        (None when unknown, after a rewind or a merge: recomputed on demand)."""
        self.head = sha
        if changes is None:
            self.touched = None
        elif self.touched is not None and changes:
            self.touched = self.touched | changes.keys()

    # -- reading ------------------------------------------------------------------
