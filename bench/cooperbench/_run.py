"""A benchmark run: choose pairs, prepare each task once, run every (pair, setting)
unit on an executor, store results as they finish, and report.

    <out>/results.jsonl   one PairResult per line (what --resume reads back)
    <out>/traces/<task>/   the task's Corral state: every unit's scopes (`corral trace`)
    <out>/patches/…, <out>/logs/…              agents' patches, graded diffs, test output
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._agents import AgentOptions, load_agent
from ._dataset import Pair, Task, load_tasks, mini_suite, select_pairs
from ._env import Unsupported, base_repo, check_toolchain
from ._pair import UnitConfig, run_unit, supervisor_policies
from ._records import MergePolicy, PairResult, Setting
from ._store import ResultStore
from ._taskbench import TaskBench
from ._team import check_supervisor

__all__ = ["RunSpec", "TaskContext", "Unit", "plan", "run"]

SETTINGS: tuple[Setting, ...] = ("solo", "coop", "supervised")


@dataclass(frozen=True)
class RunSpec:
    """Everything `corral bench cooperbench` was asked to do."""

    out: Path
    dataset: Path | None = None
    """A CooperBench dataset/ directory; None: the bundled mini suite."""
    repos: Path | None = None
    subset: str | None = None
    task: str | None = None
    features: str | None = None
    pairs: str | None = None
    settings: tuple[Setting, ...] = SETTINGS
    merges: tuple[MergePolicy, ...] = ("plain",)
    agent: str = "oracle"
    options: AgentOptions = field(default_factory=AgentOptions)
    supervisor: str = "conflict-guard"
    messaging: bool = True
    max_steps: int = 60
    max_tokens: int | None = None
    test_timeout: float = 600.0
    workers: int = 2
    env_cache: Path | None = None
    resume: bool = False
    backend: str | None = None
    price_in: float | None = None
    price_out: float | None = None
    resolver: str | None = None
    """llm:PROVIDER/MODEL resolving `--merge corral` conflicts."""
    supervisor_base_url: str | None = None
    """The supervisor's and resolver's model URL (default: the agents' base URL)."""

    @property
    def mini(self) -> bool:
        return self.dataset is None

    @property
    def dataset_dir(self) -> Path:
        return self.dataset if self.dataset is not None else mini_suite() / "dataset"

    @property
    def repos_dir(self) -> Path | None:
        return self.repos if self.dataset is not None else mini_suite() / "repos"

    @property
    def cache(self) -> Path:
        return self.env_cache or (self.out / "cache")

    def unit_config(self) -> UnitConfig:
        return UnitConfig(out=self.out, merges=self.merges, supervisor=self.supervisor,
                          messaging=self.messaging, max_steps=self.max_steps,
                          max_tokens=self.max_tokens, test_timeout=self.test_timeout,
                          backend=self.backend, price_in=self.price_in,
                          price_out=self.price_out, resolver=self.resolver,
                          base_url=self.supervisor_base_url or self.options.base_url)


@dataclass(frozen=True, slots=True)
class Unit:
    pair: Pair
    setting: Setting


def plan(spec: RunSpec) -> tuple[dict[str, Task], list[Pair]]:
    """The tasks and the pairs the spec selects. Raises ValueError, FileNotFoundError."""
    tasks = load_tasks(spec.dataset_dir)
    pairs = select_pairs(tasks, dataset=spec.dataset_dir, subset=spec.subset, task=spec.task,
                         features=spec.features, pairs=spec.pairs)
    if not pairs:
        raise ValueError("no pair selected")
    return tasks, pairs


class TaskContext:
    """A task prepared for this process: its base repository, and once opened its
    bench (one coordinator, the environment in its `env` scope)."""

    def __init__(self, task: Task, repo: Path, state: Path) -> None:
        self.task = task
        self.repo = repo
        self.state = state
        self.bench: TaskBench | None = None

    @classmethod
    def prepare(cls, task: Task, spec: RunSpec) -> TaskContext:
        """Raises Unsupported, FileNotFoundError, RuntimeError."""
        if not spec.mini:
            check_toolchain(task)  # refuse what this machine cannot run before any clone
        repo = base_repo(task, spec.repos_dir, spec.cache)
        return cls(task, repo, spec.out / "traces" / task.key.replace("/", "-"))

    async def open(self, stack: AsyncExitStack, spec: RunSpec) -> TaskBench:
        """Open the task's bench for as long as `stack` (raises Unsupported,
        RuntimeError). Each unit brings its own policies (`run_unit`)."""
        self.bench = await stack.enter_async_context(TaskBench.open(
            self.task, self.repo, self.state, spec.cache, mini=spec.mini,
            backend=spec.backend, fresh=not spec.resume))
        return self.bench


def _unprepared(task: Task, unit: Any, spec: Any, ctx: object) -> list[PairResult] | None:
    """A unit's results when its task could not be prepared (unsupported, or
    preparing failed); None when `ctx` is a ready TaskContext."""
    if isinstance(ctx, Unsupported):
        return _skipped(task, unit, spec, "unsupported", str(ctx))
    if isinstance(ctx, BaseException):
        return _skipped(task, unit, spec, "error",
                        f"preparing the task: {type(ctx).__name__}: {ctx}")
    return None


def _skipped(task: Task, unit: Unit, spec: RunSpec, status: str, reason: str
             ) -> list[PairResult]:
    merges: Sequence[str] = ("-",) if unit.setting == "solo" else spec.merges
    return [PairResult(task=task.key, f1=unit.pair.f1, f2=unit.pair.f2, setting=unit.setting,
                       merge=m, agent=spec.agent, status=status,  # type: ignore[arg-type]
                       reason=reason[:2000]) for m in merges]


def pending_units(spec: RunSpec, pairs: list[Pair], store: ResultStore) -> list[Unit]:
    done = store.done()
    units = []
    for pair in pairs:
        for setting in spec.settings:
            merges = ("-",) if setting == "solo" else spec.merges
            if all((pair.task, pair.f1, pair.f2, setting, m) in done for m in merges):
                continue
            units.append(Unit(pair, setting))
    return units


Progress = Callable[[Unit, list[PairResult]], None]


async def run_local(spec: RunSpec, tasks: dict[str, Task], units: list[Unit],
                    store: ResultStore, on_done: Progress) -> dict[str, float]:
    """Run `units` with `spec.workers` concurrent slots in this process. Returns each
    task's environment preparation seconds."""
    agent = load_agent(spec.agent, spec.options)
    cfg = spec.unit_config()
    contexts: dict[str, TaskContext | BaseException] = {}
    prep_lock = asyncio.Lock()
    stack = AsyncExitStack()
    prepared: dict[str, float] = {}
    queue: asyncio.Queue[Unit] = asyncio.Queue()
    for u in units:
        queue.put_nowait(u)

    async def context(task: Task) -> TaskContext | BaseException:
        async with prep_lock:
            if task.key not in contexts:
                try:
                    ctx = await asyncio.to_thread(TaskContext.prepare, task, spec)
                    bench = await ctx.open(stack, spec)
                    contexts[task.key] = ctx
                    prepared[task.key] = round(bench.prepared_s, 2)
                except Exception as e:
                    contexts[task.key] = e
            return contexts[task.key]

    async def slot() -> None:
        while True:
            try:
                unit = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            task = tasks[unit.pair.task]
            ctx = await context(task)
            results = _unprepared(task, unit, spec, ctx)
            if results is None:
                assert isinstance(ctx, TaskContext) and ctx.bench is not None
                results = await run_unit(cfg, ctx.bench, unit.pair, unit.setting, agent)
            store.append(results)
            on_done(unit, results)

    async with stack, asyncio.TaskGroup() as tg:
        for _ in range(max(1, spec.workers)):
            tg.create_task(slot())
    return prepared


def run(spec: RunSpec, on_start: Callable[[int], None] | None = None,
        on_done: Progress | None = None, executor: str = "local",
        address: str | None = None) -> dict[str, Any]:
    """Run the spec; returns {"results": [...PairResult], "prepared": {task: s},
    "seconds": wall}. Raises ValueError / FileNotFoundError for a bad selection."""
    started = time.monotonic()
    agent = load_agent(spec.agent, spec.options)
    if "supervised" in spec.settings:
        supervisor_policies(spec.supervisor)  # a bad --supervisor fails before any work
        check_supervisor(spec.supervisor, agent)
    tasks, pairs = plan(spec)
    spec.out.mkdir(parents=True, exist_ok=True)
    store = ResultStore(spec.out / "results.jsonl", resume=spec.resume)
    try:
        units = pending_units(spec, pairs, store)
        if on_start:
            on_start(len(units))
        done = on_done or (lambda u, r: None)
        if executor == "ray":
            from ._ray import run_ray

            prepared = run_ray(spec, tasks, units, store, done, address)
        else:
            prepared = asyncio.run(run_local(spec, tasks, units, store, done))
    finally:
        store.close()
    wanted = {(p.task, p.f1, p.f2) for p in pairs}
    results = [r for r in store.results if (r.task, r.f1, r.f2) in wanted
               and r.setting in spec.settings and (r.merge in spec.merges or r.merge == "-")]
    return {"results": results, "prepared": prepared,
            "seconds": round(time.monotonic() - started, 2), "pairs": len(pairs)}
