"""The gold-conflict census (`corral bench cooperbench conflicts`): CooperBench's
`scripts/check_gold_conflicts.py` rule, folded for groups; and its check against the
script (`corral bench cooperbench census`, `_census_check`), which reads the script's
filter and merge steps from its source and runs them with stock git. Here the script is
a stand-in written for the suite (`_gold_script`, the same rule; a broken variant the
check must catch); the check against the real script and `gold_conflict_report.json`
on the real dataset is the bench command (docs/cooperbench.md, "The census checked")."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from bench.cooperbench import GoldFold, Group, load_tasks, mini_suite
from bench.cooperbench._census import census_task, script_filter
from bench.cooperbench._census_check import PairScript, check_task, script_source
from bench.cooperbench._cli import main as cli_main
from bench.cooperbench._dataset import Task
from bench.cooperbench._repos import base_repo, git
from tests.bench._gold_script import script_repo


def _script(tmp: Path, verdict: str = "clean") -> PairScript:
    """The stand-in script (`tests/bench/_gold_script.py`) as the census command reads
    it: from a git repository, at main."""
    return PairScript(script_source(script_repo(tmp / f"script-repo-{verdict}", verdict=verdict)))


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


def test_the_filter_is_the_scripts(tmp_path: Path) -> None:
    """`script_filter` drops what the script's `filter_test_files` drops, on patches of
    test and non-test paths alike (the function read out of the script's source)."""
    theirs = _script(tmp_path).filter
    diff = "".join(f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n"
                   for p in ("src/x.py", "tests/test_x.py", "src/test_y.py", "pkg/a_test.py",
                             "test/z.go", "src/tests.py", "spec/x_spec.rb", "src/y.py"))
    for patch in (diff, diff.rstrip("\n"), "", "diff --git a/x b/x\n"):
        assert script_filter(patch) == theirs(patch)
    assert "src/x.py" in script_filter(diff) and "spec/x_spec.rb" in script_filter(diff)
    assert "tests/test_x.py" not in script_filter(diff)


@pytest.mark.slow
def test_for_pairs_the_census_gives_the_scripts_verdicts(tmp_path: Path) -> None:
    """On textkit's pairs (1-2 rewrite one function, 3-4 one import block, the others
    merge) the census's verdicts and failed applies are those of the script's own
    steps (every pair of the mini suite: the slow test below)."""
    task, repo = _mini("textkit", tmp_path / "cache")
    pairs = [(1, 2), (1, 3), (2, 5), (3, 4), (4, 5)]
    _agrees(_script(tmp_path), task, repo, tmp_path, pairs)
    assert [p for p, r in _census(task, repo, tmp_path / "c2", pairs).items()
            if r.verdict == "conflict"] == [(1, 2), (3, 4)]


@pytest.mark.slow
@pytest.mark.parametrize("lib", ["textkit", "invoice", "kvstore", "shapes"])
def test_for_every_mini_pair_the_census_gives_the_scripts_verdicts(lib: str,
                                                                   tmp_path: Path) -> None:
    task, repo = _mini(lib, tmp_path / "cache")
    _agrees(_script(tmp_path), task, repo, tmp_path, list(combinations(task.features, 2)))


@pytest.mark.slow
def test_the_check_finds_a_script_that_disagrees(tmp_path: Path) -> None:
    """`check_task` on textkit 1-3 and 1-2: with the script's rule no pair differs;
    with a script that calls every merge a conflict, the clean pair 1-3 differs (and
    only it), so the check can fail."""
    task, repo = _mini("textkit", tmp_path / "cache")
    groups = [Group(task.key, (1, 3)), Group(task.key, (1, 2))]
    good = check_task(_script(tmp_path), task, repo, tmp_path / "good", groups)
    assert good.pairs == 2 and good.differences == [] and good.filter_differences == []
    bad = check_task(_script(tmp_path, "conflict"), task, repo, tmp_path / "bad", groups)
    assert [d["pair"] for d in bad.differences] == [[1, 3]]


@pytest.mark.slow
def test_the_census_command_checks_a_group_by_its_pairs(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """`corral bench cooperbench census --group-size 3` on textkit 1-2-3: the fold
    conflicts, the script's steps run on its three pairs and agree (exit 0); against
    the broken script it exits 1."""
    repo = script_repo(tmp_path / "s")
    args = ["census", "--task", "textkit", "--pairs", "1-2-3", "--group-size", "3",
            "--script-repo", str(repo), "--env-cache", str(tmp_path / "cache"), "--json"]
    with pytest.raises(SystemExit) as done:
        cli_main(args)
    assert done.value.code == 0
    data = json.loads(capsys.readouterr().out)
    (t,) = data["tasks"]
    assert t["script_pairs"] == 3 and t["differences"] == []
    assert [g["verdict"] for g in t["groups"]] == ["conflict"]
    broken = script_repo(tmp_path / "b", verdict="conflict")
    args[args.index(str(repo))] = str(broken)
    with pytest.raises(SystemExit) as exit_:
        cli_main(args)
    assert exit_.value.code == 1


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
