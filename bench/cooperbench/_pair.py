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

Each unit's own policies (the pair's budget, no messages when messaging is off, the
supervisor's when supervised: `_team.pair_policies`) apply to its scopes only
(`UnitPolicy`); how the agents work is `_team.work`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator import Scope

from ._agents import Agent, AgentReport
from ._dataset import Pair, Task
from ._evaluate import Grade, grade_merged, grade_solo
from ._lab import TestRun
from ._patches import sanitize, strip_tests
from ._records import FeatureResult, MergePolicy, PairResult, Setting, Timings
from ._resolver import resolve_merge
from ._scope_lab import ScopeLab
from ._taskbench import TaskBench
from ._team import TeamConfig, pair_policies, supervisor_policies, work

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
    base_url: str | None = None
    """The URL of the supervisor's and the resolver's models."""
    resolver: str | None = None
    """llm:PROVIDER/MODEL: resolves `--merge corral` conflicts (None: none)."""

    def team(self) -> TeamConfig:
        return TeamConfig(supervisor=self.supervisor, messaging=self.messaging,
                          max_steps=self.max_steps, max_tokens=self.max_tokens,
                          base_url=self.base_url)


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
            grade = await _grade(cfg, task, pair, setting, merge, lab, run)
            grades.append((merge, grade, {s.name: s.head for s in lab.scopes}))
    except Exception as e:
        error = e
    t = time.perf_counter()
    # Every scope of the unit is named under its prefix: its agents', the
    # evaluation's, and what the supervisor made for it (its own scope, an agent
    # restarted in a new scope of the same name). Discarded at once: each discard
    # holds only its own scope's lock, and their unmounts overlap on the io threads.
    live = [s for n, s in list(bench.coord.scopes.items())
            if n.startswith(prefix + ".") and not s.discarded]
    outcomes = await asyncio.gather(*(s.discard() for s in live), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, Exception):  # the results stand; the scope stays live
            error = error or outcome
        elif isinstance(outcome, BaseException):
            raise outcome
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
    run.timings["fork"] = time.perf_counter() - t
    names = [s.name for s in scopes]
    policies, rules = pair_policies(cfg.team(), setting)
    bench.policy.supervise(names, policies)
    t = time.perf_counter()
    try:
        run.report = await work(cfg.team(), coord, scopes, (f1, f2), setting, agent, rules)
    finally:
        bench.policy.release(names)
    run.handoffs = run.report.handoffs
    run.timings["apply"] = time.perf_counter() - t
    for role, s in zip(roles, scopes, strict=True):
        run.scopes[s.name] = s.head
        run.patches[role] = bench.diff(s)
        _remember(run, run.patches[role], s)
    if setting != "solo" and "corral" in cfg.merges:
        t = time.perf_counter()
        target = await scopes[1].fork(f"{prefix}.merged")
        m = await resolve_merge(coord, target, scopes[0], cfg.resolver, cfg.base_url,
                                run.report)
        run.scopes[target.name] = target.head
        if m.tree is not None:
            run.corral_diff = bench.diff(target)
            _remember(run, run.corral_diff, target)
        run.corral_conflicts = tuple(c.path for c in m.conflicts)
        run.timings["merge"] += time.perf_counter() - t


async def _grade(cfg: UnitConfig, task: Task, pair: Pair, setting: Setting, merge: str,
                 lab: ScopeLab, run: _Run) -> Grade:
    async def run_tests(lab: Any, patch: str | None, fid: int) -> TestRun:
        return await lab.run_tests(  # type: ignore[no-any-return]
            patch, task.features[fid].tests, task.test_command, None, cfg.test_timeout)

    if setting == "solo":
        return await grade_solo(lab, pair.f1, pair.f2, run.patches["solo"], run_tests)
    return await grade_merged(lab, pair.f1, pair.f2, run.patches["agent1"],
                              run.patches["agent2"], run_tests,
                              policy=merge,  # type: ignore[arg-type]
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
        patches=files, **rep.record,
    )
