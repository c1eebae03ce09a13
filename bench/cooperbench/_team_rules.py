"""A unit's rules: what each setting is (`SETTING_RULES`), the policies each unit's
scopes work under, and the supervisor.

Budgets are per unit and equal in every setting: `max_steps` steps and `max_tokens`
tokens. Solo gets all of it; each of the N coop or supervised agents 1/N; a handoff
moves the giver's unspent share to the receiver. Each agent is told its share (CodingAgent stops
at it) and `PairBudget`, a policy in the chain, blocks any model call past it, so a
plug-in agent that ignores its `max_steps` cannot outspend the others. The supervisor's
own model calls are not workers' budget: they are counted and reported apart.

`--messaging off` is real: the agents get no send_message tool and no word of a
teammate (`_team`), and `NoMessages` blocks every message from one agent to another
(the supervisor's notes still arrive: they are the supervisor's channel, not the team's).

Supervisors (`--supervisor`): `conflict-guard` (a policy: blocks an intent that would
conflict with the other agent's work); `module:attr` / a `corral.policies` entry point
after the guard; `llm:PROVIDER/MODEL`: the guard plus `agents.LLMSupervisor` (`_team`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator import (
    ConflictGuard,
    Coordinator,
    Decision,
    Intent,
    Policy,
    Subscription,
    View,
    block,
    load_policy,
)

from ._agents import AgentChoice
from ._records import Setting

__all__ = [
    "SETTING_RULES",
    "NoMessages",
    "PairBudget",
    "PairRules",
    "SettingRules",
    "TeamConfig",
    "check_supervisor",
    "pair_policies",
    "supervisor_model",
    "supervisor_policies",
]


@dataclass(frozen=True, slots=True)
class SettingRules:
    """What a setting is, for the harness around its agents (`_team.TEAMS` says how
    they work)."""

    one_agent: bool
    """One agent (scope `….solo`) does every feature of the unit, graded without a
    merge; else one agent (`….agent<k>`) per feature, graded by the fold."""
    supervised: bool
    """The supervisor's policies (`--supervisor`) are in the unit's chain."""
    team: bool = False
    """The agents are one Corral team, with its task list and scratchpad
    (`_team_tasks`): CooperBench 0.0.2x's team setting."""


SETTING_RULES: dict[Setting, SettingRules] = {
    "solo": SettingRules(one_agent=True, supervised=False),
    "coop": SettingRules(one_agent=False, supervised=False),
    "supervised": SettingRules(one_agent=False, supervised=True),
    "team": SettingRules(one_agent=False, supervised=False, team=True),
    "supervised-team": SettingRules(one_agent=False, supervised=True, team=True),
}


@dataclass(frozen=True)
class TeamConfig:
    """What the agents of a pair work under (a part of the unit's configuration)."""

    supervisor: str = "conflict-guard"
    messaging: bool = True
    max_steps: int = 60
    max_tokens: int | None = None
    base_url: str | None = None
    """The supervisor model's URL (default: the agents' `--base-url`)."""
    supervisor_calls: int = 20
    """At most this many supervisor model calls per unit."""


def supervisor_model(spec: str) -> str | None:
    """PROVIDER/MODEL of an `llm:PROVIDER/MODEL` supervisor, else None."""
    if not spec.startswith("llm:"):
        return None
    model = spec[4:]
    if "/" not in model:
        raise ValueError(f"--supervisor {spec}: use llm:PROVIDER/MODEL")
    return model


def check_supervisor(spec: str, agent: AgentChoice) -> None:
    """Refuse, before any work, an LLM supervisor over agents it cannot steer."""
    if supervisor_model(spec) is not None and not (agent.oracle or agent.builtin):
        raise ValueError(f"--supervisor {spec} steers the oracle and builtin agents only "
                         f"(not {agent.name})")


def supervisor_policies(spec: str) -> list[Policy]:
    """The policies of a `--supervisor` value: conflict-guard; llm:PROVIDER/MODEL (the
    guard; the model watches from outside the chain); or module:attr / an entry point
    of corral.policies (after the guard). Raises ValueError or LookupError."""
    if spec == "conflict-guard" or supervisor_model(spec) is not None:
        return [ConflictGuard()]
    return [ConflictGuard(), load_policy(spec)]


class NoMessages:
    """Blocks every message an agent of the pair sends (`--messaging off`); the agents
    are named once their scopes exist (`assign`)."""

    name = "messaging-off"

    def __init__(self, agents: Sequence[str] = ()) -> None:
        self.agents = frozenset(agents)

    def assign(self, agents: Sequence[str]) -> None:
        self.agents = frozenset(agents)

    async def __call__(self, intent: Intent, view: View, /) -> Decision | None:
        if intent.kind == "message" and view.scope in self.agents:
            return block("messaging is off in this run: agents cannot message each other")
        return None


class PairBudget:
    """The pair's step and token budget, shared out among its agents; blocks a model call
    of an agent whose share is spent. Usage is read from the event bus (each
    materialized `model.call` effect: one step, its prompt + completion tokens), for
    every scope, so the supervisor's and resolver's use is known too."""

    name = "budget"

    def __init__(self, steps: int, tokens: int | None, agents: Sequence[str] = ()) -> None:
        self.steps, self.tokens = steps, tokens
        self.share: dict[str, list[int | None]] = {}
        self.used: dict[str, list[int]] = {}
        self._sub: Subscription | None = None
        self.assign(agents)

    def assign(self, agents: Sequence[str]) -> None:
        """Share the budget equally among `agents` (scope names)."""
        n = max(1, len(agents))
        self.share = {a: [self.steps // n, self.tokens // n if self.tokens is not None
                          else None] for a in agents}

    def attach(self, coord: Coordinator) -> None:
        self._sub = coord.events.subscribe(types=["effect"], kinds=["model.call"])

    def close(self) -> None:
        if self._sub is not None:
            self._drain()
            self._sub.close()
            self._sub = None

    def _drain(self) -> None:
        if self._sub is None:
            return
        for event in self._sub.drain():
            e = event.effect
            if e.status != "materialized":
                continue
            usage = getattr(e.outcome, "usage", None)
            used = self.used.setdefault(e.scope, [0, 0])
            used[0] += 1
            if usage is not None:
                used[1] += usage.prompt_tokens + usage.completion_tokens

    def charge(self, agent: str, steps: int = 1) -> None:
        """Count steps taken without a model (the oracle's)."""
        self.used.setdefault(agent, [0, 0])[0] += steps

    def spent(self, agent: str) -> str | None:
        """Why `agent` may not take another step, or None."""
        self._drain()
        if agent not in self.share:
            return None
        steps, tokens = self.share[agent]
        used = self.used.get(agent, [0, 0])
        if steps is not None and used[0] >= steps:
            return f"{agent}'s share of the pair's step budget is spent ({used[0]}/{steps})"
        if tokens is not None and used[1] >= tokens:
            return f"{agent}'s share of the pair's token budget is spent ({used[1]}/{tokens})"
        return None

    def left(self, agent: str) -> tuple[int, int | None]:
        self._drain()
        steps, tokens = self.share.get(agent, [0, None])
        used = self.used.get(agent, [0, 0])
        return (max(0, (steps or 0) - used[0]),
                None if tokens is None else max(0, tokens - used[1]))

    def transfer(self, giver: str, receiver: str) -> tuple[int, int | None]:
        """Move `giver`'s unspent share to `receiver` (a handoff); returns it."""
        steps, tokens = self.left(giver)
        g, r = self.share[giver], self.share[receiver]
        used = self.used.get(giver, [0, 0])
        g[0] = used[0]
        r[0] = (r[0] or 0) + steps
        if tokens is not None:
            g[1] = used[1]
            r[1] = (r[1] or 0) + tokens
        return steps, tokens

    def usage(self, scope: str) -> tuple[int, int]:
        self._drain()
        steps, tokens = self.used.get(scope, [0, 0])
        return steps, tokens

    async def __call__(self, intent: Intent, view: View, /) -> Decision | None:
        if intent.kind != "model.call" or getattr(intent, "attempt", 1) != 1:
            return None  # a retry of an allowed call is the same step
        reason = self.spent(view.scope)
        return block(reason) if reason else None


class PairRules:
    """A unit's own policies: no messages (when off), the budget, then the
    supervisor's. `chain` goes into the policy chain; `work` names the agents."""

    def __init__(self, cfg: TeamConfig, setting: Setting) -> None:
        self.budget = PairBudget(cfg.max_steps, cfg.max_tokens)
        rules = SETTING_RULES[setting]
        self.messages = NoMessages() if not cfg.messaging and not rules.one_agent else None
        self.chain: list[Policy] = [p for p in (self.messages, self.budget) if p is not None]
        if rules.supervised:
            self.chain.extend(supervisor_policies(cfg.supervisor))

    def assign(self, agents: Sequence[str]) -> None:
        self.budget.assign(agents)
        if self.messages is not None:
            self.messages.assign(agents)


def pair_policies(cfg: TeamConfig, setting: Setting) -> tuple[list[Policy], PairRules]:
    """The unit's policy chain and its rules (`work` names the agents once forked)."""
    rules = PairRules(cfg, setting)
    return rules.chain, rules
