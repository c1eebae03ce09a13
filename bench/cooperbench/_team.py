"""The agents of one pair at work: who works in which scope, under which policies, with
which budget, and (supervised) under which supervisor.

Budgets are per pair and equal in every setting: `max_steps` steps and `max_tokens`
tokens. Solo gets all of it; each coop or supervised agent half; a handoff moves the
giver's unspent share to the receiver. Each agent is told its share (CodingAgent stops
at it) and `PairBudget`, a policy in the chain, blocks any model call past it, so a
plug-in agent that ignores its `max_steps` cannot outspend the others. The supervisor's
own model calls are not workers' budget: they are counted and reported apart.

`--messaging off` is real: the agents get no send_message tool and no word of a
teammate, and `NoMessages` blocks every message from one agent to another (the
supervisor's notes still arrive: they are the supervisor's channel, not the team's).

Supervisors (`--supervisor`): `conflict-guard` (a policy: blocks an intent that would
conflict with the other agent's work); `module:attr` / a `corral.policies` entry point
after the guard; `llm:PROVIDER/MODEL`: the guard plus `agents.LLMSupervisor`, a model
that watches every effect and, on a blocked intent or a failure, injects a note, hands
one agent's work to the other, rewinds or restarts an agent, or does nothing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from coordinator import (
    ConflictGuard,
    Coordinator,
    Decision,
    Intent,
    Policy,
    Scope,
    Subscription,
    SupervisorAction,
    View,
    block,
    load_policy,
)

from ._agents import (
    Agent,
    AgentReport,
    Job,
    ModelAgent,
    OracleAgent,
    Step,
    oracle_steps,
    run_oracle_step,
    task_text,
)
from ._dataset import Feature
from ._records import Setting

__all__ = [
    "NoMessages",
    "PairBudget",
    "PairRules",
    "TeamConfig",
    "check_supervisor",
    "pair_policies",
    "supervisor_model",
    "supervisor_policies",
    "work",
]


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
    """At most this many supervisor model calls per pair."""


def supervisor_model(spec: str) -> str | None:
    """PROVIDER/MODEL of an `llm:PROVIDER/MODEL` supervisor, else None."""
    if not spec.startswith("llm:"):
        return None
    model = spec[4:]
    if "/" not in model:
        raise ValueError(f"--supervisor {spec}: use llm:PROVIDER/MODEL")
    return model


def check_supervisor(spec: str, agent: Agent) -> None:
    """Refuse, before any work, an LLM supervisor over agents it cannot steer."""
    if supervisor_model(spec) is not None and not (isinstance(agent, OracleAgent)
                                                   or _is_builtin(agent)):
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
        self.messages = NoMessages() if not cfg.messaging and setting != "solo" else None
        self.chain: list[Policy] = [p for p in (self.messages, self.budget) if p is not None]
        if setting == "supervised":
            self.chain.extend(supervisor_policies(cfg.supervisor))

    def assign(self, agents: Sequence[str]) -> None:
        self.budget.assign(agents)
        if self.messages is not None:
            self.messages.assign(agents)


def pair_policies(cfg: TeamConfig, setting: Setting) -> tuple[list[Policy], PairRules]:
    """The unit's policy chain and its rules (`work` names the agents once forked)."""
    rules = PairRules(cfg, setting)
    return rules.chain, rules


async def work(cfg: TeamConfig, coord: Coordinator, scopes: list[Scope],
               features: tuple[Feature, Feature], setting: Setting, agent: Agent,
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
            job = Job(coord, scopes[0], "solo", features,
                      task_text(features, "solo", (), False), max_steps=cfg.max_steps,
                      max_tokens=cfg.max_tokens)
            report = await agent.run(job)
        elif isinstance(agent, OracleAgent):
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


def _apply_handoffs(sup: Any, seen: int, workers: dict[str, Any], budget: PairBudget,
                    report: AgentReport) -> int:
    """Carry out, on our side, the supervisor's handoffs since action `seen`: the giver's
    blocked and remaining work goes to the receiver with its unspent budget."""
    for effect in sup.actions[seen:]:
        a = effect.intent
        if not isinstance(a, SupervisorAction) or a.action != "handoff":
            continue
        giver, receiver = workers.get(str(a.detail.get("from"))), workers.get(a.target)
        if giver is None or receiver is None or giver.stopped is None:
            continue  # the merge conflicted: the supervisor's handoff did not happen
        if isinstance(giver, _OracleWorker):
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
                      features: tuple[Feature, Feature], setting: Setting, agent: Agent,
                      budget: PairBudget) -> AgentReport:
    """Two model agents at once. The builtin agent runs as `agents.CodingAgent`
    workers (without send_message when messaging is off), which an LLM supervisor can
    steer; any other agent gets a `Job` each."""
    names = tuple(s.name for s in scopes)
    per_agent = max(1, cfg.max_steps // 2)
    tokens = cfg.max_tokens // 2 if cfg.max_tokens else None
    if _is_builtin(agent):
        return await _coding_team(cfg, coord, scopes, features, cast(ModelAgent, agent),
                                  budget, per_agent, tokens)
    if supervisor_model(cfg.supervisor) is not None and setting == "supervised":
        raise ValueError("--supervisor llm:... steers the oracle and builtin agents only")
    jobs = []
    for s, f in zip(scopes, features, strict=True):
        mates = tuple(n for n in names if n != s.name)
        jobs.append(Job(coord, s, s.name, (f,), task_text((f,), s.name, mates, cfg.messaging),
                        mates, cfg.messaging, per_agent, tokens))
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(agent.run(j)) for j in jobs]
    report = AgentReport()
    for t in tasks:
        report.add(t.result())
    return report


def _is_builtin(agent: Agent) -> bool:
    from agents.entry import builtin

    return isinstance(agent, ModelAgent) and agent.fn is builtin


async def _coding_team(cfg: TeamConfig, coord: Coordinator, scopes: list[Scope],
                       features: tuple[Feature, Feature], agent: ModelAgent,
                       budget: PairBudget, per_agent: int, tokens: int | None) -> AgentReport:
    from agents import SYSTEM_PROMPT, TOOLS, CodingAgent, ModelCaller
    from agents.providers import provider_from_spec
    from agents.supervisor import run_to_rest

    assert agent.options.model is not None
    names = tuple(s.name for s in scopes)
    tools, system = TOOLS, SYSTEM_PROMPT
    if not cfg.messaging:
        tools = tuple(t for t in TOOLS if t.name != "send_message")
        system = system.replace(" send_message to tell another agent something (they see it "
                                "at their next step),", "")
    providers = [provider_from_spec(agent.options.model, agent.options.base_url)
                 for _ in scopes]
    workers = [
        CodingAgent(coord, s, ModelCaller(coord, p, attempts=agent.options.retries),
                    task_text((f,), s.name, tuple(n for n in names if n != s.name),
                              cfg.messaging),
                    system=system, tools=tools, max_steps=per_agent, max_tokens=tokens)
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
            r = results[w.name]
            report.add(AgentReport(status=r.status, steps=r.steps, prompt_tokens=r.prompt_tokens,
                                   cached_tokens=r.cached_tokens,
                                   completion_tokens=r.completion_tokens, blocked=r.blocked,
                                   error=r.error))
    finally:
        if sup is not None:
            await _close_supervisor(sup, sup_provider, report)
        scopes[:] = [w.scope for w in workers]
        for p in providers:
            await p.aclose()
    return report


# -- the LLM supervisor ---------------------------------------------------------


async def _start_supervisor(cfg: TeamConfig, coord: Coordinator, workers: Sequence[Any],
                            retries: int = 4) -> tuple[Any, Any]:
    """An `LLMSupervisor` over `workers` when `cfg.supervisor` is llm:..., else Nones."""
    model = supervisor_model(cfg.supervisor)
    if model is None:
        return None, None
    from agents import LLMSupervisor, ModelCaller
    from agents.providers import provider_from_spec

    provider = provider_from_spec(model, cfg.base_url)
    # Workers are duck-typed: the supervisor reads name, task, steps, stopped, lock,
    # scope and restart(), which the oracle worker has too.
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


async def _close_supervisor(sup: Any, provider: Any, report: AgentReport) -> None:
    await sup.close()
    await provider.aclose()
    report.record["supervisor_actions"] = [
        f"{e.intent.action} {e.intent.target} {e.intent.detail}" for e in sup.actions
        if isinstance(e.intent, SupervisorAction)]
    if sup.errors:
        report.notes.extend(sup.errors)

