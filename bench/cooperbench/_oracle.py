"""The oracle agent: applies a feature's gold `feature.patch` through the scope API,
one intent per hunk (a new file is one write, a deleted file one delete), so every
step is an effect the supervisor reviews first. It calls no model: what it measures
is Corral's part (scopes, merges, the supervisor) with the agents' skill held fixed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from coordinator import Coordinator, PatchError, Result, Scope
from coordinator.store import merge_texts

from ._agent_report import AgentReport
from ._dataset import Feature
from ._patches import apply_hunk_exact, hunk_delta, shift_hunk, split_diff

if TYPE_CHECKING:
    from agents import AgentContext, AgentResult

__all__ = ["OracleAgent", "Step", "apply_step", "oracle", "oracle_steps", "run_oracle_step"]


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
    """An `agents.Agent` that applies its features' gold patches hunk by hunk (one after
    the other for solo), within `ctx.budget.max_steps`. What it came to beyond the
    `AgentResult` (the notes of hunks that did not apply or were blocked) is in
    `report`."""

    def __init__(self, features: tuple[Feature, ...]) -> None:
        self.features = features
        self.report = AgentReport()

    async def __call__(self, ctx: AgentContext) -> AgentResult:
        from agents import AgentResult
        from agents.protocol import scope_patch

        report = self.report
        limit = ctx.budget.max_steps
        for step in (s for feature in self.features for s in oracle_steps(feature)):
            if report.steps >= limit:  # the step budget holds for oracles too
                report.status = "step_limit"
                report.notes.append(f"step budget spent ({limit})")
                break
            await run_oracle_step(ctx.scope, step, report, ctx.coord)
        return AgentResult(
            name=ctx.name, status="step_limit" if report.status == "step_limit" else "finished",
            summary="; ".join(report.notes), steps=report.steps, prompt_tokens=0,
            cached_tokens=0, completion_tokens=0, blocked=report.blocked,
            patch=await scope_patch(ctx.coord, ctx.scope), head=ctx.scope.head)


def oracle(features: tuple[Feature, ...]) -> OracleAgent:
    """The oracle of `features`, an `agents.Agent`."""
    return OracleAgent(features)


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
