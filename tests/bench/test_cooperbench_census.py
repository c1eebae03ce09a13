"""The gold-conflict census (`corral bench cooperbench conflicts`): CooperBench's
`scripts/check_gold_conflicts.py` rule, folded for groups. For pairs it must give the
script's own verdicts: the script's filter and merge steps are read from its source (a
local mirror of cooperbench/CooperBench) and run here with stock git, and on the real
dataset the census must give `gold_conflict_report.json`'s verdicts."""

from __future__ import annotations

import ast
import json
import os
import subprocess
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from bench.cooperbench import GoldFold, Group, load_tasks, mini_suite
from bench.cooperbench._census import census_task, compare_with_report, script_filter
from bench.cooperbench._dataset import Task
from bench.cooperbench._repos import _GIT_ENV, base_repo, git

MIRRORS = Path(os.environ.get("CORRAL_COOPERBENCH_MIRRORS", "/work/.mirror"))
DATASET = Path(os.environ.get("CORRAL_COOPERBENCH_DATASET", "/work/cb-data/dataset"))
_SCRIPT_REPO = MIRRORS / "cooperbench+CooperBench" / "repo"


def _script_source() -> str | None:
    if not _SCRIPT_REPO.exists():
        return None
    r = subprocess.run(["git", "--git-dir", str(_SCRIPT_REPO), "show",
                        "main:scripts/check_gold_conflicts.py"], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


SCRIPT = _script_source()
needs_script = pytest.mark.skipif(SCRIPT is None, reason=f"no mirror of cooperbench/CooperBench "
                                  f"at {_SCRIPT_REPO} (CORRAL_COOPERBENCH_MIRRORS)")


class PairScript:
    """The pair script's own `filter_test_files` and the shell steps of its
    `check_one_pair` (its `merge_script`), taken from its source, run on a checkout."""

    def __init__(self, source: str) -> None:
        tree = ast.parse(source)
        funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        namespace: dict[str, Any] = {}
        exec(compile(ast.Module([funcs["filter_test_files"]], []), "script", "exec"),
             namespace)
        self.filter = namespace["filter_test_files"]
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


def _census(task: Task, repo: Path, work: Path, groups: list[tuple[int, ...]],
            pairwise: bool = False) -> dict[tuple[int, ...], Any]:
    fold = GoldFold.create(work, repo, git(repo, "rev-parse", "HEAD").stdout.strip())
    rows = census_task(fold, task, [Group(task.key, g) for g in groups], pairwise)
    return {r.group: r for r in rows}


def _mini(lib: str, cache: Path) -> tuple[Task, Path]:
    task = load_tasks(mini_suite() / "dataset")[f"mini_{lib}_task/task1"]
    return task, base_repo(task, mini_suite() / "repos", cache)


def _agrees(script: PairScript, task: Task, repo: Path, tmp: Path,
            pairs: list[tuple[int, ...]]) -> None:
    ours = _census(task, repo, tmp / "census", pairs)
    for a, b in pairs:
        theirs = script.run(repo, tmp / f"script-{a}-{b}", a, b, task.features[a].patch,
                            task.features[b].patch)
        row = ours[a, b]
        assert (row.verdict == "conflict", row.apply[0] == "failed",
                row.apply[1] == "failed") == theirs, (task.key, a, b)


@needs_script
def test_the_filter_is_the_scripts(tmp_path: Path) -> None:
    """`script_filter` drops what the script's `filter_test_files` drops, on patches of
    test and non-test paths alike."""
    assert SCRIPT is not None
    theirs = PairScript(SCRIPT).filter
    diff = "".join(f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n"
                   for p in ("src/x.py", "tests/test_x.py", "src/test_y.py", "pkg/a_test.py",
                             "test/z.go", "src/tests.py", "spec/x_spec.rb", "src/y.py"))
    for patch in (diff, diff.rstrip("\n"), "", "diff --git a/x b/x\n"):
        assert script_filter(patch) == theirs(patch)
    assert "src/x.py" in script_filter(diff) and "spec/x_spec.rb" in script_filter(diff)
    assert "tests/test_x.py" not in script_filter(diff)


@needs_script
def test_for_pairs_the_census_gives_the_scripts_verdicts(tmp_path: Path) -> None:
    """On textkit's pairs (1-2 rewrite one function, 3-4 one import block, the others
    merge) the census's verdicts and failed applies are those of the script's own
    steps (every pair of the mini suite: the slow test below)."""
    assert SCRIPT is not None
    task, repo = _mini("textkit", tmp_path / "cache")
    pairs = [(1, 2), (1, 3), (2, 5), (3, 4), (4, 5)]
    _agrees(PairScript(SCRIPT), task, repo, tmp_path, pairs)
    assert [p for p, r in _census(task, repo, tmp_path / "c2", pairs).items()
            if r.verdict == "conflict"] == [(1, 2), (3, 4)]


@pytest.mark.slow
@needs_script
@pytest.mark.parametrize("lib", ["textkit", "invoice", "kvstore", "shapes"])
def test_for_every_mini_pair_the_census_gives_the_scripts_verdicts(lib: str,
                                                                   tmp_path: Path) -> None:
    assert SCRIPT is not None
    task, repo = _mini(lib, tmp_path / "cache")
    _agrees(PairScript(SCRIPT), task, repo, tmp_path, list(combinations(task.features, 2)))


def test_a_group_conflicts_at_the_fold_step_that_does(tmp_path: Path) -> None:
    """Groups fold in agent order: textkit 1-2-3 conflicts at step 2 (agent 1 into agent
    2), 1-3-4 at step 3 (agent 3 into the fold), and 3-1-4 at step 3 too (3 and 4 meet
    there), 1-4-5 and kvstore 1-3-4-5 merge; union merges every conflict; a group's
    pairs are checked by the pair rule."""
    task, repo = _mini("textkit", tmp_path / "cache")
    rows = _census(task, repo, tmp_path / "t", [(1, 2, 3), (1, 3, 4), (3, 1, 4), (1, 4, 5)],
                   pairwise=True)
    assert {g: (r.verdict, r.step, r.union, r.pair_conflict) for g, r in rows.items()} == {
        (1, 2, 3): ("conflict", 2, "clean", True), (1, 3, 4): ("conflict", 3, "clean", True),
        (3, 1, 4): ("conflict", 3, "clean", True), (1, 4, 5): ("clean", None, "", False)}
    assert all(r.apply == ("applied",) * 3 for r in rows.values())
    kv, kv_repo = _mini("kvstore", tmp_path / "cache")
    (row,) = _census(kv, kv_repo, tmp_path / "k", [(1, 3, 4, 5)]).values()
    assert (row.verdict, row.step, row.apply) == ("clean", None, ("applied",) * 4)


_REAL = ["samuelcolvin_dirty_equals_task/task43", "pallets_click_task/task2068",
         "pallets_click_task/task2800", "pallets_click_task/task2956"]


@pytest.mark.slow
@pytest.mark.skipif(not (DATASET / "gold_conflict_report.json").exists() or not (
    MIRRORS / "pallets+click").exists(), reason=f"no CooperBench dataset at {DATASET} or no "
                    f"upstream mirrors at {MIRRORS}")
def test_for_real_pairs_the_census_gives_the_reports_verdicts(tmp_path: Path) -> None:
    """dirty-equals task43 and the three click tasks: all 151 pairs as in
    `gold_conflict_report.json`, which the script made."""
    tasks = load_tasks(DATASET)
    rows = []
    for key in _REAL:
        task = tasks[key]
        repo = base_repo(task, MIRRORS, tmp_path / "cache")
        pairs = list(combinations(task.features, 2))
        rows.extend(_census(task, repo, tmp_path / key.replace("/", "-"), pairs).values())
    cmp = compare_with_report(rows, DATASET / "gold_conflict_report.json")
    assert cmp == {"compared": 151, "differences": []}
    assert json.loads((DATASET / "gold_conflict_report.json").read_text())["summary"][
        "total_pairs"] >= 151
