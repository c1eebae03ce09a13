"""`--executor ray`: each (group, setting) unit is a Ray task. A worker prepares (or
reuses, from `--env-cache`) the task's repository and environment on its own machine,
runs the unit on its own state (the task's coordinator at traces/<task>/ray-<pid>,
opened per unit), and returns the results, which the driver appends to the results file
as they arrive (so --resume works the same)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

from ._agents import load_agent
from ._dataset import Task
from ._records import PairResult
from ._spec import RunSpec
from ._store import ResultStore
from ._units import TaskContext, Unit, run_unit, skipped, unprepared

__all__ = ["run_ray"]

_CONTEXTS: dict[str, TaskContext | Exception] = {}
"""Per worker process: the tasks it has prepared (TaskContext, or the error)."""


def _run_remote(spec: RunSpec, task: Task, unit: Unit) -> tuple[list[dict[str, Any]], float]:
    ctx = _CONTEXTS.get(task.key)
    prepared = 0.0
    if ctx is None:
        try:
            ctx = TaskContext.prepare(task, spec)
            # One state directory per worker process: workers of one machine share `out`.
            ctx.state = ctx.state / f"ray-{os.getpid()}"
        except Exception as e:
            ctx = e
        _CONTEXTS[task.key] = ctx
    results = unprepared(task, unit, spec, ctx)
    if results is None:
        assert isinstance(ctx, TaskContext)
        opening = ctx

        async def one() -> tuple[list[PairResult], float]:
            async with AsyncExitStack() as stack:
                state = await opening.open(stack, spec)
                rs = await run_unit(spec.unit_config(), state, unit.group, unit.setting,
                                    load_agent(spec.agent, spec.options))
                return rs, (0.0 if state.cached else state.prepared_s)

        spec = dataclasses.replace(spec, resume=True)  # the bench stays for the next unit
        try:
            results, prepared = asyncio.run(one())
        except Exception as e:
            results = unprepared(task, unit, spec, e) or []
    return [r.model_dump(mode="json") for r in results], prepared


def run_ray(spec: RunSpec, tasks: dict[str, Task], units: list[Unit], store: ResultStore,
            done: Callable[[Unit, list[PairResult]], None], address: str | None
            ) -> dict[str, float]:
    """Run `units` as Ray tasks on the cluster at `address` (None: start a local one).
    Raises ImportError when ray is not installed."""
    try:
        import ray
    except ImportError as e:
        raise ImportError("--executor ray needs the ray package: pip install 'corral[ray]'"
                          ) from e
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, ignore_reinit_error=True, include_dashboard=False,
                 log_to_driver=False, configure_logging=False,
                 num_cpus=None if address else max(1, spec.workers))
    remote = ray.remote(num_cpus=1, max_retries=0)(_run_remote)
    prepared: dict[str, float] = {}
    try:
        pending = {remote.remote(spec, tasks[u.group.task], u): u for u in units}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                unit = pending.pop(ref)
                try:
                    rows, prep = ray.get(ref)
                    results = [PairResult.model_validate(r) for r in rows]
                    if prep:
                        prepared[unit.group.task] = round(prep, 2)
                except Exception as e:
                    results = skipped(tasks[unit.group.task], unit, spec, "error",
                                       f"ray task failed: {type(e).__name__}: {e}")
                store.append(results)
                done(unit, results)
    finally:
        if started_here:
            ray.shutdown()
    return prepared
