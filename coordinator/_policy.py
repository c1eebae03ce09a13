"""The supervisor's policy chain: each policy sees an intent before it lands.

A policy is one async callable `(intent, view) -> Decision | None`; None means
abstain. The chain asks each policy in order and the first that does not
abstain decides; when all abstain the intent is allowed. A policy that raises
blocks the intent (fail closed) with the error as the reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ._effects import Decision, Effect, Intent

if TYPE_CHECKING:
    from ._coordinator import Coordinator

__all__ = [
    "Policy",
    "PolicyChain",
    "ScopeInfo",
    "View",
    "allow",
    "allow_all",
    "block",
    "defer",
    "rewrite",
]


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


@dataclass(frozen=True, slots=True)
class ScopeInfo:
    name: str
    head: str
    parent: str | None
    fork_point: str
    backend: str


class View:
    """Read-only access to the coordinator's state for a policy deciding on
    one proposal (`effect` is the pending record, `scope` its scope's name)."""

    def __init__(self, coord: Coordinator, effect: Effect) -> None:
        self._coord = coord
        self.effect = effect
        self.scope = effect.scope

    def scopes(self) -> list[ScopeInfo]:
        """Every live scope."""
        return [s.info() for s in self._coord.scopes.values() if not s.discarded]

    def pending(self) -> list[Effect]:
        """Intents proposed and not yet decided or materialized, in every scope."""
        return list(self._coord._pending.values())

    async def read(self, scope: str, path: str) -> bytes | None:
        """The file at `path` in `scope`'s head tree, or None."""
        return await self._coord.scope(scope)._read_committed(path)

    @property
    def trace(self):  # type: ignore[no-untyped-def]
        """The trace (read it; do not write)."""
        return self._coord.trace


PolicyFn = Callable[[Intent, View], Awaitable[Decision | None]]


def _name(policy: object) -> str:
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
        for policy in self.policies:
            name = _name(policy)
            try:
                decision = await policy(intent, view)
            except Exception as e:  # fail closed: an unsure supervisor blocks
                return Decision(
                    verdict="block", reason=f"policy {name} failed: {e!r}", policy=name
                )
            if decision is not None:
                if decision.policy == "default":
                    decision = decision.model_copy(update={"policy": name})
                return decision
        return Decision(verdict="allow", policy="default")
