"""The plain-merge census of gold pairs (as `dataset/gold_conflict_report.json`):
for each pair, the two gold patches, test files stripped, applied to base on two
branches and merged with `git merge --no-commit --no-ff`. No test runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._dataset import Pair, Task
from ._patches import sanitize, strip_tests
from ._workbench import Workbench

__all__ = ["CensusRow", "census_pair", "compare_with_report"]


@dataclass(frozen=True, slots=True)
class CensusRow:
    task: str
    f1: int
    f2: int
    verdict: str
    """clean, conflict, missing_input (a patch did not apply) or error."""
    apply: tuple[str, str]
    union: str = ""
    """With `* merge=union`: clean or conflict (for pairs whose plain merge conflicted)."""
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "f1": self.f1, "f2": self.f2, "verdict": self.verdict,
                "apply": list(self.apply), "union": self.union, "reason": self.reason}


async def census_pair(bench: Workbench, task: Task, pair: Pair) -> CensusRow:
    """The pair's gold patches merged on `bench` (a `GitWorkbench`, as CooperBench's
    report was made), and again with `* merge=union` when that conflicts."""
    p1 = strip_tests(sanitize(task.features[pair.f1].patch))
    p2 = strip_tests(sanitize(task.features[pair.f2].patch))
    m = await bench.merge(p1, p2, union=True)
    if "failed" in (m.apply1, m.apply2):
        verdict = "missing_input"
    else:
        verdict = "conflict" if m.strategy == "union" else "clean"
    union = ""
    if m.strategy == "union":
        union = "conflict" if m.union_conflict else "clean"
    return CensusRow(task.key, pair.f1, pair.f2, verdict, (m.apply1, m.apply2), union)


def compare_with_report(rows: list[CensusRow], report: Path) -> dict[str, Any]:
    """Pairs whose verdict differs from `gold_conflict_report.json` (which counts a
    pair whose patch did not apply by its merge outcome)."""
    data = json.loads(report.read_text())
    theirs = {(f"{r['repo']}/task{r['task_id']}", r["f1"], r["f2"]): r
              for r in data.get("all_results", [])}
    diffs = []
    compared = 0
    for row in rows:
        r = theirs.get((row.task, row.f1, row.f2))
        if r is None:
            continue
        compared += 1
        their = "error" if r.get("error") else ("conflict" if r["has_conflict"] else "clean")
        ours = row.verdict
        if ours != their:
            diffs.append({"task": row.task, "f1": row.f1, "f2": row.f2, "ours": ours,
                          "theirs": their, "apply": list(row.apply),
                          "their_apply_failed": [r.get("patch1_apply_failed"),
                                                 r.get("patch2_apply_failed")]})
    return {"compared": compared, "differences": diffs}
