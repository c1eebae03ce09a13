"""The plain-merge census of gold groups: CooperBench's `scripts/check_gold_conflicts.py`
rule (which made `dataset/gold_conflict_report.json` for pairs), folded for N features
as its PR #75 (`--group-size N`) describes it. No test runs.

The rule, step for step on a checkout of the task's base commit with stock git:

1. each gold `feature.patch` with the script's own test filter (a file section is
   dropped when its `diff --git` line holds `/test_`, `/tests/`, `_test.py`, `/test/` or
   `tests.py`) is applied on a branch `agent<k>` from base: `git apply
   --ignore-whitespace`, else `git apply --3way`, else the patch is marked failed (and
   what the failed apply left is committed, as the script does); `git add -A`, a
   commit (`--allow-empty`);
2. on `agent2`, `git merge agent1 --no-commit --no-ff`: the pair's verdict; for N
   features the merge is committed and `agent3`, `agent4`, ... are merged into it in
   turn the same way. The group conflicts when any step does (the step is recorded).

For a pair this is the script itself (`tests/bench/test_cooperbench_census.py` runs the
script's own filter and merge steps against it). With `* merge=union` appended to
`.gitattributes` the fold is done again for a group that conflicts (`union`).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from rich.table import Table

from ._dataset import Group, Task
from ._repos import git
from ._workbench import fold_order

__all__ = [
    "CensusRow",
    "GoldFold",
    "census_group",
    "census_pair",
    "census_table",
    "census_task",
    "compare_with_report",
    "script_filter",
]

_TEST_MARKS = ("/test_", "/tests/", "_test.py", "/test/", "tests.py")


def script_filter(patch: str) -> str:
    """`check_gold_conflicts.py`'s test filter: every file section whose `diff --git` line
    names a test path by its marks is dropped; the rest ends with a newline."""
    if not patch:
        return patch
    kept: list[str] = []
    dropping = False
    for line in patch.split("\n"):
        if line.startswith("diff --git"):
            dropping = any(mark in line for mark in _TEST_MARKS)
        if not dropping:
            kept.append(line)
    out = "\n".join(kept)
    return out if not out or out.endswith("\n") else out + "\n"


@dataclass(frozen=True, slots=True)
class CensusRow:
    task: str
    group: tuple[int, ...]
    verdict: str
    """clean or conflict (the script's `has_conflict`), or error."""
    apply: tuple[str, ...]
    """Each gold patch on its branch: applied, skipped (empty), failed."""
    step: int | None = None
    """The fold step that conflicted (`MergeRun.step`: 2 is agent 1 into agent 2)."""
    union: str = ""
    """With `* merge=union`: clean or conflict (for groups whose plain fold conflicted)."""
    reason: str = ""
    pair_conflict: bool | None = None
    """Groups of 3 or more: whether some pair of its features conflicts by the pair rule
    (None: not asked, or a pair)."""

    @property
    def f1(self) -> int:
        return self.group[0]

    @property
    def f2(self) -> int:
        return self.group[1]

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "group": list(self.group), "verdict": self.verdict,
                "apply": list(self.apply), "step": self.step, "union": self.union,
                "reason": self.reason, "pair_conflict": self.pair_conflict}


class GoldFold:
    """A checkout (`path`, a clone holding `base`) where the rule's steps run."""

    def __init__(self, path: Path, base: str) -> None:
        self.path = path
        self.base = base
        self._patches = path / ".git" / "census"
        self._patches.mkdir(parents=True, exist_ok=True)

    @classmethod
    def create(cls, path: Path, source: Path, base: str) -> GoldFold:
        """A checkout at `path` of `base`, cloned from `source` (sharing its objects)."""
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        git(path.parent, "clone", "-q", "--shared", "--no-checkout", str(source), str(path))
        git(path, "checkout", "-q", "--force", base)
        return cls(path, base)

    def _clean(self) -> None:
        if (self.path / ".git" / "MERGE_HEAD").exists():
            git(self.path, "merge", "--abort", check=False)
        git(self.path, "checkout", "-q", "--force", "--detach", self.base)
        git(self.path, "clean", "-fdxq", "-e", ".git")

    def _branch(self, k: int, patch: str) -> str:
        """Branch agent<k>: base + `patch` as the script applies it."""
        self._clean()
        git(self.path, "checkout", "-q", "-B", f"agent{k}")
        status = "skipped"
        if patch:
            p = self._patches / f"patch{k}.patch"
            p.write_text(patch)
            status = "applied"
            if git(self.path, "apply", "--ignore-whitespace", str(p), check=False).returncode:
                if git(self.path, "apply", "--3way", str(p), check=False).returncode:
                    status = "failed"
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--allow-empty", "--no-verify", "-m", f"Feature {k}")
        return status

    def _fold(self, n: int, union: bool) -> int | None:
        """agent1 into agent2, then agent3.. in turn; the step that conflicted, or None."""
        self._clean()
        git(self.path, "checkout", "-q", "-B", "fold", "agent2")
        if union:
            with (self.path / ".gitattributes").open("a") as f:
                f.write("* merge=union\n")
        for k, agent in enumerate(fold_order(n)[1:], 2):
            if git(self.path, "merge", f"agent{agent + 1}", "--no-commit", "--no-ff",
                   check=False).returncode:
                git(self.path, "merge", "--abort", check=False)
                return k
            git(self.path, "commit", "-q", "--allow-empty", "--no-verify", "-m", f"fold {k}")
        return None

    def run(self, patches: list[str]) -> tuple[tuple[str, ...], int | None, int | None]:
        """(apply statuses, the plain fold's conflicting step, the union fold's)."""
        applies = tuple(self._branch(k, p) for k, p in enumerate(patches, 1))
        step = self._fold(len(patches), union=False)
        union = self._fold(len(patches), union=True) if step is not None else None
        return applies, step, union


def _gold_fold(fold: GoldFold, task: Task, group: Group) -> CensusRow:
    patches = [script_filter(task.features[f].patch) for f in group.ids]
    try:
        applies, step, union = fold.run(patches)
    except RuntimeError as e:  # a git step that must not fail did
        return CensusRow(task.key, group.ids, "error", (), reason=str(e)[:500])
    return CensusRow(task.key, group.ids, "clean" if step is None else "conflict", applies,
                     step, "" if step is None else ("clean" if union is None else "conflict"))


async def census_group(fold: GoldFold, task: Task, group: Group) -> CensusRow:
    """The group's gold patches folded on `fold`'s checkout by the rule (module doc)."""
    return await asyncio.to_thread(_gold_fold, fold, task, group)


census_pair = census_group
"""A pair is a group of two."""


def census_task(fold: GoldFold, task: Task, groups: list[Group], pairwise: bool = False
                ) -> list[CensusRow]:
    """Every group of `task` by the rule; with `pairwise`, each group of 3 or more also
    says whether some pair of its features (in agent order) conflicts by itself."""
    rows = [_gold_fold(fold, task, g) for g in groups]
    if not pairwise:
        return rows
    pairs: dict[tuple[int, int], bool] = {}

    def conflicts(a: int, b: int) -> bool:
        if (a, b) not in pairs:
            pairs[a, b] = _gold_fold(fold, task, Group(task.key, (a, b))).verdict == "conflict"
        return pairs[a, b]

    return [CensusRow(r.task, r.group, r.verdict, r.apply, r.step, r.union, r.reason,
                      any(conflicts(a, b) for a, b in combinations(r.group, 2)))
            if len(r.group) > 2 else r for r in rows]


def census_table(rows: list[CensusRow], keys: list[str], size: int
                 ) -> tuple[Table, dict[str, int]]:
    """The census per task (and the totals): groups, conflicting and clean ones, the
    fold step of each conflict (groups of 3 or more), failed applies, errors, union's
    clean folds, and groups with a conflicting pair."""
    steps = list(range(2, size + 1)) if size > 2 else []
    cols = ["groups" if size > 2 else "pairs", "conflict", "clean",
            *(f"at step {k}" for k in steps), "a patch failed", "error",
            "union clean (of conflicts)", *(["with a conflicting pair"] if size > 2 else [])]
    sizes = sorted({len(r.group) for r in rows} or {size})
    what = "pairs" if sizes == [2] else "groups of " + " and ".join(map(str, sizes))
    table = Table("task", *cols, title=f"Plain git merge (folded) of gold {what}")
    totals = dict.fromkeys(cols, 0)
    for key in keys:
        rs = [r for r in rows if r.task == key]
        vals = [len(rs), sum(r.verdict == "conflict" for r in rs),
                sum(r.verdict == "clean" for r in rs),
                *(sum(r.step == k for r in rs) for k in steps),
                sum("failed" in r.apply for r in rs), sum(r.verdict == "error" for r in rs),
                sum(r.union == "clean" for r in rs),
                *([sum(bool(r.pair_conflict) for r in rs)] if size > 2 else [])]
        for c, v in zip(cols, vals, strict=True):
            totals[c] += v
        table.add_row(key, *map(str, vals))
    table.add_row("[bold]total", *map(str, totals.values()))
    return table, totals


def compare_with_report(rows: list[CensusRow], report: Path) -> dict[str, Any]:
    """Pairs whose verdict (its `has_conflict`, or `error`) or failed applies differ from
    `gold_conflict_report.json`'s; groups of other sizes are not in it."""
    data = json.loads(report.read_text())
    theirs: dict[tuple[str, tuple[int, ...]], dict[str, Any]] = {
        (f"{r['repo']}/task{r['task_id']}", (r["f1"], r["f2"])): r
              for r in data.get("all_results", [])}
    diffs = []
    compared = 0
    for row in rows:
        r = theirs.get((row.task, row.group))
        if r is None:
            continue
        compared += 1
        their = "error" if r.get("error") else ("conflict" if r["has_conflict"] else "clean")
        their_failed = [bool(r.get("patch1_apply_failed")), bool(r.get("patch2_apply_failed"))]
        if row.verdict != their or [a == "failed" for a in row.apply] != their_failed:
            diffs.append({"task": row.task, "group": list(row.group), "ours": row.verdict,
                          "theirs": their, "apply": list(row.apply),
                          "their_apply_failed": their_failed})
    return {"compared": compared, "differences": diffs}
