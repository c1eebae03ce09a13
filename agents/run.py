"""`corral run`: one built-in coding agent per task, in parallel scopes under a supervisor.

The run imports the user's repository at HEAD into a coordinator state directory (by
default inside the repository's git directory, `.git/corral/runs/<run-id>`, so the working
tree is never touched), forks one scope per task from root, runs the agents concurrently,
merges the branches of the agents that finished into root, and pushes root's head into the
user's repository as the branch `corral/<run-id>`. Whatever happened stays in the trace,
also when a model call fails.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn
from rich.table import Table

from coordinator import ConflictGuard, Coordinator, CorralError, Event, Policy, Scope

from ._model_effects import ModelCaller
from .coding import AgentResult, CodingAgent
from .entry import AgentFn, load_agent
from .providers import Provider, provider_from_spec
from .supervisor import LLMSupervisor, run_to_rest

__all__ = [
    "MergeSummary",
    "RunReport",
    "parse_supervisor",
    "render_report",
    "run_tasks",
    "run_with_progress",
]


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

    @property
    def ok(self) -> bool:
        return not self.errors and all(m.outcome != "conflict" for m in self.merges) and all(
            a.status in ("finished", "stopped") for a in self.agents
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "repo": self.repo, "state": self.state, "model": self.model,
            "supervisor": self.supervisor, "branch": self.branch, "commit": self.commit,
            "ok": self.ok, "seconds": round(self.seconds, 3),
            "agents": [{k: v for k, v in a.as_dict().items() if k != "patch"}
                       | {"patch_bytes": len(a.patch)} for a in self.agents],
            "merges": [
                {"agent": m.agent, "outcome": m.outcome, "conflicts": list(m.conflicts),
                 "commit": m.commit} for m in self.merges
            ],
            "supervisor_actions": self.supervisor_actions, "errors": self.errors,
            "exports": self.exports, "notes": self.notes,
        }


def parse_supervisor(spec: str) -> tuple[list[Policy], str | None]:
    """The policies and (for `llm:PROVIDER/MODEL`) the meta-agent's model spec of a
    `--supervisor` value. Raises ValueError."""
    if spec == "none":
        return [], None
    if spec == "conflict-guard":
        return [ConflictGuard()], None
    if spec.startswith("llm:") and "/" in spec:
        # The meta-agent reacts to what the guard blocks, so it runs with the guard.
        return [ConflictGuard()], spec.removeprefix("llm:")
    raise ValueError(f"unknown supervisor {spec!r}: use conflict-guard, llm:PROVIDER/MODEL "
                     "or none")


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
    squash: bool = False,
    agent: str = "builtin",
) -> RunReport:
    """Run one coding agent per task and leave the merged result as `corral/<run-id>`
    (one commit over HEAD with `squash`, else the trace's history); an agent whose work
    did not merge is left as `corral/<run-id>-<agent>`.

    `model` is one spec for every agent, or one per task. `agent` is `builtin`, another
    name of the `corral.agents` group (`mini-swe-agent`) or a `module:attr` path (see
    `agents.entry`). Returns the report (agents' results, merges, exports, errors).
    Raises ModelError for a missing API key, ValueError for a bad model, supervisor or
    agent spec, CorralError for a bad repository.
    """
    notes = check_run(repo, tasks, model, supervisor)
    specs = models_per_agent(model, tasks)
    try:
        agent_fn = None if agent == "builtin" else load_agent(agent)
    except LookupError as e:
        raise ValueError(str(e)) from e
    if agent_fn is not None and supervisor.startswith("llm:"):
        raise ValueError("the LLM supervisor steers the builtin agent only; use "
                         "--supervisor conflict-guard or none with another agent")
    started = time.monotonic()
    repo = Path(repo).resolve()
    run_id = run_id or time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    state_dir = Path(state) if state is not None else default_state(repo, run_id)
    policies, meta_spec = parse_supervisor(supervisor)
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
    names = [f"agent-{i}" for i in range(1, len(tasks) + 1)]
    team = list(zip(names, tasks, strict=True))
    try:
        async with Coordinator.open(state_dir, repo=repo, base="HEAD", policies=policies,
                                    backend=backend) as coord:
            workers: list[CodingAgent | _External] = [
                CodingAgent(
                    coord, await coord.root.fork(name),
                    ModelCaller(coord, providers[spec], attempts=retries),
                    _task_text(name, task, team), max_steps=max_steps, max_tokens=max_tokens,
                ) if agent_fn is None else _External(
                    agent_fn, coord, await coord.root.fork(name), _task_text(name, task, team),
                    provider=providers[spec], max_steps=max_steps, max_tokens=max_tokens,
                    retries=retries,
                )
                for (name, task), spec in zip(team, specs, strict=True)
            ]
            meta = None
            if meta_provider is not None:
                meta = LLMSupervisor(coord, ModelCaller(coord, meta_provider, attempts=retries),
                                     [w for w in workers if isinstance(w, CodingAgent)])
                await meta.start()
                for w in workers:
                    if isinstance(w, CodingAgent):
                        w.before_step = meta.settle
            try:
                results = await _drive(coord, workers, meta, progress)
            finally:
                if meta is not None:
                    await meta.close()
                    report.supervisor_actions = [e.summary() for e in meta.actions]
                    report.errors.extend(meta.errors)
            report.agents = [results[w.name] for w in workers]
            report.errors.extend(f"{r.name}: {r.error}" for r in report.agents if r.error)
            for w in workers:
                report.merges.append(await _merge(coord, w, results[w.name]))
            await coord.checkpoint()  # git push reads the repository on disk
            if any(m.outcome == "merged" for m in report.merges):
                # Only a run that merged something leaves a branch: one at the
                # base commit would look like a result.
                report.branch = f"corral/{run_id}"
                report.commit = await coord.io(
                    _export, coord, coord.root.head, repo, report.branch,
                    f"corral run {run_id}: " + "; ".join(tasks) if squash else None)
            for m in report.merges:
                if m.outcome in ("merged", "empty") or not results[m.agent].patch:
                    continue
                branch = f"corral/{run_id}-{m.agent}"
                scope = coord.scopes[m.agent]
                await coord.io(_export, coord, scope.head, repo, branch,
                               f"corral run {run_id}, {m.agent} ({m.outcome}): "
                               f"{dict(team)[m.agent]}" if squash else None)
                report.exports[m.agent] = branch
    finally:
        for p in providers.values():
            await p.aclose()
        if meta_provider is not None:
            await meta_provider.aclose()
        report.seconds = time.monotonic() - started
    return report


class _External:
    """An agent of the `corral.agents` group, driven like a CodingAgent (no LLM supervisor)."""

    def __init__(self, fn: AgentFn, coord: Coordinator, scope: Scope, task: str,
                 **options: Any) -> None:
        self.fn, self.coord, self.scope, self.task, self.options = fn, coord, scope, task, options

    @property
    def name(self) -> str:
        return self.scope.name

    async def run(self) -> AgentResult:
        return await self.fn(self.coord, self.scope, self.task, **self.options)


async def _drive(
    coord: Coordinator,
    workers: Sequence[CodingAgent | _External],
    meta: LLMSupervisor | None,
    progress: Callable[[Event], None] | None,
) -> dict[str, AgentResult]:
    sub = coord.events.subscribe(types=["effect"]) if progress is not None else None

    async def watch() -> None:
        assert sub is not None and progress is not None
        async for event in sub:
            progress(event)

    async with asyncio.TaskGroup() as outer:
        if sub is not None:
            outer.create_task(watch())
        try:
            results = await run_to_rest(workers, meta)
        finally:
            if sub is not None:
                sub.close()
    return results


async def _merge(coord: Coordinator, w: CodingAgent | _External,
                 result: AgentResult) -> MergeSummary:
    if result.status not in ("finished", "stopped"):
        return MergeSummary(w.name, "skipped")
    if not result.patch:
        return MergeSummary(w.name, "empty")
    try:
        merged = await coord.root.merge(w.scope)
    except CorralError as e:
        return MergeSummary(w.name, f"error: {e}")
    if merged.commit is None:
        return MergeSummary(w.name, "conflict", tuple(c.path for c in merged.conflicts))
    return MergeSummary(w.name, "merged", commit=merged.commit)


def _export(coord: Coordinator, head: str, repo: Path, branch: str,
            squash_message: str | None) -> str:
    """Push `head` into the user's repository as `branch`; with a message, first squash
    it into one commit over the snapshot (the tree of `head`, no trace records).
    Returns the commit pushed."""
    trace = coord.trace
    commit = head
    if squash_message is not None:
        snapshot = trace.snapshot()
        assert snapshot is not None
        # with git itself: the trace's own writes go to its journal first, and git
        # push reads only what is on disk (the caller checkpointed the trace)
        env = {**os.environ, "GIT_AUTHOR_NAME": "corral", "GIT_AUTHOR_EMAIL": "corral@localhost",
               "GIT_COMMITTER_NAME": "corral", "GIT_COMMITTER_EMAIL": "corral@localhost"}
        proc = subprocess.run(
            ["git", "--git-dir", str(trace.path), "commit-tree", "-p", snapshot,
             "-m", squash_message, str(trace.commit(head).tree_id)],
            capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise CorralError(f"could not squash {branch}: {proc.stderr.strip()}")
        commit = proc.stdout.strip()
    _push(trace.path, repo, commit, branch)
    return commit


def _push(trace: Path, repo: Path, commit: str, branch: str) -> None:
    """Put `commit` into the user's repository as `branch`, leaving its working tree alone."""
    proc = subprocess.run(
        ["git", "--git-dir", str(trace), "push", "--quiet", str(repo),
         f"{commit}:refs/heads/{branch}"],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise CorralError(f"could not create branch {branch} in {repo}: {proc.stderr.strip()}")



# -- the terminal view ----------------------------------------------------------------


async def run_with_progress(
    console: Console, repo: str | Path, tasks: Sequence[str], **options: Any
) -> RunReport:
    """`run_tasks` with a live progress display (one bar per agent: steps of max). The
    input is checked first, so a mistake is reported before any bar is drawn."""
    supervisor = options.get("supervisor", "conflict-guard")
    notes = check_run(repo, tasks, options["model"], supervisor)
    _, meta_spec = parse_supervisor(supervisor)
    for spec in {*models_per_agent(options["model"], tasks), *([meta_spec] if meta_spec else [])}:
        # a missing key or a bad spec fails here, before the bars
        await provider_from_spec(spec, options.get("base_url")).aclose()
    for note in notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    max_steps = int(options.get("max_steps", 30))
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"), console=console, transient=False,
    ) as bars:
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

        return await run_tasks(repo, tasks, progress=show, **options)


def render_report(report: RunReport) -> Table:
    """The end-of-run summary: one row per agent, then the merge and the branch."""
    merges = {m.agent: m for m in report.merges}
    table = Table(
        "agent", "status", "steps", "tokens", "cached", "blocked", "merge",
        title=f"corral run {report.run_id}", caption=_caption(report),
    )
    for a in report.agents:
        m = merges.get(a.name)
        merge = m.outcome if m else ""
        if m and m.conflicts:
            merge += f" ({', '.join(m.conflicts)})"
        table.add_row(
            a.name, a.status, str(a.steps), str(a.prompt_tokens + a.completion_tokens),
            str(a.cached_tokens), str(a.blocked), merge,
        )
    return table


def _caption(report: RunReport) -> str:
    where = f"branch {report.branch} at {report.commit[:12]}" if report.commit else "no branch"
    if report.exports:
        where += "; not merged: " + ", ".join(report.exports.values())
    acts = f"; supervisor: {len(report.supervisor_actions)} actions" if (
        report.supervisor_actions) else ""
    return f"{where} in {report.repo}; trace in {report.state}{acts} ({report.seconds:.1f}s)"
