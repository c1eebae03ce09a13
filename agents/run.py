"""`corral run`: one built-in coding agent per task, in parallel scopes under a supervisor.

The run imports the user's repository at HEAD into a coordinator state directory (by
default inside the repository's git directory, `.git/corral/runs/<run-id>`, so the working
tree is never touched), forks one scope per task from root, runs the agents concurrently,
merges the branches of the agents that finished into root, and pushes the result into the
user's repository as the branch `corral/<run-id>`: one commit per merged agent plus their
merge (see `_branches`), or the trace's history with `squash=False`. Whatever happened
stays in the trace, also when a model call fails, and `run.json` beside it records the
run (`agents.runs`).

A run can be stopped and continued: setting `stop` (the terminal view sets it on
Ctrl-C or SIGTERM) stops every agent at its next step; the agents' work so far is merged
and left as the branch, marked partial, and `resume=True` with the same run id continues
each agent from its last effect, its conversation rebuilt from the trace
(`_transcript`). Budgets (tokens, USD; per agent and per run, `_prices`) stop an agent
the same way, between two steps; its work merges like a finished agent's.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn
from rich.table import Table

from coordinator import (
    ConflictGuard,
    Coordinator,
    CorralError,
    Environment,
    Event,
    Policy,
    PreparedEnvironment,
    Scope,
    Settings,
)

from ._branches import git_identity, push, squash
from ._model_effects import ModelCaller
from ._prices import Budgets, PriceTable, Spent, load_prices, spent_on
from .coding import CodingAgent
from .entry import builtin
from .protocol import Agent, AgentContext, AgentResult, Budget, load_agent, scope_patch
from .providers import Provider, provider_from_spec
from .runs import AgentLine, RunRecord, RunStatus, read_record, resume_command, write_record
from .supervisor import LLMSupervisor, run_to_rest

__all__ = [
    "MergeSummary",
    "RunReport",
    "new_run_id",
    "parse_supervisor",
    "render_report",
    "resume_options",
    "run_settings",
    "run_tasks",
    "run_with_progress",
]

INTERRUPTED = "interrupted"
"""The summary of an agent stopped by an interrupt."""


@dataclass(frozen=True, slots=True)
class MergeSummary:
    agent: str
    outcome: str
    """merged, conflict, skipped (not finished) or empty (no changes)."""
    conflicts: tuple[str, ...] = ()
    commit: str | None = None


@dataclass
class RunReport:
    run_id: str
    repo: str
    state: str
    model: str
    supervisor: str
    branch: str | None = None
    commit: str | None = None
    agents: list[AgentResult] = field(default_factory=list)
    merges: list[MergeSummary] = field(default_factory=list)
    supervisor_actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    exports: dict[str, str] = field(default_factory=dict)
    """Branches left in the repository for agents whose work did not merge."""
    notes: list[str] = field(default_factory=list)
    """Warnings about the run's input (e.g. uncommitted changes left out)."""
    environment: PreparedEnvironment | None = None
    """The project's environment set up before the agents forked (`Coordinator.prepare`)."""
    status: RunStatus = "running"
    """finished, partial (interrupted: `resume` continues it) or failed."""
    spent: dict[str, Spent] = field(default_factory=dict)
    """Per agent, what its scope's effects used over the whole run (resumes included)."""
    costs: dict[str, float] = field(default_factory=dict)
    """Per agent, USD at the prices of the run's price table."""
    resume: str | None = None
    """The command that continues a partial (or failed) run."""

    @property
    def ok(self) -> bool:
        return not self.errors and all(m.outcome != "conflict" for m in self.merges) and all(
            a.status in ("finished", "stopped") for a in self.agents
        )

    @property
    def partial(self) -> bool:
        return self.status == "partial"

    def total(self) -> Spent:
        return sum(self.spent.values(), Spent())

    def as_dict(self) -> dict[str, Any]:
        total = self.total()
        return {
            "run_id": self.run_id, "repo": self.repo, "state": self.state, "model": self.model,
            "supervisor": self.supervisor, "branch": self.branch, "commit": self.commit,
            "ok": self.ok, "status": self.status, "partial": self.partial,
            "resume": self.resume, "seconds": round(self.seconds, 3),
            "agents": [self._agent(a) for a in self.agents],
            "merges": [
                {"agent": m.agent, "outcome": m.outcome, "conflicts": list(m.conflicts),
                 "commit": m.commit} for m in self.merges
            ],
            "total": {"tokens": total.tokens, "prompt_tokens": total.prompt,
                      "cached_tokens": total.cached, "completion_tokens": total.completion,
                      "effects": total.effects,
                      "cost_usd": round(sum(self.costs.values()), 6)},
            "supervisor_actions": self.supervisor_actions, "errors": self.errors,
            "exports": self.exports, "notes": self.notes,
            "environment": self.environment.as_dict() if self.environment else None,
        }

    def _agent(self, a: AgentResult) -> dict[str, Any]:
        out = {k: v for k, v in a.as_dict().items() if k != "patch"}
        out["patch_bytes"] = len(a.patch)
        s = self.spent.get(a.name)
        if s is not None:  # the whole run's figures, not only this resume's
            out.update(prompt_tokens=s.prompt, cached_tokens=s.cached,
                       completion_tokens=s.completion, effects=s.effects)
        out["tokens"] = out["prompt_tokens"] + out["completion_tokens"]
        out["cost_usd"] = round(self.costs.get(a.name, 0.0), 6)
        return out

def parse_supervisor(spec: str) -> tuple[list[Policy], str | None]:
    """The policies and (for `llm:PROVIDER/MODEL`) the meta-agent's model spec of a
    `--supervisor` value: `none`, `llm:PROVIDER/MODEL` (the meta-agent, with the conflict
    guard), or policy names as everywhere (`coordinator.load_policy`: `conflict-guard`, an
    entry point of `corral.policies`, `module:attr`), several joined by commas, asked in
    order. Raises ValueError."""
    from coordinator import load_policy

    if spec == "none":
        return [], None
    if spec.startswith("llm:") and "/" in spec:
        # The meta-agent reacts to what the guard blocks, so it runs with the guard.
        return [ConflictGuard()], spec.removeprefix("llm:")
    try:
        return [load_policy(part.strip()) for part in spec.split(",")], None
    except LookupError as e:
        raise ValueError(f"unknown supervisor {spec!r}: use conflict-guard, "
                         f"llm:PROVIDER/MODEL, none, or policy names ({e})") from e


def run_settings(supervisor: str, environment: Environment | None) -> Settings:
    """The settings a run records in its state (so `corral mcp --state`, `corral serve`
    and `Coordinator.open` on it enforce the same chain): the policies `--supervisor`
    names (the LLM supervisor is a meta-agent, not a policy: its guard is), default
    exec limits (a run has no option for them) and the `--toolchain` directories.
    Raises CorralError for a toolchain directory that does not exist."""
    if supervisor == "none":
        specs: tuple[str, ...] = ()
    elif supervisor.startswith("llm:") and "/" in supervisor:
        specs = ("conflict-guard",)
    else:
        specs = tuple(part.strip() for part in supervisor.split(","))
    toolchain = []
    for t in environment.toolchain if environment is not None else ():
        path = Path(t).resolve()
        if not path.is_dir():
            raise CorralError(f"toolchain directory {t} does not exist")
        toolchain.append(path)
    return Settings(policies=specs, toolchain=tuple(dict.fromkeys(toolchain)))


def models_per_agent(models: str | Sequence[str], tasks: Sequence[str]) -> list[str]:
    """One model spec per task: one spec for all, or one per task, in order (so a
    scripted model server can serve each agent its own steps). Raises ValueError."""
    specs = [models] if isinstance(models, str) else list(models)
    if len(specs) == 1:
        return specs * len(tasks)
    if len(specs) != len(tasks):
        raise ValueError(f"give --model once, or once per --task ({len(tasks)} tasks, "
                         f"{len(specs)} models)")
    return specs


def check_run(repo: str | Path, tasks: Sequence[str], models: str | Sequence[str],
              supervisor: str) -> list[str]:
    """Check a run's input before any work; returns notes worth a warning.
    Raises ValueError (bad task, model or supervisor), CorralError (bad repository)."""
    if not tasks:
        raise ValueError("give at least one task")
    models_per_agent(models, tasks)
    parse_supervisor(supervisor)
    path = Path(repo)
    try:
        git = pygit2.Repository(str(path))
    except pygit2.GitError as e:
        raise CorralError(f"{path} is not a git repository", cause=e) from e
    if git.head_is_unborn:
        raise CorralError(f"{path} has no commit yet: corral run starts from HEAD")
    dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain",
                            "--untracked-files=no"], capture_output=True, text=True).stdout
    if dirty.strip():
        count = len(dirty.strip().splitlines())
        return [f"{path} has uncommitted changes to {count} file(s): the agents start from "
                "HEAD without them (commit or stash them to include them)"]
    return []


def _task_text(name: str, task: str, team: Sequence[tuple[str, str]]) -> str:
    others = "\n".join(f"- {n}: {t}" for n, t in team if n != name)
    text = f"Your task ({name}): {task}"
    if others:
        text += ("\n\nOther agents work in parallel, each on its own copy of the repository:\n"
                 f"{others}\nUse send_message if your work affects theirs.")
    return text


def default_state(repo: Path, run_id: str) -> Path:
    """Inside the repository's git directory: kept with the repository, out of its tree."""
    try:
        git_dir = Path(pygit2.Repository(str(repo)).path)
    except pygit2.GitError as e:
        raise CorralError(f"{repo} is not a git repository", cause=e) from e
    return git_dir / "corral" / "runs" / run_id


def new_run_id() -> str:
    """A fresh run id: the local time and four hex digits."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def resume_options(repo: str | Path, run_id: str, state: str | Path | None = None
                   ) -> dict[str, Any]:
    """What `run_tasks(repo, **options)` needs to continue run `run_id`, from its record.

    Raises CorralError: no such run, no record, or the run finished."""
    state_dir = Path(state) if state is not None else default_state(Path(repo), run_id)
    record = read_record(state_dir)
    if record is None:
        raise CorralError(f"no run {run_id} to resume in {state_dir} (corral runs list shows "
                          "the runs of a repository)")
    if record.status == "finished":
        raise CorralError(f"run {run_id} finished: nothing to resume (its branch: "
                          f"{record.branch or 'none'})")
    return {
        "tasks": list(record.tasks), "model": list(record.models), "base_url": record.base_url,
        "supervisor": record.supervisor, "state": state_dir, "max_steps": record.max_steps,
        "max_tokens": record.max_tokens, "max_cost": record.max_cost,
        "run_max_tokens": record.run_max_tokens, "run_max_cost": record.run_max_cost,
        "prices": record.prices, "retries": record.retries, "backend": record.backend,
        "squash": record.squash, "agent": record.agent, "run_id": run_id, "resume": True,
    }


async def run_tasks(
    repo: str | Path,
    tasks: Sequence[str],
    *,
    model: str | Sequence[str],
    base_url: str | None = None,
    supervisor: str = "conflict-guard",
    state: str | Path | None = None,
    max_steps: int = 30,
    max_tokens: int | None = None,
    retries: int = 4,
    run_id: str | None = None,
    backend: str | None = None,
    progress: Callable[[Event], None] | None = None,
    provider: Provider | None = None,
    squash: bool = True,
    agent: str = "builtin",
    max_cost: float | None = None,
    run_max_tokens: int | None = None,
    run_max_cost: float | None = None,
    prices: str | Path | None = None,
    stop: asyncio.Event | None = None,
    resume: bool = False,
    environment: Environment | None = None,
    say: Callable[[str], None] | None = None,
) -> RunReport:
    """Run one coding agent per task and leave the merged result as `corral/<run-id>`
    (one commit per merged agent plus their merge with `squash`, else the trace's
    history); an agent whose work did not merge is left as `corral/<run-id>-<agent>`.

    `model` is one spec for every agent, or one per task. `agent` is `builtin`, another
    name of the `corral.agents` group (`mini-swe-agent`) or a `module:attr` path (see
    `agents.protocol`). Budgets: `max_tokens` and `max_cost` (USD) per agent,
    `run_max_tokens` and `run_max_cost` for all agents together, priced from `prices`
    (a JSON file, see `_prices`) over the built-in table. When `stop` is set the agents
    stop at their next step and the run ends partial; `resume` continues run `run_id`
    (in `state`) instead of starting one. Returns the report (agents' results, merges,
    exports, spending, errors). Raises ModelError for a missing API key, ValueError for
    a bad model, supervisor, agent spec or prices file, CorralError for a bad
    repository or a run that cannot be resumed.

    `environment` (default: detected) is set up once in root before the agents fork, so
    their commands find the project's tools (`Coordinator.prepare`; `say` gets its
    progress lines); a resumed run keeps the one its state holds. Raises SetupFailed
    (no agent starts) when the setup fails.
    """
    notes = check_run(repo, tasks, model, supervisor)
    specs = models_per_agent(model, tasks)
    table = load_prices(prices)
    try:
        loaded = load_agent(agent)
    except LookupError as e:
        raise ValueError(str(e)) from e
    # The built-in agent is steered between its steps (the LLM supervisor, budgets,
    # interrupts), so the run keeps hold of its CodingAgent; any other agent is awaited.
    agent_fn = None if loaded is builtin else loaded
    if agent_fn is not None and supervisor.startswith("llm:"):
        raise ValueError("the LLM supervisor steers the builtin agent only; use "
                         "--supervisor conflict-guard or none with another agent")
    if agent_fn is not None and (max_cost, run_max_tokens, run_max_cost) != (None,) * 3:
        raise ValueError("--max-cost, --run-max-tokens and --run-max-cost stop the builtin "
                         "agent between its steps; another agent takes --max-tokens only")
    if resume and run_id is None:
        raise ValueError("resume needs the run id")
    started = time.monotonic()
    repo = Path(repo).resolve()
    run_id = run_id or new_run_id()
    state_dir = Path(state) if state is not None else default_state(repo, run_id)
    _, meta_spec = parse_supervisor(supervisor)
    asked = run_settings(supervisor, environment)
    previous = read_record(state_dir) if resume else None
    if resume:
        if not (state_dir / "trace.git").exists():
            raise CorralError(f"no run {run_id} to resume in {state_dir}")
        notes = []  # the dirty tree of today's HEAD is not this run's input
    notes += _unpriced(table, [*specs, *([meta_spec] if meta_spec else [])])
    record = RunRecord(
        run_id=run_id, repo=str(repo), state=str(state_dir.resolve()), started=time.time(),
        tasks=tuple(tasks), models=tuple(specs), base_url=base_url, supervisor=supervisor,
        agent=agent, max_steps=max_steps, max_tokens=max_tokens, max_cost=max_cost,
        run_max_tokens=run_max_tokens, run_max_cost=run_max_cost,
        prices=str(Path(prices).resolve()) if prices is not None else None,
        retries=retries, backend=backend, squash=squash)
    if previous is not None:
        record = record.model_copy(update={"started": previous.started,
                                           "resumed": previous.resumed + 1})
    providers: dict[str, Provider] = {}
    try:
        for spec in specs:
            if spec not in providers:
                providers[spec] = provider or provider_from_spec(spec, base_url)
    except BaseException:
        for p in providers.values():
            await p.aclose()
        raise
    meta_provider = provider_from_spec(meta_spec, base_url) if meta_spec else None
    report = RunReport(run_id, str(repo), str(state_dir), ",".join(dict.fromkeys(specs)),
                       supervisor, notes=notes)
    report.resume = resume_command(record, default_state(repo, run_id))
    names = [f"agent-{i}" for i in range(1, len(tasks) + 1)]
    team = list(zip(names, tasks, strict=True))
    budgets = Budgets(table, max_tokens=max_tokens if agent_fn is None else None,
                      max_cost=max_cost, run_max_tokens=run_max_tokens,
                      run_max_cost=run_max_cost)
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_record(record)
    try:
        # The state records the run's settings, or keeps the ones it records (run --state
        # on a served state, a resume): its chain is the same at every entrance.
        async with Coordinator.open(state_dir, repo=None if resume else repo, base="HEAD",
                                    default_settings=asked, backend=backend) as coord:
            if coord.settings.policies != asked.policies:
                note = (f"{state_dir} records other settings ({coord.settings.summary()}): "
                        "the run enforces those, not --supervisor's")
                report.notes.append(note)
                if say is not None:
                    say(f"note: {note}")
            if not resume:
                report.environment = await coord.prepare(environment, progress=say)

            async def scope_of(name: str) -> Scope:
                if resume and name in coord.scopes:
                    return coord.scopes[name]  # continues from its last effect
                return await coord.root.fork(name)

            workers: list[CodingAgent | _External] = []
            for (name, task), spec in zip(team, specs, strict=True):
                ctx = AgentContext(
                    coord, await scope_of(name), _task_text(name, task, team),
                    providers[spec],
                    # The builtin agent's token budget is the run's `Budgets`, which
                    # stops it between steps like the cost budgets.
                    Budget(max_steps, max_tokens if agent_fn is not None else None, retries),
                    name=name, teammates=tuple(n for n, _ in team if n != name))
                workers.append(CodingAgent.from_context(ctx) if agent_fn is None
                               else _External(agent_fn, ctx))
            for w, spec in zip(workers, specs, strict=True):
                base = await coord.io(spent_on, coord.trace, w.scope.head, w.name)
                budgets.track(w.name, spec, base,
                              w.caller if isinstance(w, CodingAgent) else None)
            meta = None
            if meta_provider is not None:
                assert meta_spec is not None
                meta_caller = ModelCaller(coord, meta_provider, attempts=retries)
                meta = LLMSupervisor(coord, meta_caller,
                                     [w for w in workers if isinstance(w, CodingAgent)],
                                     scope_name=_free_name(coord, "supervisor"))
                earlier = Spent()
                for name in [n for n in coord.scopes if n.startswith("supervisor")]:
                    earlier += await coord.io(spent_on, coord.trace,
                                              coord.scopes[name].head, name)
                budgets.track("supervisor", meta_spec, earlier, meta_caller)
                await meta.start()
            for w in workers:
                if isinstance(w, CodingAgent):
                    w.before_step = _before_step(w, meta, budgets)
            try:
                results = await _drive(coord, workers, meta, progress, stop)
            finally:
                if meta is not None:
                    await meta.close()
                    report.supervisor_actions = [e.summary() for e in meta.actions]
                    report.errors.extend(meta.errors)
            report.agents = [results[w.name] for w in workers]
            report.errors.extend(f"{r.name}: {r.error}" for r in report.agents if r.error)
            for w, spec in zip(workers, specs, strict=True):
                report.spent[w.name] = await coord.io(spent_on, coord.trace, w.scope.head,
                                                      w.name)
                price = table.price(spec)
                s = report.spent[w.name]
                report.costs[w.name] = price.cost(s.prompt, s.cached, s.completion) if (
                    price) else 0.0
            interrupted = stop is not None and stop.is_set()
            report.status = "partial" if interrupted else "finished" if report.ok else "failed"
            for w in workers:
                report.merges.append(await _merge(coord, w, results[w.name]))
            if report.status == "finished" and not report.ok:
                report.status = "failed"  # a merge conflicted
            await coord.checkpoint()  # git push reads the repository on disk
            messages = {w.name: _agent_message(run_id, w.name, task, spec, report)
                        for (name, task), spec, w in zip(team, specs, workers, strict=True)}
            merged = [m.agent for m in report.merges if m.outcome == "merged"]
            if merged:
                # Only a run that merged something leaves a branch: one at the
                # base commit would look like a result.
                report.branch = f"corral/{run_id}"
                report.commit = await coord.io(
                    _export, coord, repo, report.branch, squash,
                    [(coord.scopes[n].head, messages[n]) for n in merged],
                    _merge_message(run_id, merged, dict(team), report))
            for m in report.merges:
                if m.outcome in ("merged", "empty") or not results[m.agent].patch:
                    continue
                branch = f"corral/{run_id}-{m.agent}"
                head = coord.scopes[m.agent].head
                await coord.io(_export_one, coord, repo, branch, head,
                               messages[m.agent] if squash else None)
                report.exports[m.agent] = branch
    except BaseException as e:
        aborted = isinstance(e, asyncio.CancelledError | KeyboardInterrupt)
        write_record(record.model_copy(update={
            "status": "partial" if aborted else "failed", "ended": time.time(),
            "reason": "aborted" if aborted else f"{type(e).__name__}: {e}"}))
        raise
    finally:
        for p in providers.values():
            await p.aclose()
        if meta_provider is not None:
            await meta_provider.aclose()
        report.seconds = time.monotonic() - started
    write_record(_final_record(record, report, dict(team), specs))
    return report


def _unpriced(table: PriceTable, specs: Sequence[str]) -> list[str]:
    return [f"no price for {spec}: its cost counts as 0 USD (give --prices FILE)"
            for spec in dict.fromkeys(specs) if table.price(spec) is None]


def _free_name(coord: Coordinator, name: str) -> str:
    """`name`, or `name-2`, `name-3`... when a resumed run already has that scope."""
    n, candidate = 1, name
    while candidate in coord.scopes:
        n += 1
        candidate = f"{name}-{n}"
    return candidate


def _before_step(w: CodingAgent, meta: LLMSupervisor | None,
                 budgets: Budgets) -> Callable[[], Awaitable[None]]:
    """Between two steps: the supervisor settles, then a reached budget stops `w` (which
    returns "stopped" with the reason, before its next model call)."""

    async def before() -> None:
        if meta is not None:
            await meta.settle()
        if w.stopped is None:
            w.stopped = budgets.reached(w.name)

    return before


def _final_record(record: RunRecord, report: RunReport, tasks: dict[str, str],
                  specs: Sequence[str]) -> RunRecord:
    merges = {m.agent: m.outcome for m in report.merges}
    lines = []
    for a, spec in zip(report.agents, specs, strict=True):
        s = report.spent.get(a.name, Spent())
        lines.append(AgentLine(
            name=a.name, task=tasks[a.name], model=spec, status=a.status, summary=a.summary,
            steps=a.steps, effects=s.effects, prompt_tokens=s.prompt, cached_tokens=s.cached,
            completion_tokens=s.completion, cost_usd=report.costs.get(a.name, 0.0),
            merge=merges.get(a.name, "")))
    reason = (INTERRUPTED if report.partial else "; ".join(report.errors) or (
        "merge conflicts" if report.status == "failed" else None))
    return record.model_copy(update={
        "status": report.status, "ended": time.time(), "reason": reason,
        "branch": report.branch, "commit": report.commit, "exports": dict(report.exports),
        "agents": tuple(lines)})


def _agent_message(run_id: str, name: str, task: str, spec: str, report: RunReport) -> str:
    """A squashed agent commit's message: the task, model, effects, tokens and cost."""
    result = next(a for a in report.agents if a.name == name)
    s = report.spent.get(name, Spent())
    status = result.status + (f": {result.summary}" if result.status == "stopped" else "")
    title = task.splitlines()[0] if task else ""
    if len(title) > 60:
        title = title[:57] + "..."
    return (f"corral run {run_id}, {name}: {title}\n\n"
            f"task: {task}\nmodel: {spec}\nstatus: {status}\n"
            f"steps: {result.steps}\neffects: {s.effects}\n"
            f"tokens: {s.tokens} (prompt {s.prompt}, cached {s.cached}, "
            f"completion {s.completion})\ncost: {report.costs.get(name, 0.0):.4f} USD\n")


def _merge_message(run_id: str, merged: Sequence[str], tasks: dict[str, str],
                   report: RunReport) -> str:
    title = f"corral run {run_id}: merge of {', '.join(merged)}"
    body = "".join(f"{n}: {tasks[n]}\n" for n in merged)
    total = report.total()
    body += f"tokens: {total.tokens}\ncost: {sum(report.costs.values()):.4f} USD\n"
    if report.partial:
        title += " (partial: interrupted)"
        body += f"\npartial: the agents were interrupted; {report.resume} continues them\n"
    return f"{title}\n\n{body}"


class _External:
    """Any other `Agent`, driven like a CodingAgent (no LLM supervisor).
    It has no step boundary of its own: an interrupt cancels it (its effects so far are in
    the trace) and it ends "stopped"."""

    def __init__(self, agent: Agent, ctx: AgentContext) -> None:
        self.agent, self.ctx = agent, ctx
        self.coord, self.scope = ctx.coord, ctx.scope
        self._task: asyncio.Task[AgentResult] | None = None
        self.interrupted = False

    @property
    def name(self) -> str:
        return self.scope.name

    def interrupt(self) -> None:
        self.interrupted = True
        if self._task is not None:
            self._task.cancel()

    async def run(self) -> AgentResult:
        if self.interrupted:
            return await self._stopped()
        self._task = asyncio.ensure_future(self.agent(self.ctx))
        try:
            return await self._task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not self.interrupted or (current is not None and current.cancelling()):
                raise
            return await self._stopped()
        finally:
            self._task = None

    async def _stopped(self) -> AgentResult:
        scope = self.scope
        s = await self.coord.io(spent_on, self.coord.trace, scope.head, scope.name)
        return AgentResult(self.name, "stopped", INTERRUPTED, 0, s.prompt, s.cached,
                           s.completion, 0, await scope_patch(self.coord, scope), scope.head)


async def _drive(
    coord: Coordinator,
    workers: Sequence[CodingAgent | _External],
    meta: LLMSupervisor | None,
    progress: Callable[[Event], None] | None,
    stop: asyncio.Event | None = None,
) -> dict[str, AgentResult]:
    sub = coord.events.subscribe(types=["effect"]) if progress is not None else None

    async def watch() -> None:
        assert sub is not None and progress is not None
        async for event in sub:
            progress(event)

    async def interrupt() -> None:
        assert stop is not None
        await stop.wait()
        for w in workers:
            if isinstance(w, CodingAgent):
                w.stopped = w.stopped or INTERRUPTED  # at its next step
            else:
                w.interrupt()

    async with asyncio.TaskGroup() as outer:
        if sub is not None:
            outer.create_task(watch())
        stopper = outer.create_task(interrupt()) if stop is not None else None
        try:
            results = await run_to_rest(workers, meta)
        finally:
            if sub is not None:
                sub.close()
            if stopper is not None:
                stopper.cancel()
    return results


async def _merge(coord: Coordinator, w: CodingAgent | _External,
                 result: AgentResult) -> MergeSummary:
    # An agent stopped by a budget (or an interrupt) keeps its work: it merges too.
    if result.status not in ("finished", "stopped", "token_limit"):
        return MergeSummary(w.name, "skipped")
    if not result.patch:
        return MergeSummary(w.name, "empty")
    root = coord.root
    if await coord.io(coord.trace.merge_base, root.head, w.scope.head) == w.scope.head:
        # merged before a resume, nothing new since
        return MergeSummary(w.name, "merged", commit=root.head)
    try:
        merged = await root.merge(w.scope)
    except CorralError as e:
        return MergeSummary(w.name, f"error: {e}")
    if merged.commit is None:
        return MergeSummary(w.name, "conflict", tuple(c.path for c in merged.conflicts))
    return MergeSummary(w.name, "merged", commit=merged.commit)


def _export(coord: Coordinator, repo: Path, branch: str, squashed: bool,
            agents: Sequence[tuple[str, str]], merge_message: str) -> str:
    """Push root's head into the user's repository as `branch`. Squashed: one commit per
    merged agent, (head, message) in `agents`, over the snapshot, then (for more than one)
    their merge with root's tree. Returns the commit pushed."""
    trace = coord.trace
    head = coord.root.head
    if squashed:
        snapshot = trace.snapshot()
        assert snapshot is not None
        who = git_identity(repo)
        commits = [squash(trace, h, [snapshot], message, who) for h, message in agents]
        if len(commits) == 1 and trace.commit(commits[0]).tree_id == trace.commit(head).tree_id:
            head = commits[0]
        else:
            head = squash(trace, head, commits, merge_message, who)
    push(trace.path, repo, head, branch)
    return head


def _export_one(coord: Coordinator, repo: Path, branch: str, head: str,
                message: str | None) -> str:
    """Push one agent's unmerged work as `branch`: one commit over the snapshot with a
    message, else its history."""
    trace = coord.trace
    if message is not None:
        snapshot = trace.snapshot()
        assert snapshot is not None
        head = squash(trace, head, [snapshot], message, git_identity(repo))
    push(trace.path, repo, head, branch)
    return head


# -- the terminal view ----------------------------------------------------------------


async def run_with_progress(
    console: Console, repo: str | Path, tasks: Sequence[str], **options: Any
) -> RunReport:
    """`run_tasks` with a live progress display (one bar per agent: steps of max). The
    input is checked first, so a mistake is reported before any bar is drawn.

    The first SIGINT or SIGTERM stops the agents at their next step (the run ends
    partial); a second one cancels the run at once (CancelledError)."""
    supervisor = options.get("supervisor", "conflict-guard")
    notes = check_run(repo, tasks, options["model"], supervisor)
    _, meta_spec = parse_supervisor(supervisor)
    for spec in {*models_per_agent(options["model"], tasks), *([meta_spec] if meta_spec else [])}:
        # a missing key or a bad spec fails here, before the bars
        await provider_from_spec(spec, options.get("base_url")).aclose()
    table = load_prices(options.get("prices"))  # a bad prices file too
    if options.get("resume"):
        notes = []
    notes += _unpriced(table, [*models_per_agent(options["model"], tasks),
                               *([meta_spec] if meta_spec else [])])
    for note in notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    run_id = options["run_id"] = options.get("run_id") or new_run_id()
    state = options.get("state") or default_state(Path(repo), run_id)
    console.print(f"corral run {run_id}" + (" (resumed)" if options.get("resume") else "")
                  + f": trace in {escape(str(state))}; Ctrl-C stops the agents at their "
                  "next step", highlight=False, soft_wrap=True)
    stop = asyncio.Event()
    max_steps = int(options.get("max_steps", 30))
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"), console=console, transient=False,
    ) as bars, _Interrupts(stop, console):
        ids: dict[str, TaskID] = {}
        for i in range(1, len(tasks) + 1):
            ids[f"agent-{i}"] = bars.add_task(f"agent-{i}", total=max_steps, last="")

        def show(event: Event) -> None:
            e = event.effect
            bar = ids.get(e.scope)
            if bar is None:
                if e.scope == "supervisor" and e.kind == "decision":
                    console.print(f"supervisor: {escape(e.summary())}")
                return
            if e.kind == "model.call" and e.status == "materialized":
                bars.advance(bar)
            elif e.kind not in ("model.call", "tool.call"):
                bars.update(bar, last=escape(e.summary()))
            if e.status == "blocked" and e.decision is not None:
                console.print(f"{e.scope}: [yellow]blocked[/] {escape(e.decision.reason)}")

        options.setdefault("say", lambda text: console.print(
            escape(text), highlight=False, soft_wrap=True))
        return await run_tasks(repo, tasks, progress=show, stop=stop, **options)


class _Interrupts:
    """SIGINT and SIGTERM on the running loop: the first sets `stop`, the second cancels
    the task that entered (where signals cannot be caught, nothing is installed)."""

    def __init__(self, stop: asyncio.Event, console: Console) -> None:
        self.stop, self.console = stop, console
        self.installed: list[signal.Signals] = []

    def __enter__(self) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()

        def on_signal() -> None:
            if self.stop.is_set():
                self.console.print("[red]aborted[/]: the run stops now")
                if task is not None:
                    task.cancel()
                return
            self.stop.set()
            self.console.print("[yellow]interrupted[/]: the agents stop at their next step "
                               "(Ctrl-C again aborts at once)", highlight=False)

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, on_signal)
            except (ValueError, RuntimeError, NotImplementedError):
                continue  # not the main thread, or no signals here
            self.installed.append(sig)

    def __exit__(self, *exc: object) -> None:
        loop = asyncio.get_running_loop()
        for sig in self.installed:
            loop.remove_signal_handler(sig)


def render_report(report: RunReport) -> Table:
    """The end-of-run summary: one row per agent (status, steps, tokens, cost...), a total,
    then the merge and the branch."""
    merges = {m.agent: m for m in report.merges}
    table = Table(
        "agent", "status", "steps", "tokens", "cached", "cost USD", "blocked", "merge",
        title=f"corral run {report.run_id}" + (" (partial)" if report.partial else ""),
        caption=_caption(report),
    )
    for a in report.agents:
        m = merges.get(a.name)
        merge = m.outcome if m else ""
        if m and m.conflicts:
            merge += f" ({', '.join(m.conflicts)})"
        s = report.spent.get(a.name) or Spent(a.prompt_tokens, a.cached_tokens,
                                               a.completion_tokens)
        status = f"{a.status}: {a.summary}" if a.status == "stopped" else a.status
        table.add_row(
            a.name, escape(status), str(a.steps), str(s.tokens), str(s.cached),
            f"{report.costs.get(a.name, 0.0):.4f}", str(a.blocked), merge,
        )
    total = report.total()
    table.add_row("total", "", str(sum(a.steps for a in report.agents)), str(total.tokens),
                  str(total.cached), f"{sum(report.costs.values()):.4f}",
                  str(sum(a.blocked for a in report.agents)), "", style="bold")
    return table


def _caption(report: RunReport) -> str:
    where = f"branch {report.branch} at {report.commit[:12]}" if report.commit else "no branch"
    if report.partial and report.commit:
        where += " (partial)"
    if report.exports:
        where += "; not merged: " + ", ".join(report.exports.values())
    acts = f"; supervisor: {len(report.supervisor_actions)} actions" if (
        report.supervisor_actions) else ""
    env = report.environment
    if env is not None and env.source != "none":
        acts += f"; environment {env.recipe} {env.seconds:.1f}s" + (
            f" ({env.source})" if env.cached else "")
    return f"{where} in {report.repo}; trace in {report.state}{acts} ({report.seconds:.1f}s)"
