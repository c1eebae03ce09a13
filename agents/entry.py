"""The built-in agent as the `builtin` entry of `corral.agents`: `CodingAgent` as an
`Agent` (`agents.protocol`), ``await builtin(ctx)``."""

from __future__ import annotations

from .coding import CodingAgent
from .protocol import AgentContext, AgentResult

__all__ = ["builtin"]


async def builtin(ctx: AgentContext) -> AgentResult:
    """The built-in coding agent (`CodingAgent.from_context`) as an entry of
    `corral.agents`."""
    return await CodingAgent.from_context(ctx).run()
