"""The agents of one unit at work (a group of N features: one agent each, or one for
all): who works in which scope, with which share of the budget (`_team_rules`), and
(supervised by a model) under `agents.LLMSupervisor`, a model that watches every
effect and, on a blocked intent or a failure, injects a note, hands one agent's work
to another, rewinds or restarts an agent, or does nothing.

Oracles take turns, one hunk each (agent1 first, then 2..N), so runs repeat; under the
conflict guard a blocked oracle hands its features to the agent whose work the
blocked hunk would conflict with, who applies what it holds in agent order
(`_oracle_team`). The builtin agent runs as
`agents.CodingAgent` workers (without send_message when messaging is off); any other
agent (an `agents.Agent`) is awaited on an `AgentContext` each. How each setting works
is `TEAMS` (a further setting: an entry there and in `_team_rules.SETTING_RULES`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

from coordinator import Coordinator, Scope, SupervisorAction, Team

from ._agent_report import AgentReport
from ._agents import AgentChoice, context
from ._dataset import Feature
from ._oracle import OracleAgent
from ._oracle_team import OracleWorker, guard_handoff, oracle_turn, receiver
from ._records import Setting
from ._team_rules import SETTING_RULES, PairBudget, PairRules, TeamConfig, supervisor_model
from ._team_tasks import (
    make_team,
    oracle_done,
    oracle_handoff,
    oracle_setup,
    team_record,
    team_text,
)

if TYPE_CHECKING:
    from agents import AgentContext, AgentResult, CodingAgent, LLMSupervisor
    from agents.providers import Provider

__all__ = ["TEAMS", "TeamWork", "work"]

Worker: TypeAlias = "CodingAgent | OracleWorker"
"""What `LLMSupervisor` steers: `name`, `task`, `steps`, `stopped`, `lock`, `scope`,
`restart()` (the oracle's worker has them too)."""


TeamWork = Callable[
    [TeamConfig, Coordinator, list[Scope], tuple[Feature, ...], Setting, AgentChoice,
     PairBudget], Awaitable[AgentReport]]
"""How a setting's agents work: (config, coordinator, the unit's agent scopes, its
features, the setting, the agent, the unit's budget) -> their report. It may replace
a scope in the list (an agent restarted in a new scope)."""


async def work(cfg: TeamConfig, coord: Coordinator, scopes: list[Scope],
               features: tuple[Feature, ...], setting: Setting, agent: AgentChoice,
               rules: PairRules) -> AgentReport:
    """Run the unit's agents in `scopes` (one per feature; a one-agent setting: one)
    to the end; their report, with the budget and the supervisor's actions in
    `report.record`. An agent the supervisor restarted works on in a new scope of the
    same name: `scopes` is updated in place."""
    rules.assign([s.name for s in scopes])
    budget = rules.budget
    budget.attach(coord)
    one_agent = SETTING_RULES[setting].one_agent
    try:
        report = await TEAMS[setting](cfg, coord, scopes, features, setting, agent, budget)
        if SETTING_RULES[setting].team:
            report.record.update(await team_record(coord, scopes[0]))
    finally:
        budget.close()
    report.record.update({"max_steps": cfg.max_steps, "max_tokens": cfg.max_tokens,
                          "messaging": cfg.messaging if not one_agent else True})
    if SETTING_RULES[setting].supervised:
        report.record["supervisor"] = cfg.supervisor
        report.record["supervisor_tokens"] = budget.usage(_supervisor_scope(scopes))[1]
    return report


async def _solo(cfg: TeamConfig, coord: Coordinator, scopes: list[Scope],
                features: tuple[Feature, ...], setting: Setting, agent: AgentChoice,
                budget: PairBudget) -> AgentReport:
    """One agent on every feature, in order, with the unit's whole budget."""
    (scope,) = scopes
    if agent.oracle:
        oracle = OracleAgent(features)
        await oracle(context(coord, scope, features, None, max_steps=cfg.max_steps,
                             max_tokens=cfg.max_tokens))
        return oracle.report
    return (await _run_agents(cfg, coord, [scope], [features], agent, cfg.max_steps,
                              cfg.max_tokens))


async def _team(cfg: TeamConfig, coord: Coordinator, scopes: list[Scope],
                features: tuple[Feature, ...], setting: Setting, agent: AgentChoice,
                budget: PairBudget) -> AgentReport:
    """One agent per feature (coop; supervised: the same under the supervisor)."""
    if agent.oracle:
        return await _oracle_team(cfg, coord, scopes, features, setting, budget)
    return await _model_team(cfg, coord, scopes, features, setting, agent, budget)


TEAMS: dict[Setting, TeamWork] = {"solo": _solo, "coop": _team, "supervised": _team,
                                  "team": _team, "supervised-team": _team}
"""The team settings work as coop and supervised do, the agents one Corral team
(`_team_tasks`): the oracles claim their tasks and note their work by hand, a model
agent has the team's tools."""


async def _run_agents(cfg: TeamConfig, coord: Coordinator, scopes: Sequence[Scope],
                      features: Sequence[tuple[Feature, ...]], agent: AgentChoice,
                      max_steps: int, max_tokens: int | None, team: TeamUnit | None = None
                      ) -> AgentReport:
    """`agent` in each of `scopes` at once, on its features (in a team: the team's task
    text), each with a provider of its own; their reports summed."""
    assert agent.agent is not None
    run = agent.agent

    async def one(ctx: AgentContext) -> AgentResult:
        return await run(ctx)  # an Agent returns an awaitable, not always a coroutine

    names = tuple(s.name for s in scopes)
    providers = [agent.provider() for _ in scopes]
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(one(context(
                coord, s, f, p, max_steps=max_steps, max_tokens=max_tokens,
                retries=agent.options.retries,
                teammates=tuple(n for n in names if n != s.name),
                messaging=cfg.messaging if len(scopes) > 1 else True,
                **(team.of(s) if team is not None else {}))))
                for s, f, p in zip(scopes, features, providers, strict=True)]
    finally:
        for p in providers:
            if p is not None:
                await p.aclose()
    report = AgentReport()
    for t in tasks:
        report.add(AgentReport.of(t.result()))
    return report


# -- oracles ------------------------------------------------------------------------


async def _oracle_team(cfg: TeamConfig, coord: Coordinator, scopes: list[Scope],
                       features: tuple[Feature, ...], setting: Setting,
                       budget: PairBudget) -> AgentReport:
    """N oracles taking turns hunk by hunk, agent 1 first.

    Under the conflict guard a blocked oracle hands every feature it holds (a
    `message` effect) to the agent its hunk would conflict with, who applies them in
    agent order (`_oracle_team`); with messaging off, or nobody left to take them, the
    blocked hunk is lost. Under an LLM supervisor the model decides: its handoff moves
    the blocked hunk and the rest to the receiver; anything else leaves the blocked
    hunk lost."""
    report = AgentReport()
    in_team = SETTING_RULES[setting].team
    workers = (await oracle_setup(coord, scopes, features) if in_team else
               [OracleWorker(s, f, k) for k, (s, f) in enumerate(zip(scopes, features,
                                                                     strict=True))])
    by_name = {w.name: w for w in workers}
    sup, sup_provider = await _start_supervisor(cfg, coord, workers)
    guarded = SETTING_RULES[setting].supervised and sup is None
    seen = 0
    try:
        while True:
            if sup is not None:
                await sup.settle()
                seen = _apply_handoffs(sup, seen, by_name, budget, report)
            if not any(w.busy for w in workers):
                break
            for w in workers:
                if sup is not None:
                    await sup.settle()
                    seen = _apply_handoffs(sup, seen, by_name, budget, report)
                result = await oracle_turn(w, budget, report, coord)
                if result is None or not result.blocked:
                    continue
                if guarded:
                    await _blocked(cfg, w, workers, result.reason, budget, report)
        if in_team:
            await oracle_done(workers)
    finally:
        if sup is not None:
            await _close_supervisor(sup, sup_provider, report)
        scopes[:] = [w.scope for w in workers]
    return report


async def _blocked(cfg: TeamConfig, w: OracleWorker, workers: Sequence[OracleWorker],
                   reason: str, budget: PairBudget, report: AgentReport) -> None:
    """The guarded oracle's answer to its blocked hunk: a handoff (`guard_handoff`)."""
    taker = receiver(w, workers, reason)
    if not cfg.messaging or taker is None:
        report.notes.append(f"{w.lost[-1].describe()}: blocked, no handoff "
                            + ("(messaging off)" if not cfg.messaging else "(nobody left)"))
        return
    await guard_handoff(w, taker, budget, report)
    await oracle_handoff(w, taker, reason)


def _apply_handoffs(sup: LLMSupervisor, seen: int, workers: Mapping[str, Worker],
                    budget: PairBudget, report: AgentReport) -> int:
    """Carry out, on our side, the supervisor's handoffs since action `seen`: the giver's
    blocked and remaining work goes to the receiver with its unspent budget."""
    for effect in sup.actions[seen:]:
        a = effect.intent
        if not isinstance(a, SupervisorAction) or a.action != "handoff":
            continue
        giver, taker = workers.get(str(a.detail.get("from"))), workers.get(a.target)
        if giver is None or taker is None or giver.stopped is None:
            continue  # the merge conflicted: the supervisor's handoff did not happen
        if isinstance(giver, OracleWorker) and isinstance(taker, OracleWorker):
            taker.queue.extend([*giver.lost, *giver.queue])
            giver.queue.clear()
            giver.lost.clear()
        steps, tokens = budget.transfer(giver.name, taker.name)
        limits = getattr(taker, "limits", None)
        if limits is not None:  # a CodingAgent: raise its own limits by the same
            limits.max_steps += steps
            if limits.max_tokens is not None and tokens is not None:
                limits.max_tokens += tokens
        report.handoffs += 1
        report.handed_off.append(giver.name)
    return len(sup.actions)


# -- model agents ---------------------------------------------------------------


async def _model_team(cfg: TeamConfig, coord: Coordinator, scopes: list[Scope],
                      features: tuple[Feature, ...], setting: Setting, agent: AgentChoice,
                      budget: PairBudget) -> AgentReport:
    """N agents at once, each with 1/N of the unit's budget. The builtin agent runs as
    `agents.CodingAgent` workers (without send_message when messaging is off), which an
    LLM supervisor can steer; any other agent is awaited on its `AgentContext`."""
    n = max(1, len(scopes))
    per_agent = max(1, cfg.max_steps // n)
    tokens = cfg.max_tokens // n if cfg.max_tokens else None
    if supervisor_model(cfg.supervisor) is not None and SETTING_RULES[setting].supervised \
            and not agent.builtin:
        raise ValueError("--supervisor llm:... steers the oracle and builtin agents only")
    team = (TeamUnit(*await make_team(coord, scopes, features), features)
            if SETTING_RULES[setting].team else None)
    if agent.builtin:
        return await _coding_team(cfg, coord, scopes, features, agent, budget, per_agent,
                                  tokens, team)
    return await _run_agents(cfg, coord, scopes, [(f,) for f in features], agent, per_agent,
                             tokens, team)


class TeamUnit:
    """A team unit's team, for its model agents' contexts: the team's name and each
    member's task text (`_team_tasks.team_text`)."""

    def __init__(self, team: Team, ids: list[str], features: Sequence[Feature]) -> None:
        self.team, self.ids, self.features = team, ids, features

    def of(self, scope: Scope) -> dict[str, str]:
        return {"team": self.team.name,
                "text": team_text(self.features, scope.name, self.team.lead, self.ids)}


async def _coding_team(cfg: TeamConfig, coord: Coordinator, scopes: list[Scope],
                       features: tuple[Feature, ...], agent: AgentChoice,
                       budget: PairBudget, per_agent: int, tokens: int | None,
                       team: TeamUnit | None = None) -> AgentReport:
    from agents import CodingAgent
    from agents.supervisor import run_to_rest

    names = tuple(s.name for s in scopes)
    providers = [agent.provider() for _ in scopes]
    # From the context as `builtin` itself builds it (its tools and system prompt
    # without send_message when messaging is off), kept as workers a supervisor steers.
    workers = [
        CodingAgent.from_context(context(
            coord, s, (f,), p, max_steps=per_agent, max_tokens=tokens,
            retries=agent.options.retries, teammates=tuple(n for n in names if n != s.name),
            messaging=cfg.messaging, **(team.of(s) if team is not None else {})))
        for s, f, p in zip(scopes, features, providers, strict=True)]
    by_name = {w.name: w for w in workers}
    report = AgentReport()
    sup, sup_provider = await _start_supervisor(cfg, coord, workers, agent.options.retries)
    seen = 0
    try:
        if sup is not None:
            async def before() -> None:
                nonlocal seen
                await sup.settle()
                seen = _apply_handoffs(sup, seen, by_name, budget, report)

            for w in workers:
                w.before_step = before
        # The supervisor reacts to the end of each run as it does before each step.
        results = await run_to_rest(workers, sup,
                                    (lambda _w: before()) if sup is not None else None)
        for w in workers:
            report.add(AgentReport.of(results[w.name]))
    finally:
        if sup is not None:
            await _close_supervisor(sup, sup_provider, report)
        scopes[:] = [w.scope for w in workers]
        for p in providers:
            if p is not None:
                await p.aclose()
    return report


# -- the LLM supervisor ---------------------------------------------------------


async def _start_supervisor(cfg: TeamConfig, coord: Coordinator, workers: Sequence[Worker],
                            retries: int = 4
                            ) -> tuple[LLMSupervisor, Provider] | tuple[None, None]:
    """An `LLMSupervisor` over `workers` when `cfg.supervisor` is llm:..., else Nones."""
    model = supervisor_model(cfg.supervisor)
    if model is None:
        return None, None
    from agents import LLMSupervisor, ModelCaller
    from agents.providers import provider_from_spec

    provider = provider_from_spec(model, cfg.base_url)
    sup = LLMSupervisor(coord, ModelCaller(coord, provider, attempts=retries), workers,
                        scope_name=_supervisor_scope([w.scope for w in workers]),
                        max_calls=cfg.supervisor_calls)
    await sup.start()
    return sup, provider


def _supervisor_scope(scopes: Sequence[Scope]) -> str:
    """The supervisor's scope name beside the agents' (`P.agent1` -> `P.supervisor`)."""
    first = scopes[0].name
    return first.removesuffix("agent1") + "supervisor" if first.endswith("agent1") else (
        "supervisor")


async def _close_supervisor(sup: LLMSupervisor, provider: Provider | None,
                            report: AgentReport) -> None:
    await sup.close()
    if provider is not None:
        await provider.aclose()
    report.record["supervisor_actions"] = tuple(
        f"{e.intent.action} {e.intent.target} {e.intent.detail}" for e in sup.actions
        if isinstance(e.intent, SupervisorAction))
    if sup.errors:
        report.notes.extend(sup.errors)

