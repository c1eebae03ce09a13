"""One unit of a run: a pair of features in one setting, worked by agents in Corral
scopes, then graded under each requested merge policy.

Settings:
- `solo`: one agent, scope `solo`, gets both features.
- `coop`: agents `agent1` (feature f1) and `agent2` (f2) in sibling scopes, no
  supervisor. Oracle agents take turns, one hunk each (agent1 first), so runs repeat.
- `supervised`: coop under the supervisor (default the conflict guard). The oracle's
  answer to a blocked intent is a handoff: the blocked agent sends its remaining work
  to the other, who merges the blocked agent's branch (Corral's merge) and applies the
  rest of that feature on its own branch after its own; the blocked agent stops.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from coordinator import Coordinator

from ._agents import Agent, AgentReport
from ._dataset import Pair, Task
from ._env import Environment
from ._evaluate import Grade, grade_merged, grade_solo
from ._lab import Lab
from ._records import FeatureResult, MergePolicy, PairResult, Setting, Timings
from ._resolver import resolve_merge
from ._team import PairRules, TeamConfig, pair_policies, supervisor_policies, work

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


async def _clear(state: Path) -> None:
    """Remove a pair's state left by an earlier, unfinished attempt (reopening it first
    unmounts what a killed run left mounted)."""
    if not state.exists():
        return
    if (state / "trace.git" / "HEAD").exists():
        try:
            async with Coordinator.open(state):
                pass
        except Exception:
            pass
    await asyncio.to_thread(shutil.rmtree, state, True)


async def run_unit(
    cfg: UnitConfig,
    task: Task,
    pair: Pair,
    setting: Setting,
    agent: Agent,
    repo: Path,
    lab: Lab,
    env: Environment,
) -> list[PairResult]:
    """Run `pair` in `setting` and grade it; one PairResult per merge policy (one for
    solo). A failure anywhere becomes results with status "error" and its reason."""
    merges: Sequence[MergePolicy | str] = ("-",) if setting == "solo" else cfg.merges
    state = cfg.out / "traces" / _safe(task.key) / f"{pair.f1}-{pair.f2}" / setting
    run = _Run()
    started = time.perf_counter()
    try:
        await _clear(state)
        policies, rules = pair_policies(cfg.team(), setting)
        t = time.perf_counter()
        coord_cm = Coordinator.open(state, repo=repo, base=lab.base, policies=policies,
                                    backend=cfg.backend)
        coord = await coord_cm.__aenter__()
        run.timings["open"] = time.perf_counter() - t
        try:
            await _work(cfg, coord, task, pair, setting, agent, run, rules)
        finally:
            t = time.perf_counter()
            await coord_cm.__aexit__(None, None, None)
            await asyncio.to_thread(shutil.rmtree, state / "ws", True)
            run.timings["close"] = time.perf_counter() - t
        results = []
        for merge in merges:
            grade = await asyncio.to_thread(_grade, cfg, task, pair, setting, merge, lab, env,
                                            run)
            results.append(_result(cfg, task, pair, setting, merge, agent, run, grade, state,
                                   started))
        return results
    except Exception as e:
        reason = f"{type(e).__name__}: {e}"
        return [PairResult(task=task.key, f1=pair.f1, f2=pair.f2, setting=setting,
                           merge=m, agent=agent.name, status="error",  # type: ignore[arg-type]
                           reason=reason[:2000], trace=str(state),
                           timings=Timings(total=round(time.perf_counter() - started, 4)))
                for m in merges]


async def _work(cfg: UnitConfig, coord: Coordinator, task: Task, pair: Pair,
                setting: Setting, agent: Agent, run: _Run, rules: PairRules) -> None:
    f1, f2 = task.features[pair.f1], task.features[pair.f2]
    t = time.perf_counter()
    if setting == "solo":
        scopes = [await coord.root.fork("solo")]
    else:
        scopes = [await coord.root.fork("agent1"), await coord.root.fork("agent2")]
    run.timings["fork"] = time.perf_counter() - t
    t = time.perf_counter()
    run.report = await work(cfg.team(), coord, scopes, (f1, f2), setting, agent, rules)
    run.handoffs = run.report.handoffs
    run.timings["apply"] = time.perf_counter() - t
    base_tree = coord.trace.commit(coord.root.head).tree
    for s in scopes:
        run.scopes[s.name] = s.head
        run.patches[s.name] = (base_tree.diff_to_tree(coord.trace.commit(s.head).tree).patch
                               or "")
    if setting != "solo" and "corral" in cfg.merges:
        t = time.perf_counter()
        target = await scopes[1].fork("merged")
        m = await resolve_merge(coord, target, scopes[0], cfg.resolver, cfg.base_url,
                                run.report)
        run.scopes["merged"] = target.head
        if m.tree is not None:
            new = coord.trace.repo[m.tree].peel(pygit2.Tree)
            run.corral_diff = base_tree.diff_to_tree(new).patch or ""
        run.corral_conflicts = tuple(c.path for c in m.conflicts)
        run.timings["merge"] += time.perf_counter() - t


def _grade(cfg: UnitConfig, task: Task, pair: Pair, setting: Setting, merge: str, lab: Lab,
           env: Environment, run: _Run) -> Grade:
    def run_tests(lab: Lab, patch: str | None, fid: int):  # type: ignore[no-untyped-def]
        return lab.run_tests(patch, task.features[fid].tests, task.test_command,
                             env.env(lab.path), cfg.test_timeout)

    if setting == "solo":
        grade = grade_solo(lab, pair.f1, pair.f2, run.patches["solo"], run_tests)
    else:
        grade = grade_merged(lab, pair.f1, pair.f2, run.patches["agent1"],
                             run.patches["agent2"], run_tests, policy=merge,  # type: ignore[arg-type]
                             corral_diff=run.corral_diff)
    return grade


def _result(cfg: UnitConfig, task: Task, pair: Pair, setting: Setting, merge: str,
            agent: Agent, run: _Run, grade: Grade, state: Path, started: float) -> PairResult:
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
        blocked=rep.blocked, handoffs=run.handoffs, trace=str(state), scopes=run.scopes,
        patches=files, **rep.record,
    )
