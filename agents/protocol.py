"""The agent protocol: one async callable from a frozen context to an `AgentResult`.

An agent is anything callable as ``await agent(ctx)`` (`Agent`)::

    async def my_agent(ctx: AgentContext) -> AgentResult: ...

It works on `ctx.task` in `ctx.scope` (a fork the caller made), sends its model calls
through `ctx.provider` as `model.call` effects (`ModelCaller(ctx.coord, ctx.provider,
attempts=ctx.budget.retries)`), keeps to `ctx.budget`, and returns an `AgentResult` whose
`patch` is the scope's diff against its fork point. It does not close the provider (the
caller owns it). The context is frozen, so a caller can add fields without breaking an agent.

The same agents serve `corral run --agent`, `corral bench cooperbench` and your own code:
`load_agent(spec)` finds one by its name in the entry point group `corral.agents`
(`builtin`: the `CodingAgent` tool loop; `mini-swe-agent`: the `mini-swe-agent` extra) or
by a `module:attr` path; `agent_names()` lists the names installed.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from coordinator import Coordinator, Scope
from coordinator.plugins import load_plugin, plugin_names

from .providers import Provider

__all__ = [
    "AGENT_GROUP",
    "Agent",
    "AgentContext",
    "AgentResult",
    "AgentStatus",
    "Budget",
    "agent_names",
    "load_agent",
    "scope_patch",
]

AGENT_GROUP = "corral.agents"

AgentStatus = Literal["finished", "step_limit", "token_limit", "stopped", "blocked", "error"]


@dataclass(frozen=True, slots=True)
class Budget:
    """What an agent may spend."""

    max_steps: int = 30
    """Model turns (one model call and the tools it asks for)."""
    max_tokens: int | None = None
    """Prompt plus completion tokens over all its model calls; None: no limit."""
    retries: int = 4
    """Attempts per model call (a retryable `ModelError` is tried again)."""


@dataclass(frozen=True, slots=True)
class AgentContext:
    """Everything an agent is given: where it works, on what, with which model and budget."""

    coord: Coordinator
    scope: Scope
    task: str
    provider: Provider | None = None
    """None for an agent that calls no model (an oracle)."""
    budget: Budget = Budget()
    name: str = "agent"
    """This agent's name in its team (its inbox, for the teammates' `Scope.send`). Under
    `corral bench cooperbench` it is the agent's scope name, `<unit>.<setting>.<role>`
    (`2-3.coop.agent1`; solo: `2-3.solo.solo`), not the bare role."""
    teammates: tuple[str, ...] = ()
    """The other agents' names (their inboxes, for `Scope.send`)."""
    messaging: bool = True
    """Whether the agent may message its teammates."""
    tools: tuple[str, ...] | None = None
    """The tools the agent may use, by name; None: the agent's default tools."""
    team: str | None = None
    """The team (`Coordinator.create_team`) the agent's scope is a member of, if any: the
    agent gets the team's task list, scratchpad and typed requests as tools (or
    commands). None: no team, and nothing of one in its tools or prompt."""


@dataclass(frozen=True, slots=True)
class AgentResult:
    """What an agent run came to. `patch` is `git diff` of its scope against its base."""

    name: str
    status: AgentStatus
    summary: str
    steps: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    blocked: int
    """Intents of this agent the supervisor blocked."""
    patch: str
    head: str
    replayed_steps: int = 0
    saved_tokens: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class Agent(Protocol):
    """An agent: `await agent(ctx)` does the task and returns what it came to."""

    def __call__(self, ctx: AgentContext) -> Awaitable[AgentResult]: ...


async def scope_patch(coord: Coordinator, scope: Scope, base: str | None = None) -> str:
    """The patch an `AgentResult` carries: `git diff` of the scope's head tree against
    `base` (default: the scope's fork point)."""
    trace, old_id, new_id = coord.trace, base or scope.fork_point, scope.head

    def diff() -> str:
        old, new = trace.commit(old_id).tree, trace.commit(new_id).tree
        return old.diff_to_tree(new).patch or ""

    return await coord.io(diff)


def agent_names() -> list[str]:
    """The names registered in the `corral.agents` group."""
    return plugin_names(AGENT_GROUP)


def load_agent(spec: str) -> Agent:
    """The agent named `spec` in `corral.agents`, or at the `module:attr` path `spec`.

    Raises:
        LookupError: no such name or attribute, its package (an extra) is not installed,
            or what it names is not callable.
    """
    agent = load_plugin(AGENT_GROUP, spec, what="agent")
    if not callable(agent):
        raise LookupError(f"agent {spec!r} is not callable")
    return agent  # type: ignore[return-value]
