"""The agent of a run (`--agent`) and what each agent of a pair is given.

Every agent is an `agents.Agent`: ``await agent(ctx: AgentContext) -> AgentResult``.
`--agent` names one: `oracle` (`_oracle`: bound to each agent's features), an agent of
the entry point group `corral.agents` (`builtin` = `agents.CodingAgent`,
`mini-swe-agent`, or yours) on a model (`--model PROVIDER/MODEL [--base-url]`), or a
`module:attr` path to such an agent (given a provider when `--model` is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from coordinator import Coordinator, Scope

from ._dataset import Feature

if TYPE_CHECKING:
    from agents import Agent, AgentContext
    from agents.providers import Provider

__all__ = ["AgentChoice", "AgentOptions", "context", "load_agent", "task_text"]


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """What `--agent`, `--model` and `--base-url` say."""

    model: str | None = None
    base_url: str | None = None
    retries: int = 4


@dataclass(frozen=True, slots=True)
class AgentChoice:
    """The run's agent, as the team runs it."""

    name: str
    """Its name in the results (`PairResult.agent`)."""
    agent: Agent | None
    """None: the oracle, an agent bound to its features (`_oracle.oracle`)."""
    options: AgentOptions
    builtin: bool = False
    """The built-in `agents.CodingAgent`: a team of them runs as workers an LLM
    supervisor can steer."""

    @property
    def oracle(self) -> bool:
        return self.agent is None

    def provider(self) -> Provider | None:
        """A new provider of `--model` for one agent (None without one); the caller
        closes it."""
        if self.options.model is None:
            return None
        from agents.providers import provider_from_spec

        return provider_from_spec(self.options.model, self.options.base_url)


def load_agent(spec: str, options: AgentOptions) -> AgentChoice:
    """The agent named `spec`: `oracle`, `given` (no agent: `grade --patches` grades
    patches read from disk), an agent of the `corral.agents` group
    (`builtin`, `mini-swe-agent`, ...: run on `options.model`), or `module:attr`.
    Raises LookupError (no such agent) or ValueError (a named agent without a model)."""
    from agents import agent_names
    from agents import load_agent as load_corral_agent
    from agents.entry import builtin

    if spec in ("oracle", "given"):  # given: `grade --patches`, the patches read from disk
        return AgentChoice(spec, None, options)
    if ":" not in spec and spec not in agent_names():
        raise LookupError(f"no agent {spec!r}: use oracle, an agent of corral.agents "
                          f"({', '.join(agent_names()) or 'none installed'}) or module:attr")
    if ":" not in spec and not options.model:
        raise ValueError(f"the {spec} agent needs --model PROVIDER/MODEL")
    agent = load_corral_agent(spec)
    name = spec.rpartition(":")[2] if ":" in spec else spec
    return AgentChoice(name, agent, options, builtin=agent is builtin)


def task_text(features: tuple[Feature, ...], teammates: tuple[str, ...], messaging: bool
              ) -> str:
    """The prompt text: one feature.md, or (solo) each as `## Feature i … ---`."""
    if len(features) == 1:
        text = features[0].description.strip()
    else:
        text = "\n\n".join(f"## Feature {i}\n\n{f.description.strip()}\n\n---"
                           for i, f in enumerate(features, 1))
    if len(teammates) == 1 and messaging:
        text += ("\n\nAnother agent implements a different feature of the same repository in "
                 f"parallel ({teammates[0]}); your changes are merged with theirs. "
                 "Use send_message to coordinate.")
    elif teammates and messaging:
        text += (f"\n\n{len(teammates)} other agents each implement a different feature of "
                 f"the same repository in parallel ({', '.join(teammates)}); your changes "
                 "are merged with theirs. Use send_message to coordinate.")
    return text


def context(coord: Coordinator, scope: Scope, features: tuple[Feature, ...],
            provider: Provider | None, *, max_steps: int, max_tokens: int | None,
            retries: int = 4, teammates: tuple[str, ...] = (), messaging: bool = True,
            team: str | None = None, text: str | None = None) -> AgentContext:
    """What one agent of a unit is given: its scope, its features' text (or `text`), its
    share of the unit's budget, its teammates (by scope name), its team (the team
    settings)."""
    from agents import AgentContext, Budget

    return AgentContext(coord, scope, text or task_text(features, teammates, messaging),
                        provider,
                        Budget(max_steps=max_steps, max_tokens=max_tokens, retries=retries),
                        name=scope.name, teammates=teammates, messaging=messaging, team=team)
