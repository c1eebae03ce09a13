"""`corral bench cooperbench grade --patches DIR` on the bundled mini suite: the gold
patches written out in CooperBench's published layout grade to the oracle run's
verdicts; an empty agent patch is flagged; a patch that does not apply is
missing_input; a pass whose graded tree lacks an agent's hunk says so ("code lost")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cooperbench import RunSpec, load_tasks, mini_suite, run
from bench.cooperbench._cli import main as cli_main
from bench.cooperbench._records import PairResult

pytestmark = pytest.mark.slow

PAIRS = "1-2,3-4"
TASKS = "kvstore,textkit"


def _verdict(r: PairResult) -> tuple[object, ...]:
    return (r.status, r.merge_status, r.strategy, r.apply,
            tuple((f.id, f.passed) for f in r.features))


def _results(out: Path) -> list[PairResult]:
    return [PairResult.model_validate_json(x)
            for x in (out / "results.jsonl").read_text().splitlines()]


def _grade(patches: Path, out: Path, *extra: str) -> list[PairResult]:
    with pytest.raises(SystemExit) as done:
        cli_main(["grade", "--patches", str(patches), "--out", str(out), *extra])
    assert done.value.code in (0, None)
    return _results(out)


def _write(root: Path, setting: str, task: str, ids: tuple[int, ...],
           files: dict[str, str]) -> None:
    repo, _, tid = task.partition("/task")
    d = root / setting / repo / tid / "_".join(f"f{i}" for i in ids)
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[PairResult]]:
    out = tmp_path_factory.mktemp("oracle")
    report = run(RunSpec(out=out / "run", task=TASKS, pairs=PAIRS, settings=("solo", "coop"),
                         merges=("plain", "union"), workers=2))
    return out / "run", report["results"]


def test_gold_patches_in_cooperbench_layout_grade_as_the_oracle(
        oracle_run: tuple[Path, list[PairResult]], tmp_path: Path) -> None:
    """coop: agent<a>.patch is feature a's gold patch; solo: the oracle's solo patch
    (the gold patches applied in turn). Every unit's verdict is the oracle run's."""
    run_dir, oracle = oracle_run
    tasks = load_tasks(mini_suite() / "dataset")
    given = tmp_path / "given"
    for r in oracle:
        if r.setting == "coop":
            _write(given, "coop", r.task, r.group, {
                f"agent{f}.patch": tasks[r.task].features[f].patch for f in r.group})
        else:
            _write(given, "solo", r.task, r.group,
                   {"solo.patch": (run_dir / r.patches["solo"]).read_text()})
    graded = _grade(given, tmp_path / "graded", "--merge", "plain,union")
    assert len(graded) == len(oracle) == 12
    want = {(r.task, r.group, r.setting, r.merge): _verdict(r) for r in oracle}
    got = {(r.task, r.group, r.setting, r.merge): _verdict(r) for r in graded}
    assert got == want
    assert {r.agent for r in graded} == {"given"}
    assert all(not r.empty for r in graded)
    report = json.loads((tmp_path / "graded" / "report.json").read_text())
    assert [row["row"] for row in report["rows"]] == ["solo", "coop/plain", "coop/union"]


def test_empty_and_unappliable_patches(oracle_run: tuple[Path, list[PairResult]],
                                       tmp_path: Path) -> None:
    """An empty agent patch is recorded and reported; a patch that does not apply makes
    the unit missing_input (0.0.29), its conflicting files empty."""
    tasks = load_tasks(mini_suite() / "dataset")
    key = next(k for k in tasks if "textkit" in k)
    gold = tasks[key].features
    given = tmp_path / "given"
    _write(given, "coop", key, (1, 2), {"agent1.patch": gold[1].patch, "agent2.patch": ""})
    broken = gold[4].patch.replace("\n-", "\n-not in the file ", 1)
    assert broken != gold[4].patch
    _write(given, "coop", key, (3, 4), {"agent3.patch": gold[3].patch, "agent4.patch": broken})
    out = tmp_path / "graded"
    graded = {r.group: r for r in _grade(given, out)}
    assert graded[1, 2].empty == (2,)
    assert graded[1, 2].status == "failed"
    assert graded[3, 4].merge_status == "missing_input"
    assert graded[3, 4].apply == ("applied", "failed")
    assert graded[3, 4].empty == ()
    md = (out / "report.md").read_text()
    assert "coop/plain: 1 units with an empty agent patch" in md


def test_a_pass_whose_tree_lacks_an_agents_hunk_is_flagged(tmp_path: Path) -> None:
    """kvstore 3-4 merge cleanly. Agent 1 brings both features (the oracle's solo
    patch) and a note; agent 2 feature 4 and a different note: the notes' add/add
    conflict sends the unit to the lead fallback, which passes on agent 1's patch alone,
    so agent 2's note is lost: recorded per hunk, counted as a pass with code lost. The
    lead fallback of a unit whose lead fails keeps its test counts."""
    tasks = load_tasks(mini_suite() / "dataset")
    key = next(k for k in tasks if "kvstore" in k)
    gold = tasks[key].features
    solo = run(RunSpec(out=tmp_path / "solo", task="kvstore", pairs="3-4",
                       settings=("solo",)))["results"][0]
    both = (tmp_path / "solo" / solo.patches["solo"]).read_text()

    def note(text: str) -> str:
        return ("diff --git a/NOTE.txt b/NOTE.txt\nnew file mode 100644\n--- /dev/null\n"
                f"+++ b/NOTE.txt\n@@ -0,0 +1 @@\n+{text}\n")

    given = tmp_path / "given"
    _write(given, "coop", key, (3, 4), {"agent3.patch": both + note("one"),
                                        "agent4.patch": gold[4].patch + note("two")})
    _write(given, "coop", key, (1, 2), {"agent1.patch": gold[1].patch + note("one"),
                                        "agent2.patch": gold[2].patch + note("two")})
    out = tmp_path / "graded"
    units = {r.group: r for r in _grade(given, out)}
    failed = units[1, 2]  # the lead alone fails feature 2: its counts are kept
    assert failed.status == "failed" and failed.lost is None
    assert [(f.tests_passed > 0, f.reason.split(";")[0]) for f in failed.features[:1]] == [
        (True, "merge conflict")]
    assert "lead fallback" in failed.features[1].reason
    r = units[3, 4]
    assert (r.status, r.strategy, r.merge_status) == ("passed", "solo-agent1", "conflicts")
    assert "NOTE.txt" in r.conflicts
    assert r.lost_code
    assert [(h.feature, h.path, h.why) for h in r.lost or ()] == [
        (4, "NOTE.txt", "added lines absent")]  # agent 3's tree holds the rest of gold 4
    report = json.loads((out / "report.json").read_text())
    assert report["rows"][0]["passes_code_lost"] == 1
    assert report["code_lost"][0]["group"] == [3, 4]
    assert "coop/plain: 1 passes with code lost" in (out / "report.md").read_text()
