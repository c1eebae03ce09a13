"""`corral bench cooperbench census`: the gold-conflict census checked against
CooperBench's own `scripts/check_gold_conflicts.py`, run from its source.

The script's `filter_test_files` and the shell steps of its `check_one_pair` (the
`merge_script` f-string) are read from the script's source in a git repository of
cooperbench/CooperBench (`--script-repo`, default `<repos>/cooperbench+CooperBench/repo`,
at `--script-ref`, default main) and run here, with stock git, on a clone of each pair's
base: the script's verdict (`MERGE_RESULT=conflict`) and failed applies, next to the
census's (`_census`). For groups of N > 2, which the script (before PR #75) does not
take, each of the group's pairs is checked that way and the fold is the census's. The
filter is checked on every chosen feature's patch. With the dataset's
`gold_conflict_report.json` the census is also compared with it, pair by pair.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from ._census import CensusRow, GoldFold, census_task, compare_with_report, script_filter
from ._dataset import Group, Task
from ._repos import _GIT_ENV, git

__all__ = ["PairScript", "ScriptCheck", "check_task", "script_source"]

SCRIPT_PATH = "scripts/check_gold_conflicts.py"


def script_source(repo: Path, ref: str = "main") -> str:
    """The script's source at `ref` of git repository `repo` (a bare mirror or a clone).
    Raises FileNotFoundError."""
    r = subprocess.run(["git", "--git-dir", str(repo), "show", f"{ref}:{SCRIPT_PATH}"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        r = subprocess.run(["git", "-C", str(repo), "show", f"{ref}:{SCRIPT_PATH}"],
                           capture_output=True, text=True)
    if r.returncode != 0:
        raise FileNotFoundError(f"no {SCRIPT_PATH} at {ref} in {repo}: {r.stderr.strip()}")
    return r.stdout


class PairScript:
    """The script's own `filter_test_files` and the shell steps of its `check_one_pair`,
    taken from its source, run on a checkout."""

    def __init__(self, source: str) -> None:
        tree = ast.parse(source)
        funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        namespace: dict[str, Any] = {}
        exec(compile(ast.Module([funcs["filter_test_files"]], []), "script", "exec"),
             namespace)
        self.filter: Callable[[str], str] = namespace["filter_test_files"]
        self.template = next(
            n.value for n in ast.walk(funcs["check_one_pair"]) if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "merge_script" for t in n.targets))

    def run(self, repo: Path, work: Path, f1: int, f2: int, p1: str, p2: str
            ) -> tuple[bool, bool, bool]:
        """(has_conflict, patch1_apply_failed, patch2_apply_failed), as the script reads
        them from its output."""
        git(work.parent, "clone", "-q", "--shared", str(repo), str(work))
        patches = work.parent / f"{work.name}-patches"
        patches.mkdir()
        (patches / "patch1.patch").write_text(self.filter(p1))
        (patches / "patch2.patch").write_text(self.filter(p2))
        script = eval(compile(ast.Expression(self.template), "script", "eval"),
                      {"f1": f1, "f2": f2})
        script = script.replace("/workspace/repo", str(work)).replace("/patches/",
                                                                       f"{patches}/")
        r = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                           env={**os.environ, **_GIT_ENV})
        out = r.stdout + r.stderr
        return ("MERGE_RESULT=conflict" in out, "PATCH1_APPLY_FAILED" in out,
                "PATCH2_APPLY_FAILED" in out)


@dataclass
class ScriptCheck:
    """One task's census against the script."""

    task: str
    rows: list[CensusRow]
    pairs: int = 0
    """Pairs the script's steps ran on (a group's pairs too)."""
    differences: list[dict[str, Any]] = field(default_factory=list)
    filter_differences: list[int] = field(default_factory=list)
    """Features whose patch the two filters leave differently."""

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "groups": [r.as_dict() for r in self.rows],
                "script_pairs": self.pairs, "differences": self.differences,
                "filter_differences": self.filter_differences}


def check_task(script: PairScript, task: Task, repo: Path, work: Path,
               groups: Sequence[Group]) -> ScriptCheck:
    """The census of `groups` (folded, with their pairs' verdicts) and the script's own
    steps on every pair among them, verdict and failed applies compared (in `work`,
    made afresh)."""
    if work.exists():
        shutil.rmtree(work)
    fold = GoldFold.create(work / "census", repo, git(repo, "rev-parse", "HEAD").stdout.strip())
    rows = census_task(fold, task, list(groups), pairwise=True)
    check = ScriptCheck(task.key, rows)
    ids = sorted({i for g in groups for i in g.ids})
    check.filter_differences = [i for i in ids if script_filter(task.features[i].patch)
                                != script.filter(task.features[i].patch)]
    pairs = sorted({p for g in groups for p in combinations(g.ids, 2)})
    ours: dict[tuple[int, ...], CensusRow] = {r.group: r for r in rows if len(r.group) == 2}
    missing = [Group(task.key, p) for p in pairs if p not in ours]
    ours.update({r.group: r for r in census_task(fold, task, missing)})
    for a, b in pairs:
        theirs = script.run(repo, work / f"script-{a}-{b}", a, b, task.features[a].patch,
                            task.features[b].patch)
        row = ours[a, b]
        mine = (row.verdict == "conflict", row.apply[0] == "failed", row.apply[1] == "failed")
        if mine != theirs:
            check.differences.append({"pair": [a, b], "ours": mine, "script": theirs})
    check.pairs = len(pairs)
    return check


def report_comparison(checks: Sequence[ScriptCheck], report: Path) -> dict[str, Any] | None:
    """The census's pairs against the dataset's `gold_conflict_report.json`, if any."""
    rows = [r for c in checks for r in c.rows if len(r.group) == 2]
    if not report.exists() or not rows:
        return None
    return compare_with_report(rows, report)
