"""The agents of one pair at work: who works in which scope, with which share of the
budget (`_team_rules`), and (supervised by a model) under `agents.LLMSupervisor`, a
model that watches every effect and, on a blocked intent or a failure, injects a note,
hands one agent's work to the other, rewinds or restarts an agent, or does nothing.

Oracles take turns, one hunk each (agent1 first), so runs repeat; under the conflict
guard a blocked oracle hands its remaining work to the other. The builtin agent runs
as `agents.CodingAgent` workers (without send_message when messaging is off); any
other agent (an `agents.Agent`) is awaited on an `AgentContext` each.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias, cast

from coordinator import Coordinator, Scope, SupervisorAction

from ._agent_report import AgentReport
from ._agents import AgentChoice, context
from ._dataset import Feature
from ._oracle import OracleAgent, Step, oracle_steps, run_oracle_step
from ._records import Setting
from ._team_rules import PairBudget, PairRules, TeamConfig, supervisor_model

if TYPE_CHECKING:
    from agents import AgentContext, AgentResult, CodingAgent, LLMSupervisor
    from agents.providers import Provider

__all__ = ["work"]

Worker: TypeAlias = "CodingAgent | _OracleWorker"
"""What `LLMSupervisor` steers: `name`, `task`, `steps`, `stopped`, `lock`, `scope`,
`restart()` (the oracle's worker has them too)."""


async def work(cfg: TeamConfig, coord: Coordinator, scopes: list[Scope],
               features: tuple[Feature, Feature], setting: Setting, agent: AgentChoice,
               rules: PairRules) -> AgentReport:
    """Run the pair's agents in `scopes` (solo: one) to the end; their report, with
    the budget and the supervisor's actions in `report.record`. An agent the
    supervisor restarted works on in a new scope of the same name: `scopes` is
    updated in place."""
    rules.assign([s.name for s in scopes])
    budget = rules.budget
    budget.attach(coord)
    try:
        if setting == "solo":
            report = await _solo(cfg, coord, scopes[0], features, agent)
        elif agent.oracle:
            report = await _oracle_team(cfg, coord, scopes, features, setting, budget)
        else:
            report = await _model_team(cfg, coord, scopes, features, setting, agent, budget)
    finally:
        budget.close()
    report.record.update({"max_steps": cfg.max_steps, "max_tokens": cfg.max_tokens,
                          "messaging": cfg.messaging if setting != "solo" else True})
    if setting == "supervised":
        report.record["supervisor"] = cfg.supervisor
        report.record["supervisor_tokens"] = budget.usage(_supervisor_scope(scopes))[1]
    return report


async def _solo(cfg: TeamConfig, coord: Coordinator, scope: Scope,
                features: tuple[Feature, Feature], agent: AgentChoice) -> AgentReport:
    """One agent on both features with the pair's whole budget."""
    if agent.oracle:
        oracle = OracleAgent(features)
        await oracle(context(coord, scope, features, None, max_steps=cfg.max_steps,
                             max_tokens=cfg.max_tokens))
        return oracle.report
    return (await _run_agents(cfg, coord, [scope], [features], agent, cfg.max_steps,
                              cfg.max_tokens))


async def _run_agents(cfg: TeamConfig, coord: Coordinator, scopes: Sequence[Scope],
                      features: Sequence[tuple[Feature, ...]], agent: AgentChoice,
                      max_steps: int, max_tokens: int | None) -> AgentReport:
    """`agent` in each of `scopes` at once, on its features, each with a provider of
    its own; their reports summed."""
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
                messaging=cfg.messaging if len(scopes) > 1 else True)))
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


class _OracleWorker:
    """An oracle in a team: a queue of gold hunks. It has what `LLMSupervisor` steers
    (`name`, `task`, `steps`, `stopped`, `lock`, `scope`, `restart`), so a model can
    supervise oracles: a handoff moves its remaining hunks to the receiver, a restart
    discards its scope and starts its feature over, a note is read and kept (the
    oracle follows its gold patch whatever it is told)."""

    def __init__(self, scope: Scope, feature: Feature) -> None:
        self.scope = scope
        self.feature = feature
        self.task = feature.description.strip().splitlines()[0] if feature.description else ""
        self.queue: deque[Step] = deque(oracle_steps(feature))
        self.lost: list[Step] = []
        """Blocked steps: gone unless a handoff gives them to the other agent."""
        self.lock = asyncio.Lock()
        self.stopped: str | None = None
        self.steps = 0

    @property
    def name(self) -> str:
        return self.scope.name

    def restart(self, scope: Scope) -> None:
        self.scope = scope
        self.queue = deque(oracle_steps(self.feature))
        self.lost = []

    @property
    def busy(self) -> bool:
        return self.stopped is None and bool(self.queue)


async def _oracle_team(cfg: TeamConfig, coord: Coordinator, scopes: list[Scope],
                       features: tuple[Feature, Feature], setting: Setting,
                       budget: PairBudget) -> AgentReport:
    """Two oracles taking turns hunk by hunk, agent 1 first.

    Under the conflict guard a blocked oracle hands its remaining hunks to the other
    (a `message` effect), who merges its branch and applies them after its own; with
    messaging off it cannot, and the blocked hunk is lost. Under an LLM supervisor the
    model decides: its handoff moves the blocked hunk and the rest to the receiver;
    anything else leaves the blocked hunk lost."""
    report = AgentReport()
    workers = [_OracleWorker(s, f) for s, f in zip(scopes, features, strict=True)]
    by_name = {w.name: w for w in workers}
    sup, sup_provider = await _start_supervisor(cfg, coord, workers)
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
                async with w.lock:
                    if not w.busy:
                        continue
                    reason = budget.spent(w.name)
                    if reason:
                        w.stopped = reason
                        report.notes.append(reason)
                        continue
                    step = w.queue.popleft()
                    budget.charge(w.name)
                    w.steps += 1
                    for m in w.scope.take_messages():
                        report.notes.append(f"{w.name} got a note from {m.sender}: {m.text}")
                    result = await run_oracle_step(w.scope, step, report, coord)
                if result is None or not result.blocked:
                    continue
                w.lost.append(step)
                if setting != "supervised" or sup is not None:
                    continue
                other = next(o for o in workers if o is not w)
                if not cfg.messaging or other.stopped is not None:
                    report.notes.append(f"{step.describe()}: blocked, no handoff "
                                        + ("(messaging off)" if not cfg.messaging else
                                           "(nobody left)"))
                    continue
                await _guard_handoff(w, other, budget, report)
    finally:
        if sup is not None:
            await _close_supervisor(sup, sup_provider, report)
        scopes[:] = [w.scope for w in workers]
    return report


async def _guard_handoff(w: _OracleWorker, other: _OracleWorker, budget: PairBudget,
                         report: AgentReport) -> None:
    """The conflict-guard oracle's own handoff: tell the other, who merges our branch
    and takes our blocked and remaining hunks."""
    remaining = [*w.lost, *w.queue]
    w.queue.clear()
    w.lost.clear()
    w.stopped = "handed off"
    await w.scope.send(other.name, f"handoff: {len(remaining)} step(s) of feature "
                       f"{w.feature.id} are yours")
    merged = await other.scope.merge(w.scope)
    if merged.conflicts:
        report.notes.append(f"handoff merge conflicted: {[c.path for c in merged.conflicts]}")
    other.queue.extend(remaining)
    budget.transfer(w.name, other.name)
    report.handoffs += 1


def _apply_handoffs(sup: LLMSupervisor, seen: int, workers: Mapping[str, Worker],
                    budget: PairBudget, report: AgentReport) -> int:
    """Carry out, on our side, the supervisor's handoffs since action `seen`: the giver's
    blocked and remaining work goes to the receiver with its unspent budget."""
    for effect in sup.actions[seen:]:
        a = effect.intent
        if not isinstance(a, SupervisorAction) or a.action != "handoff":
            continue
        giver, receiver = workers.get(str(a.detail.get("from"))), workers.get(a.target)
        if giver is None or receiver is None or giver.stopped is None:
            continue  # the merge conflicted: the supervisor's handoff did not happen
        if isinstance(giver, _OracleWorker) and isinstance(receiver, _OracleWorker):
            receiver.queue.extend([*giver.lost, *giver.queue])
            giver.queue.clear()
            giver.lost.clear()
        steps, tokens = budget.transfer(giver.name, receiver.name)
        limits = getattr(receiver, "limits", None)
        if limits is not None:  # a CodingAgent: raise its own limits by the same
            limits.max_steps += steps
            if limits.max_tokens is not None and tokens is not None:
                limits.max_tokens += tokens
        report.handoffs += 1
    return len(sup.actions)


# -- model agents ---------------------------------------------------------------


async def _model_team(cfg: TeamConfig, coord: Coordinator, scopes: list[Scope],
                      features: tuple[Feature, Feature], setting: Setting, agent: AgentChoice,
                      budget: PairBudget) -> AgentReport:
    """Two agents at once, each with half the pair's budget. The builtin agent runs as
    `agents.CodingAgent` workers (without send_message when messaging is off), which an
    LLM supervisor can steer; any other agent is awaited on its `AgentContext`."""
    per_agent = max(1, cfg.max_steps // 2)
    tokens = cfg.max_tokens // 2 if cfg.max_tokens else None
    if agent.builtin:
        return await _coding_team(cfg, coord, scopes, features, agent, budget, per_agent,
                                  tokens)
    if supervisor_model(cfg.supervisor) is not None and setting == "supervised":
        raise ValueError("--supervisor llm:... steers the oracle and builtin agents only")
    return await _run_agents(cfg, coord, scopes, [(f,) for f in features], agent, per_agent,
                             tokens)


async def _coding_team(cfg: TeamConfig, coord: Coordinator, scopes: list[Scope],
                       features: tuple[Feature, Feature], agent: AgentChoice,
                       budget: PairBudget, per_agent: int, tokens: int | None) -> AgentReport:
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
            messaging=cfg.messaging))
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
    # Workers are duck-typed: the supervisor reads name, task, steps, stopped, lock,
    # scope and restart(), which the oracle worker has too.
    sup = LLMSupervisor(coord, ModelCaller(coord, provider, attempts=retries),
                        cast("Sequence[CodingAgent]", workers),
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

