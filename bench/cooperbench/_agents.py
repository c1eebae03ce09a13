"""Agents for CooperBench pairs. Each works in its own Corral scope, so every action
is an effect the supervisor reviews first.

- `oracle`: applies a feature's gold `feature.patch` through the scope API, one
  intent per hunk (a new file is one write, a deleted file one delete).
- any agent of the entry point group `corral.agents` (`builtin` = `agents.CodingAgent`,
  `mini-swe-agent`, or yours; see `agents.entry`) on a model (`--model PROVIDER/MODEL
  [--base-url]`);
- `module:attr`: such an agent function, or a pair agent (`name` and async `run(job)`)
  or its factory `factory(options: AgentOptions) -> Agent`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from coordinator import Coordinator, PatchError, Result, Scope
from coordinator.store import merge_texts

from ._dataset import Feature
from ._patches import apply_hunk_exact, hunk_delta, shift_hunk, split_diff

__all__ = [
    "Agent",
    "AgentOptions",
    "AgentReport",
    "Job",
    "ModelAgent",
    "OracleAgent",
    "Step",
    "apply_step",
    "load_agent",
    "oracle_steps",
    "task_text",
]


@dataclass(frozen=True, slots=True)
class Job:
    """One agent's work in a pair: what a plug-in agent receives."""

    coord: Coordinator
    scope: Scope
    role: str
    """agent1, agent2 or solo."""
    features: tuple[Feature, ...]
    text: str
    """The task as the agent reads it (the feature.md texts)."""
    teammates: tuple[str, ...] = ()
    messaging: bool = True
    max_steps: int = 30
    max_tokens: int | None = None


@dataclass
class AgentReport:
    status: str = "finished"
    steps: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    blocked: int = 0
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    handoffs: int = 0
    record: dict[str, Any] = field(default_factory=dict)
    """Fields of the pair's result set by the team (budget, messaging, supervisor)."""

    def add(self, other: AgentReport) -> None:
        """Count `other` (a teammate's report) into this one."""
        self.steps += other.steps
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        self.completion_tokens += other.completion_tokens
        self.blocked += other.blocked
        self.handoffs += other.handoffs
        self.notes.extend(other.notes)
        if other.error:
            self.error = (self.error + "; " if self.error else "") + other.error
        if other.status != "finished" and self.status == "finished":
            self.status = other.status


@runtime_checkable
class Agent(Protocol):
    name: str

    async def run(self, job: Job) -> AgentReport: ...


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """What `--agent`, `--model` and `--base-url` say, handed to agent factories."""

    model: str | None = None
    base_url: str | None = None
    retries: int = 4


def task_text(features: tuple[Feature, ...], role: str, teammates: tuple[str, ...],
              messaging: bool) -> str:
    """The prompt text: one feature.md, or (solo) each as `## Feature i … ---`."""
    if len(features) == 1:
        text = features[0].description.strip()
    else:
        text = "\n\n".join(f"## Feature {i}\n\n{f.description.strip()}\n\n---"
                           for i, f in enumerate(features, 1))
    if teammates and messaging:
        text += ("\n\nAnother agent implements a different feature of the same repository in "
                 f"parallel ({', '.join(teammates)}); your changes are merged with theirs. "
                 "Use send_message to coordinate.")
    return text


# -- the oracle -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """One intent of the oracle: a write, one hunk, a delete, or a copy (renames)."""

    kind: Literal["write", "patch", "delete", "copy"]
    path: str
    feature: int
    data: bytes = b""
    hunk: str = ""
    """The hunk, its old start moved by the feature's earlier hunks in this file."""
    base_hunk: str = ""
    """The hunk as the gold patch has it (against the base file)."""
    source: str = ""
    mode: int = 0o100644

    def describe(self) -> str:
        return f"{self.kind} {self.path} (feature {self.feature})"


def oracle_steps(feature: Feature) -> list[Step]:
    """The gold patch of `feature` as scope intents, in patch order."""
    steps: list[Step] = []
    for f in split_diff(feature.patch):
        mode = 0o100755 if "mode 100755" in f.header else 0o100644
        if f.binary:
            raise PatchError(f"feature {feature.id}: binary change to {f.path} is not supported")
        if f.old_path is None and f.new_path is not None:
            steps.append(Step("write", f.new_path, feature.id, data=f.added_content(), mode=mode))
            continue
        if f.new_path is None and f.old_path is not None:
            steps.append(Step("delete", f.old_path, feature.id))
            continue
        assert f.new_path is not None and f.old_path is not None
        if f.old_path != f.new_path:
            steps.append(Step("copy", f.new_path, feature.id, source=f.old_path))
        delta = 0
        for hunk in f.hunks:
            steps.append(Step("patch", f.new_path, feature.id, hunk=shift_hunk(hunk, delta),
                              base_hunk=hunk))
            delta += hunk_delta(hunk)
        if f.old_path != f.new_path:
            steps.append(Step("delete", f.old_path, feature.id))
    return steps


async def apply_step(scope: Scope, step: Step, base: bytes | None = None) -> Result:
    """Carry out one oracle step as the scope's effect. A hunk whose context the scope's
    file no longer has (another feature changed it) is merged in three ways, as
    `git apply --3way` would: the base file, the file now, and the base file with the
    hunk; a clean merge is written. Raises PatchError when that conflicts too,
    FileNotFoundError for a missing file."""
    if step.kind == "write":
        return await scope.write(step.path, step.data, mode=step.mode)
    if step.kind == "delete":
        return await scope.delete(step.path)
    if step.kind == "copy":
        return await scope.write(step.path, await scope.read(step.source))
    try:
        return await scope.patch(step.path, step.hunk)
    except PatchError:
        if base is None:
            raise
    return await _apply_three_way(scope, step, base)


async def _apply_three_way(scope: Scope, step: Step, base: bytes) -> Result:
    """The hunk of `step` merged into the scope's file from the base file (see
    `apply_step`). Raises PatchError."""
    theirs = apply_hunk_exact(base.decode(), step.base_hunk or step.hunk)
    if theirs is None:
        raise PatchError(f"hunk of {step.path} does not apply to the base file either")
    # `git merge-file -p`, in process
    merged = await asyncio.to_thread(merge_texts, await scope.read(step.path), base,
                                     theirs.encode())
    if merged is None:
        raise PatchError(f"hunk of {step.path} conflicts with the file's changes (3-way)")
    return await scope.write(step.path, merged)


class OracleAgent:
    """Applies its features' gold patches hunk by hunk (one after the other for solo)."""

    name = "oracle"

    def __init__(self, options: AgentOptions | None = None) -> None:
        self.options = options

    async def run(self, job: Job) -> AgentReport:
        report = AgentReport()
        for feature in job.features:
            for step in oracle_steps(feature):
                if report.steps >= job.max_steps:  # the step budget holds for oracles too
                    report.status = "step_limit"
                    report.notes.append(f"step budget spent ({job.max_steps})")
                    return report
                await run_oracle_step(job.scope, step, report, job.coord)
        return report


async def run_oracle_step(scope: Scope, step: Step, report: AgentReport,
                          coord: Coordinator | None = None) -> Result | None:
    """One step, counted in `report`: a blocked intent or a hunk that does not apply is
    noted (and returned as None for the latter), never raised. With `coord`, a hunk whose
    context moved is merged against the base file (the scope's fork point)."""
    report.steps += 1
    try:
        try:
            result = await apply_step(scope, step)
        except PatchError:
            # The base file is read only now: most hunks apply as they are.
            base = await _base_file(coord, scope, step)
            if base is None:
                raise
            result = await _apply_three_way(scope, step, base)
    except (PatchError, FileNotFoundError) as e:
        report.notes.append(f"{step.describe()}: {e}")
        return None
    if result.blocked:
        report.blocked += 1
    return result


async def _base_file(coord: Coordinator | None, scope: Scope, step: Step) -> bytes | None:
    """The file of `step` at the scope's fork point (None without `coord`, or none)."""
    if coord is None or step.kind != "patch":
        return None
    try:
        return await asyncio.to_thread(coord.trace.read, scope.fork_point, step.path)
    except Exception:
        return None


# -- the built-in coding agent ----------------------------------------------------


class ModelAgent:
    """An agent of the `corral.agents` group (`builtin`, `mini-swe-agent`, or yours):
    an async `run(coord, scope, task, *, provider, max_steps, max_tokens, retries)`
    (see `agents.entry`), on `--model PROVIDER/MODEL` (and `--base-url`)."""

    def __init__(self, name: str, fn: Any, options: AgentOptions) -> None:
        if not options.model:
            raise ValueError(f"the {name} agent needs --model PROVIDER/MODEL")
        self.name, self.fn, self.options = name, fn, options

    async def run(self, job: Job) -> AgentReport:
        from agents.providers import provider_from_spec

        assert self.options.model is not None
        provider = provider_from_spec(self.options.model, self.options.base_url)
        try:
            r = await self.fn(job.coord, job.scope, job.text, provider=provider,
                              max_steps=job.max_steps, max_tokens=job.max_tokens,
                              retries=self.options.retries)
        finally:
            await provider.aclose()
        return AgentReport(status=r.status, steps=r.steps, prompt_tokens=r.prompt_tokens,
                           cached_tokens=r.cached_tokens, completion_tokens=r.completion_tokens,
                           blocked=r.blocked, error=r.error)


def load_agent(spec: str, options: AgentOptions) -> Agent:
    """The agent named `spec`: `oracle`, an agent of the `corral.agents` group
    (`builtin`, `mini-swe-agent`, ...: run on `options.model`), or `module:attr` naming
    either such a function or a pair agent (an object with `name` and async
    `run(job)`, or a factory called with `options`). Raises LookupError or ValueError."""
    from agents.entry import agent_names
    from agents.entry import load_agent as load_model_agent

    if spec == "oracle":
        return OracleAgent()
    if ":" not in spec and spec not in agent_names():
        raise LookupError(f"no agent {spec!r}: use oracle, an agent of corral.agents "
                          f"({', '.join(agent_names()) or 'none installed'}) or module:attr")
    obj: Any = load_model_agent(spec)
    if isinstance(obj, type) or hasattr(obj, "run"):
        # A pair agent, or its factory: it gets the whole Job.
        agent = obj(options) if isinstance(obj, type) or not isinstance(obj, Agent) else obj
        if not isinstance(agent, Agent):
            raise LookupError(f"agent {spec!r} has no `name` and async `run(job)`")
        return agent
    return ModelAgent(spec.rpartition(":")[2] if ":" in spec else spec, obj, options)
