"""Agents by name: the `corral.agents` entry point group, shared by `corral run --agent` and
`corral bench cooperbench`.

An agent is an async callable with this signature (`AgentFn`)::

    async def run(coord: Coordinator, scope: Scope, task: str, *, provider: Provider,
                  max_steps: int = 30, max_tokens: int | None = None,
                  retries: int = 4) -> AgentResult

It works on `task` in `scope` (a fork the caller made), sends its model calls through
`provider` as `model.call` effects (`ModelCaller(coord, provider, attempts=retries)`), and
returns an `AgentResult` whose `patch` is the scope's diff against its fork point. It does not
close `provider` (the caller owns it). Registered: `builtin` (the `CodingAgent` tool loop) and
`mini-swe-agent` (the `mini-swe-agent` extra). Anything else is a `module:attr` path.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable
from importlib.metadata import entry_points
from typing import Protocol

from coordinator import Coordinator, Scope

from ._model_effects import ModelCaller
from .coding import AgentResult, CodingAgent
from .providers import Provider

__all__ = ["AGENT_GROUP", "AgentFn", "agent_names", "builtin", "load_agent"]

AGENT_GROUP = "corral.agents"


class AgentFn(Protocol):
    def __call__(self, coord: Coordinator, scope: Scope, task: str, *, provider: Provider,
                 max_steps: int = 30, max_tokens: int | None = None,
                 retries: int = 4) -> Awaitable[AgentResult]: ...


async def builtin(coord: Coordinator, scope: Scope, task: str, *, provider: Provider,
                  max_steps: int = 30, max_tokens: int | None = None,
                  retries: int = 4) -> AgentResult:
    """The built-in coding agent (`CodingAgent`) as an entry of `corral.agents`."""
    caller = ModelCaller(coord, provider, attempts=retries)
    return await CodingAgent(coord, scope, caller, task, max_steps=max_steps,
                             max_tokens=max_tokens).run()


def agent_names() -> list[str]:
    """The names registered in the `corral.agents` group."""
    return sorted(ep.name for ep in entry_points(group=AGENT_GROUP))


def load_agent(spec: str) -> AgentFn:
    """The agent named `spec` in `corral.agents`, or at the `module:attr` path `spec`.

    Raises:
        LookupError: no such name or attribute, or its package (an extra) is not installed.
    """
    found = [ep for ep in entry_points(group=AGENT_GROUP) if ep.name == spec]
    try:
        if found:
            fn = found[0].load()
        elif ":" in spec:
            module, _, attr = spec.partition(":")
            fn = getattr(importlib.import_module(module), attr)
        else:
            raise LookupError(f"no agent {spec!r}: use one of {', '.join(agent_names())} "
                              "or module:attr")
    except ImportError as e:
        raise LookupError(f"agent {spec!r} cannot be loaded ({e}); is its extra installed? "
                          f"(pip install 'corral[{spec}]')") from e
    except AttributeError as e:
        raise LookupError(f"agent {spec!r}: {e}") from e
    if not callable(fn):
        raise LookupError(f"agent {spec!r} is not callable")
    return fn  # type: ignore[no-any-return]
