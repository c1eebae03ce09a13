"""The built-in agent as the `builtin` entry of `corral.agents`, and the call form of
before the `Agent` protocol, which bench/cooperbench still uses.

`builtin` is `CodingAgent` as an `Agent` (`agents.protocol`): ``await builtin(ctx)``.
Until bench/cooperbench passes an `AgentContext` (issue 24), the registered agents
(`builtin`, `agents.miniswe.run`) also take the old call form
``agent(coord, scope, task, *, provider, max_steps=30, max_tokens=None, retries=4)``
(`with_old_call_form`), and `load_agent` and `agent_names` are importable from here.
Delete all three then.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable
from typing import Any

from .coding import CodingAgent
from .protocol import Agent, AgentContext, AgentResult, Budget, agent_names, load_agent

__all__ = ["agent_names", "builtin", "load_agent", "with_old_call_form"]


class _TwoCallForms:
    """An agent also callable the old way; see the module docstring."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent
        functools.update_wrapper(self, agent)

    def __call__(self, *args: Any, **options: Any) -> Awaitable[AgentResult]:
        if len(args) == 1 and not options and isinstance(args[0], AgentContext):
            return self._agent(args[0])
        coord, scope, task = args
        provider = options.pop("provider")
        return self._agent(AgentContext(coord, scope, task, provider, Budget(**options),
                                        name=scope.name))


def with_old_call_form(agent: Agent) -> Agent:
    """`agent`, also callable as `agent(coord, scope, task, *, provider, max_steps,
    max_tokens, retries)` (for bench/cooperbench until it passes an `AgentContext`)."""
    return _TwoCallForms(agent)


async def _builtin(ctx: AgentContext) -> AgentResult:
    """The built-in coding agent (`CodingAgent.from_context`) as an entry of
    `corral.agents`."""
    return await CodingAgent.from_context(ctx).run()


builtin = with_old_call_form(_builtin)
