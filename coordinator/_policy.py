"""The supervisor's policy chain: each policy sees an intent before it lands.

A policy is one async callable `(intent, view) -> Decision | None`; None means
abstain. The chain asks each policy in order and the first that does not
abstain decides; when all abstain the intent is allowed. A policy that raises
blocks the intent (fail closed) with the error as the reason.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any, Protocol

from ._effects import Decision, Intent
from ._view import ScopeInfo, View

__all__ = [
    "Policy",
    "PolicyChain",
    "ScopeInfo",
    "View",
    "allow",
    "allow_all",
    "block",
    "defer",
    "load_policy",
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


def load_policy(spec: str) -> Policy:
    """The policy named `spec`: an entry point of the group `corral.policies`
    (e.g. "allow-all") or a `module:attr` path. A class (or any callable taking
    no arguments that is not itself a policy function) is not instantiated:
    name an instance or a function. Raises LookupError when nothing matches."""
    if ":" in spec:
        module, _, attr = spec.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as e:
            raise LookupError(f"cannot load policy {spec!r}: {e}") from e
    else:
        found = [ep for ep in entry_points(group="corral.policies") if ep.name == spec]
        if not found:
            names = sorted(ep.name for ep in entry_points(group="corral.policies"))
            raise LookupError(
                f"no policy {spec!r} in entry point group corral.policies "
                f"(found: {', '.join(names) or 'none'}); or give module:attr"
            )
        obj = found[0].load()
    if not callable(obj):
        raise LookupError(f"policy {spec!r} is not callable")
    return obj  # type: ignore[no-any-return]
