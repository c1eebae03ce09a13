"""Groups of N features: which units a run selects (every N-combination, spread under a
cap, a subset's groups), results of format 1 read as pairs, and the report by setting
and group size."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest

from bench.cooperbench import PairResult, load_tasks, mini_suite, select_groups
from bench.cooperbench._dataset import spread
from bench.cooperbench._records import FeatureResult
from bench.cooperbench._report import summarize


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "dataset"
    for name, n in (("owner_x_task", 5), ("owner_y_task", 3)):
        t = root / name / "task1"
        for k in range(1, n + 1):
            (t / f"feature{k}").mkdir(parents=True)
            for f in ("feature.md", "feature.patch", "tests.patch"):
                (t / f"feature{k}" / f).write_text(f"{f} {k}\n")
        (t / "setup.sh").write_text('REPO_NAME="x"\nBASE_COMMIT="abc"\n')
    (root / "subsets").mkdir()
    (root / "subsets" / "team3_x.json").write_text(json.dumps({"tasks": [
        {"repo": "owner_x_task", "task_id": 1, "groups": [[3, 1, 2], [2, 4, 5], [1, 5]]},
        {"repo": "owner_y_task", "task_id": 1, "features": [1, 2, 3]}]}))
    return root


def test_every_n_combination_of_each_tasks_features(dataset: Path) -> None:
    """--group-size N: every N-combination of each task's features, in feature order."""
    tasks = load_tasks(dataset)
    three = select_groups(tasks, group_size=3)
    assert [(g.task, g.ids) for g in three if g.task.startswith("owner_x")] == [
        ("owner_x_task/task1", c) for c in combinations(range(1, 6), 3)]
    assert [g.ids for g in three if g.task.startswith("owner_y")] == [(1, 2, 3)]
    assert len(select_groups(tasks, group_size=4)) == 5  # owner_y has only 3 features
    assert [g.ids for g in select_groups(tasks)] == [g.ids for g in select_groups(
        tasks, group_size=2)]
    assert three[0].label == "1-2-3" and three[0].key == "owner_x_task/task1:1-2-3"
    with pytest.raises(ValueError, match="at least 2"):
        select_groups(tasks, group_size=1)


def test_the_groups_cap_spreads_its_choice_deterministically(dataset: Path) -> None:
    """--groups K keeps K of a task's combinations, evenly spaced over them (the same
    every run), not the first K, which would all hold feature 1."""
    tasks = load_tasks(dataset)
    capped = select_groups(tasks, task="owner_x", group_size=3, groups=4)
    every = list(combinations(range(1, 6), 3))
    assert [g.ids for g in capped] == [every[0], every[2], every[5], every[7]]
    assert capped == select_groups(tasks, task="owner_x", group_size=3, groups=4)
    assert {1, 2, 3, 4, 5} == {f for g in capped for f in g.ids}
    assert spread([(1, 2)], 5) == [(1, 2)] and spread([(1, 2), (1, 3)], 0) == []


def test_a_subset_lists_groups_per_unit_in_agent_order(dataset: Path) -> None:
    """A subset's `groups` are units as listed (agent k gets the k-th feature); with
    --group-size only those of that size; its `features` give every combination."""
    tasks = load_tasks(dataset)
    all_listed = select_groups(tasks, dataset=dataset, subset="team3_x")
    assert [(g.task[:7], g.ids) for g in all_listed] == [
        ("owner_x", (1, 5)), ("owner_x", (2, 4, 5)), ("owner_x", (3, 1, 2)),
        ("owner_y", (1, 2)), ("owner_y", (1, 3)), ("owner_y", (2, 3))]
    three = select_groups(tasks, dataset=dataset, subset="team3_x", group_size=3)
    assert [g.ids for g in three] == [(2, 4, 5), (3, 1, 2), (1, 2, 3)]


def test_features_and_pairs_narrow_groups(dataset: Path) -> None:
    """--features keeps groups among the given features; --pairs takes groups as 1-2-3."""
    tasks = load_tasks(dataset)
    among = select_groups(tasks, task="owner_x", group_size=3, features="1,2,3,4")
    assert [g.ids for g in among] == list(combinations(range(1, 5), 3))
    picked = select_groups(tasks, task="owner_x", group_size=3, pairs="2-3-5,1-2-3")
    assert [g.ids for g in picked] == [(1, 2, 3), (2, 3, 5)]


def test_the_mini_suite_lists_three_and_four_feature_groups() -> None:
    """The bundled subset `groups` holds groups of 3 and of 4 of the mini suite's
    features, each a real combination of its task's features."""
    ds = mini_suite() / "dataset"
    tasks = load_tasks(ds)
    groups = select_groups(tasks, dataset=ds, subset="groups")
    sizes = {g.size for g in groups}
    assert sizes == {3, 4}
    for g in groups:
        assert set(g.ids) <= set(tasks[g.task].features)


def test_a_format_1_result_reads_as_a_pair() -> None:
    """A results.jsonl line of format 1 (f1, f2) reads back as the group (f1, f2)."""
    line = json.dumps({"kind": "cooperbench.pair", "version": 1, "task": "t", "f1": 3,
                       "f2": 5, "setting": "coop", "merge": "plain", "agent": "oracle",
                       "status": "passed", "apply": ["applied", "applied"]})
    r = PairResult.model_validate_json(line)
    assert (r.group, r.size, r.label, r.version) == ((3, 5), 2, "3-5", 1)
    again = PairResult.model_validate_json(r.model_dump_json())
    assert again == r and "f1" not in json.loads(r.model_dump_json())


def _result(group: tuple[int, ...], setting: str, passed: bool, merge: str = "plain"
            ) -> PairResult:
    return PairResult(task="t", group=group, setting=setting,  # type: ignore[arg-type]
                      merge="-" if setting == "solo" else merge,  # type: ignore[arg-type]
                      agent="oracle", status="passed" if passed else "failed",
                      features=tuple(FeatureResult(id=f, passed=passed) for f in group))


def test_the_report_is_by_setting_and_group_size() -> None:
    """Rows per setting and size (`coop/plain`, `coop/plain N=3`); retention is against
    solo of the same size; McNemar compares rows of one size on the units both ran."""
    results = [
        _result((1, 2), "solo", True), _result((1, 2), "coop", False),
        _result((1, 3), "solo", True), _result((1, 3), "coop", True),
        _result((1, 2, 3), "solo", True), _result((1, 2, 3), "coop", True),
        _result((1, 2, 4), "solo", False), _result((1, 2, 4), "coop", True),
        _result((2, 3, 4), "solo", True), _result((2, 3, 4), "coop", True),
        _result((2, 3, 4), "supervised", False),
    ]
    s = summarize(results)
    rows = {r["row"]: r for r in s["rows"]}
    assert list(rows) == ["solo", "coop/plain", "solo N=3", "coop/plain N=3",
                          "supervised/plain N=3"]
    assert (rows["coop/plain"]["size"], rows["coop/plain N=3"]["size"]) == (2, 3)
    assert (rows["coop/plain"]["passed"], rows["coop/plain N=3"]["passed"]) == (1, 3)
    retention = {r["row"]: r["retention"] for r in s["retention"]}
    assert retention["coop/plain"] == 0.5
    assert retention["coop/plain N=3"] == pytest.approx(1.5, abs=1e-3)  # (3/3) / (2/3)
    assert retention["supervised/plain N=3"] == 0.0
    tests = {(m["a"], m["b"]): m for m in s["mcnemar"]}
    assert set(tests) == {("solo", "coop/plain"), ("solo N=3", "coop/plain N=3"),
                          ("solo N=3", "supervised/plain N=3"),
                          ("coop/plain N=3", "supervised/plain N=3")}
    assert (tests["solo N=3", "coop/plain N=3"]["only_a"],
            tests["solo N=3", "coop/plain N=3"]["only_b"]) == (0, 1)
    assert tests["solo N=3", "supervised/plain N=3"]["pairs"] == 1
