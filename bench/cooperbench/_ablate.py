"""`--ablate`: after a supervised unit, what each of its supervisor's decisions was worth.

Before the unit's scopes are discarded, `agents.rollouts.ablate` forks the unit's team
just before every decision of the run (a block by the guard, an inject, a handoff, a
rewind) and continues it twice, with the decision and without it, each member as the
builtin coding agent on its recorded model (the prefix served from the trace). Both
leaves are graded as the unit is: CooperBench's rules (`grade_merged`, the plain merge)
on the members' patches in scopes of the tree (`<tree>.<leaf>.grade.…`; the grade names
the merged one), so a leaf's reward is 1 when every feature passes, and its grade keeps
each feature's result and the merge's verdict. The
tree's teams are supervised by the unit's own supervisor policies (the guard), not the
task state's chain of units. The tree is `<unit>.ablate` (`corral rollouts show` in the
task's trace); the report (`agents.rollouts.Ablation`) goes into the unit's results.

A unit of the oracle has no model calls to continue: it is not ablated (the result
says so), nor is a unit with no decision.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from coordinator import Scope

from ._agents import AgentChoice
from ._dataset import Group
from ._environment import task_test_command
from ._grade import grade_merged
from ._scope_workbench import ScopeWorkbench
from ._spec import UnitConfig
from ._task_state import TaskState
from ._team_rules import supervisor_policies
from ._workbench import TestRun, Workbench

if TYPE_CHECKING:
    from agents.rollouts import Grade, Grader

__all__ = ["ablate_unit", "evaluator"]

_LOCKS: dict[int, asyncio.Lock] = {}
"""One ablation at a time per task state: a tree swaps the coordinator's chain while it
grows (`agents.rollouts.grow`)."""


def evaluator(state: TaskState, group: Group, test_timeout: float) -> Grader:
    """A rollout grader (`agents.rollouts.Grader`) that grades a leaf by CooperBench's
    rules: member `…agentK`'s patch is feature K's, merged as the plain policy merges."""
    from agents.rollouts import FeatureGrade, Grade

    task = state.task
    command = functools.cache(lambda: task_test_command(task))

    async def run_tests(bench: Workbench, patch: str | None, fid: int) -> TestRun:
        return await bench.run_tests(patch, task.features[fid].tests, command(), test_timeout)

    async def grade(name: str, members: Mapping[str, Scope]) -> Grade:
        ordered = [members[m] for m in sorted(members, key=_agent_index)]
        patches = [state.diff(s) for s in ordered]
        bench = ScopeWorkbench(state, name)
        g = await grade_merged(bench, group.ids, patches, run_tests, policy="plain")
        merged = [s for s in bench.scopes if ".merged" in s.name]
        kept = (merged or bench.scopes or [await state.env.fork(name)])[-1]
        return Grade(scope=kept.name, merged=g.merge_status in ("clean", "identical"),
                     reward=1.0 if g.passed else 0.0, evaluator="cooperbench",
                     merge_status=g.merge_status,
                     features=tuple(FeatureGrade(id=f.id, passed=f.passed, reason=f.reason)
                                    for f in g.features))

    return grade


def _agent_index(name: str) -> int:
    role = name.rpartition(".")[2]
    return int(role.removeprefix("agent")) if role.removeprefix("agent").isdigit() else 0


async def ablate_unit(cfg: UnitConfig, state: TaskState, group: Group, prefix: str,
                      scopes: list[Scope], agent: AgentChoice) -> dict[str, Any]:
    """The ablation of a finished supervised unit (its agents' `scopes`, still live): the
    report as a dict, or {"skipped": why} / {"error": what failed}."""
    from agents.rollouts import ablate

    if agent.oracle or agent.options.model is None:
        return {"skipped": "the oracle makes no model calls to continue"}
    lock = _LOCKS.setdefault(id(state.coord), asyncio.Lock())
    try:
        async with lock:
            report = await ablate(
                state.coord, [s.name for s in scopes], grader=evaluator(
                    state, group, cfg.test_timeout),
                team_policies=supervisor_policies(cfg.supervisor),
                base_url=agent.options.base_url, tokens=False,
                max_steps=max(1, cfg.max_steps // max(1, len(scopes))),
                tree_id=f"{prefix}.ablate", test_timeout=cfg.test_timeout)
    except ValueError as e:
        return {"skipped": str(e)}
    except Exception as e:  # the unit's results stand without it
        return {"error": f"{type(e).__name__}: {e}"[:2000]}
    return report.model_dump(mode="json")
