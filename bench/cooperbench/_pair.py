"""One unit of a run: a pair of features in one setting, worked by agents in Corral
scopes forked from the task's `env` scope, then graded in scopes (`ScopeLab`) under
each requested merge policy; the unit's scopes are discarded at the end, their history
kept in the task's trace. Scopes are named `<f1>-<f2>.<setting>.<role>`.

Settings:
- `solo`: one agent, scope `….solo`, gets both features.
- `coop`: agents `….agent1` (feature f1) and `….agent2` (f2) in sibling scopes, no
  supervisor. Oracle agents take turns, one hunk each (agent1 first), so runs repeat.
- `supervised`: coop under the supervisor (default the conflict guard). The oracle's
  answer to a blocked intent is a handoff: the blocked agent sends its remaining work
  to the other, who merges the blocked agent's branch (Corral's merge) and applies the
  rest of that feature on its own branch after its own; the blocked agent stops.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator import ConflictGuard, Coordinator, Policy, Scope, load_policy

from ._agents import (
    Agent,
    AgentReport,
    Job,
    OracleAgent,
    Step,
    oracle_steps,
    run_oracle_step,
    task_text,
)
from ._dataset import Pair, Task
from ._evaluate import Grade, grade_merged, grade_solo
from ._lab import TestRun
from ._patches import sanitize, strip_tests
from ._records import FeatureResult, MergePolicy, PairResult, Setting, Timings
from ._scope_lab import ScopeLab
from ._taskbench import TaskBench

__all__ = ["UnitConfig", "run_unit", "supervisor_policies"]


@dataclass(frozen=True)
class UnitConfig:
    out: Path
    """The run directory: traces/, patches/, logs/ go under it."""
    merges: tuple[MergePolicy, ...] = ("plain",)
    supervisor: str = "conflict-guard"
    messaging: bool = True
    max_steps: int = 60
    """Steps per pair: solo gets all, each coop agent half (equal budgets per pair)."""
    max_tokens: int | None = None
    test_timeout: float = 600.0
    backend: str | None = None
    price_in: float | None = None
    """USD per million prompt tokens (for cost per pair)."""
    price_out: float | None = None


def supervisor_policies(spec: str) -> list[Policy]:
    """The policies of a `--supervisor` value: conflict-guard, or module:attr / an entry
    point of corral.policies (after the guard). Raises ValueError or LookupError."""
    if spec == "conflict-guard":
        return [ConflictGuard()]
    if spec.startswith("llm:"):
        raise ValueError("--supervisor llm:... is not wired into the CooperBench harness yet; "
                         "use conflict-guard or module:attr")
    return [ConflictGuard(), load_policy(spec)]


def _safe(key: str) -> str:
    return key.replace("/", "-")


@dataclass
class _Run:
    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("open", "fork", "apply", "merge", "test", "test_commands", "close"), 0.0))
    report: AgentReport = field(default_factory=AgentReport)
    handoffs: int = 0
    scopes: dict[str, str] = field(default_factory=dict)
    patches: dict[str, str] = field(default_factory=dict)
    corral_diff: str | None = None
    corral_conflicts: tuple[str, ...] = ()
    states: dict[str, Scope] = field(default_factory=dict)
    """A patch's text -> the scope whose tree is base + that patch (the evaluation
    tests it there instead of applying it again)."""
    made: list[Scope] = field(default_factory=list)


def _remember(run: _Run, patch: str, scope: Scope) -> None:
    # Only a patch the rules grade unchanged (nothing stripped, nothing sanitized).
    if patch and strip_tests(sanitize(patch)) == patch:
        run.states.setdefault(patch, scope)


async def run_unit(
    cfg: UnitConfig,
    bench: TaskBench,
    pair: Pair,
    setting: Setting,
    agent: Agent,
) -> list[PairResult]:
    """Run `pair` in `setting` on the task's bench and grade it; one PairResult per
    merge policy (one for solo). A failure anywhere becomes results with status
    "error" and its reason. The unit's scopes are discarded at the end (their history
    stays in the trace)."""
    task = bench.task
    merges: Sequence[MergePolicy | str] = ("-",) if setting == "solo" else cfg.merges
    prefix = f"{pair.f1}-{pair.f2}.{setting}"
    run = _Run()
    started = time.perf_counter()
    grades: list[tuple[str, Grade, dict[str, str]]] = []
    error: Exception | None = None
    try:
        await _work(cfg, bench, pair, setting, agent, run, prefix)
        for merge in merges:
            lab = ScopeLab(bench, prefix if merge == "-" else f"{prefix}.{merge}", run.states)
            try:
                grade = await asyncio.to_thread(_grade, cfg, task, pair, setting, merge, lab, run)
                grades.append((merge, grade, {s.name: s.head for s in lab.scopes}))
            finally:
                run.made.extend(lab.scopes)
    except Exception as e:
        error = e
    t = time.perf_counter()
    for s in reversed(run.made):
        try:
            await s.discard()
        except Exception as e:  # the results stand; the scope stays live
            error = error or e
    run.timings["close"] = time.perf_counter() - t
    if error is not None:
        reason = f"{type(error).__name__}: {error}"
        return [PairResult(task=task.key, f1=pair.f1, f2=pair.f2, setting=setting,
                           merge=m, agent=agent.name, status="error",  # type: ignore[arg-type]
                           reason=reason[:2000], trace=str(bench.coord.state),
                           timings=Timings(total=round(time.perf_counter() - started, 4)))
                for m in merges]
    return [_result(cfg, task, pair, setting, merge, agent, run, grade, bench.coord.state,
                    graded) for merge, grade, graded in grades]


async def _work(cfg: UnitConfig, bench: TaskBench, pair: Pair, setting: Setting,
                agent: Agent, run: _Run, prefix: str) -> None:
    coord, task = bench.coord, bench.task
    f1, f2 = task.features[pair.f1], task.features[pair.f2]
    t = time.perf_counter()
    roles = ["solo"] if setting == "solo" else ["agent1", "agent2"]
    scopes = []
    for role in roles:
        scopes.append(await bench.env.fork(f"{prefix}.{role}"))
        run.made.append(scopes[-1])
    run.timings["fork"] = time.perf_counter() - t
    names = [s.name for s in scopes]
    if setting == "supervised":
        bench.policy.supervise(names)
    t = time.perf_counter()
    try:
        if setting == "solo":
            job = Job(coord, scopes[0], "solo", (f1, f2),
                      task_text((f1, f2), "solo", (), False),
                      max_steps=cfg.max_steps, max_tokens=cfg.max_tokens)
            run.report = await agent.run(job)
        elif isinstance(agent, OracleAgent):
            await _oracle_team(coord, scopes[0], scopes[1], (f1, f2), setting, run)
        else:
            await _team(cfg, coord, scopes, (f1, f2), agent, run)
    finally:
        bench.policy.release(names)
    run.timings["apply"] = time.perf_counter() - t
    for role, s in zip(roles, scopes, strict=True):
        run.scopes[s.name] = s.head
        run.patches[role] = bench.diff(s)
        _remember(run, run.patches[role], s)
    if setting != "solo" and "corral" in cfg.merges:
        t = time.perf_counter()
        target = await scopes[1].fork(f"{prefix}.merged")
        run.made.append(target)
        m = await target.merge(scopes[0])
        run.scopes[target.name] = target.head
        if m.tree is not None:
            run.corral_diff = bench.diff(target)
            _remember(run, run.corral_diff, target)
        run.corral_conflicts = tuple(c.path for c in m.conflicts)
        run.timings["merge"] += time.perf_counter() - t


async def _oracle_team(coord: Coordinator, a1: Scope, a2: Scope, features: tuple[Any, Any],
                       setting: Setting, run: _Run) -> None:
    """Two oracles taking turns hunk by hunk; under supervision a blocked one hands
    its remaining work to the other."""
    queues: dict[str, deque[Step]] = {
        a1.name: deque(oracle_steps(features[0])), a2.name: deque(oracle_steps(features[1]))}
    scopes = {a1.name: a1, a2.name: a2}
    stopped: set[str] = set()
    while any(queues[n] for n in queues if n not in stopped):
        for name in (a1.name, a2.name):
            if name in stopped or not queues[name]:
                continue
            step = queues[name].popleft()
            result = await run_oracle_step(scopes[name], step, run.report, coord)
            if result is None or not result.blocked or setting != "supervised":
                continue
            other = a2.name if name == a1.name else a1.name
            if other in stopped:
                continue  # nobody left to hand over to: the step is lost
            remaining = [step, *queues[name]]
            queues[name].clear()
            stopped.add(name)
            await scopes[name].send(other, f"handoff: {len(remaining)} step(s) of feature "
                                    f"{step.feature} are yours; blocked: {result.reason}")
            merged = await scopes[other].merge(scopes[name])
            if merged.conflicts:
                run.report.notes.append(f"handoff merge conflicted: "
                                        f"{[c.path for c in merged.conflicts]}")
            queues[other].extend(remaining)
            run.handoffs += 1


async def _team(cfg: UnitConfig, coord: Coordinator, scopes: list[Scope],
                features: tuple[Any, Any], agent: Agent, run: _Run) -> None:
    names = tuple(s.name for s in scopes)
    per_agent = max(1, cfg.max_steps // 2)
    tokens = cfg.max_tokens // 2 if cfg.max_tokens else None
    jobs = [Job(coord, s, s.name, (f,), task_text((f,), s.name, tuple(n for n in names
                                                                       if n != s.name),
                                                   cfg.messaging),
                tuple(n for n in names if n != s.name), cfg.messaging, per_agent, tokens)
            for s, f in zip(scopes, features, strict=True)]
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(agent.run(j)) for j in jobs]
    for t in tasks:
        r = t.result()
        rep = run.report
        rep.steps += r.steps
        rep.prompt_tokens += r.prompt_tokens
        rep.cached_tokens += r.cached_tokens
        rep.completion_tokens += r.completion_tokens
        rep.blocked += r.blocked
        if r.error:
            rep.error = (rep.error + "; " if rep.error else "") + r.error


def _grade(cfg: UnitConfig, task: Task, pair: Pair, setting: Setting, merge: str,
           lab: ScopeLab, run: _Run) -> Grade:
    def run_tests(lab: Any, patch: str | None, fid: int) -> TestRun:
        return lab.run_tests(patch, task.features[fid].tests,  # type: ignore[no-any-return]
                             task.test_command, None, cfg.test_timeout)

    if setting == "solo":
        return grade_solo(lab, pair.f1, pair.f2, run.patches["solo"], run_tests)
    return grade_merged(lab, pair.f1, pair.f2, run.patches["agent1"], run.patches["agent2"],
                        run_tests, policy=merge,  # type: ignore[arg-type]
                        corral_diff=run.corral_diff)


def _result(cfg: UnitConfig, task: Task, pair: Pair, setting: Setting, merge: str,
            agent: Agent, run: _Run, grade: Grade, state: Path, graded: dict[str, str]
            ) -> PairResult:
    base = cfg.out / "patches" / _safe(task.key) / f"{pair.f1}-{pair.f2}"
    logs = cfg.out / "logs" / _safe(task.key) / f"{pair.f1}-{pair.f2}"
    base.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, text in run.patches.items():
        p = base / f"{setting}-{name}.patch"
        p.write_text(text)
        files[name] = str(p.relative_to(cfg.out))
    if grade.merged_diff:
        p = base / f"{setting}-{merge}-graded.patch"
        p.write_text(grade.merged_diff)
        files["graded"] = str(p.relative_to(cfg.out))
    for label, output in grade.outputs.items():
        (logs / f"{setting}-{merge}-{label}.log").write_text(output)
    rep = run.report
    status = "passed" if grade.passed else "failed"
    reason = "" if grade.passed else "; ".join(
        f"feature {f.id}: {f.reason}" for f in grade.features if not f.passed)
    if rep.error:
        status, reason = "error", f"agent error: {rep.error}"
    timings = Timings(**{k: round(v, 4) for k, v in run.timings.items()
                         if k not in ("merge", "test", "test_commands")},
                      merge=round(run.timings["merge"] + grade.merge_seconds, 4),
                      test=round(grade.test_seconds, 4),
                      test_commands=round(grade.command_seconds, 4))
    # This policy's own total: the unit's shared work plus its own grading.
    timings = timings.model_copy(update={"total": round(
        timings.open + timings.fork + timings.apply + timings.merge + timings.test
        + timings.close, 4)})
    cost = None
    if cfg.price_in is not None and cfg.price_out is not None:
        cost = round((rep.prompt_tokens * cfg.price_in
                      + rep.completion_tokens * cfg.price_out) / 1e6, 6)
    return PairResult(
        task=task.key, f1=pair.f1, f2=pair.f2, setting=setting, merge=merge,  # type: ignore[arg-type]
        agent=agent.name, status=status, reason=reason[:2000],  # type: ignore[arg-type]
        merge_status=grade.merge_status, strategy=grade.strategy, apply=grade.apply,
        features=tuple(FeatureResult.model_validate(f.model_dump()) for f in grade.features),
        timings=timings, prompt_tokens=rep.prompt_tokens, cached_tokens=rep.cached_tokens,
        completion_tokens=rep.completion_tokens, cost_usd=cost, steps=rep.steps,
        blocked=rep.blocked, handoffs=run.handoffs, trace=str(state),
        scopes={**run.scopes, **graded},
        patches=files,
    )
