"""Loading the agent of a run (`--agent`): `oracle` (`_oracle`), any agent of the entry
point group `corral.agents` (`builtin` = `agents.CodingAgent`, `mini-swe-agent`, or
yours; see `agents.entry`) on a model (`--model PROVIDER/MODEL [--base-url]`), or
`module:attr`: such an agent function, or a pair agent (`name` and async `run(job)`)
or its factory `factory(options: AgentOptions) -> Agent`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._job import Agent, AgentOptions, AgentReport, Job
from ._oracle import OracleAgent

if TYPE_CHECKING:
    from agents.entry import AgentFn

__all__ = ["ModelAgent", "is_builtin", "load_agent"]


class ModelAgent:
    """An agent of the `corral.agents` group (`builtin`, `mini-swe-agent`, or yours):
    an async `run(coord, scope, task, *, provider, max_steps, max_tokens, retries)`
    (see `agents.entry`), on `--model PROVIDER/MODEL` (and `--base-url`)."""

    def __init__(self, name: str, fn: AgentFn, options: AgentOptions) -> None:
        if not options.model:
            raise ValueError(f"the {name} agent needs --model PROVIDER/MODEL")
        self.name, self.fn, self.options = name, fn, options

    async def run(self, job: Job) -> AgentReport:
        from agents.providers import provider_from_spec

        assert self.options.model is not None
        provider = provider_from_spec(self.options.model, self.options.base_url)
        try:
            r = await self.fn(job.coord, job.scope, job.text, provider=provider,
                              max_steps=job.max_steps, max_tokens=job.max_tokens,
                              retries=self.options.retries)
        finally:
            await provider.aclose()
        return AgentReport(status=r.status, steps=r.steps, prompt_tokens=r.prompt_tokens,
                           cached_tokens=r.cached_tokens, completion_tokens=r.completion_tokens,
                           blocked=r.blocked, error=r.error)


def load_agent(spec: str, options: AgentOptions) -> Agent:
    """The agent named `spec`: `oracle`, an agent of the `corral.agents` group
    (`builtin`, `mini-swe-agent`, ...: run on `options.model`), or `module:attr` naming
    either such a function or a pair agent (an object with `name` and async
    `run(job)`, or a factory called with `options`). Raises LookupError or ValueError."""
    from agents.entry import agent_names
    from agents.entry import load_agent as load_model_agent

    if spec == "oracle":
        return OracleAgent()
    if ":" not in spec and spec not in agent_names():
        raise LookupError(f"no agent {spec!r}: use oracle, an agent of corral.agents "
                          f"({', '.join(agent_names()) or 'none installed'}) or module:attr")
    # Whatever `module:attr` names: an agent function, a pair agent or its factory.
    obj: Any = load_model_agent(spec)
    if isinstance(obj, type) or hasattr(obj, "run"):
        # A pair agent, or its factory: it gets the whole Job.
        agent = obj(options) if isinstance(obj, type) or not isinstance(obj, Agent) else obj
        if not isinstance(agent, Agent):
            raise LookupError(f"agent {spec!r} has no `name` and async `run(job)`")
        return agent
    return ModelAgent(spec.rpartition(":")[2] if ":" in spec else spec, obj, options)


def is_builtin(agent: Agent) -> bool:
    """Whether `agent` is the built-in `agents.CodingAgent` (which the team runs as
    workers an LLM supervisor can steer)."""
    from agents.entry import builtin

    return isinstance(agent, ModelAgent) and agent.fn is builtin
