"""Reading CooperBench's on-disk format: tasks, subsets, pair selection, the test
command of a runner.sh, and tasks this machine cannot run (fixtures written here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cooperbench import RunSpec, load_tasks, run, select_pairs
from bench.cooperbench import test_command as runner_test_command

RUNNER = """#!/bin/bash
set -e
TEST_PATH="tests/test_x.py"
TEST_PATCH="$1"
pip install -e ".[test]" || pip install -e .
pip install pytest pytest-xdist pytest_mock

# Run tests
echo "Running tests..."
python -m pytest "$TEST_PATH" -v

echo "Test execution completed!"
"""


def _task(root: Path, repo: str, n: int, features: int, docker: str) -> None:
    t = root / repo / f"task{n}"
    t.mkdir(parents=True)
    (t / "setup.sh").write_text('REPO_NAME="x"\nBASE_COMMIT="abc123"\n'
                                "git clone https://github.com/owner/x.git \"$REPO_NAME\"\n")
    (t / "runner.sh").write_text(RUNNER)
    (t / "Dockerfile").write_text(docker)
    for k in range(1, features + 1):
        f = t / f"feature{k}"
        f.mkdir()
        for name in ("feature.md", "feature.patch", "tests.patch"):
            (f / name).write_text(f"{name} {k}\n")


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "dataset"
    _task(root, "owner_x_task", 7, 4, "FROM python:3.11-slim\nRUN pip install uv\n")
    _task(root, "go_y_task", 3, 3, "FROM golang:1.22\n")
    (root / "subsets").mkdir()
    (root / "subsets" / "lite.json").write_text(json.dumps({"tasks": [
        {"repo": "owner_x_task", "task_id": 7, "pairs": [[1, 2], [3, 4]]}]}))
    return root


def test_tasks_features_and_setup_are_read(dataset: Path) -> None:
    """Each task's key, features, base commit, upstream and language come from its files."""
    tasks = load_tasks(dataset)
    assert sorted(tasks) == ["go_y_task/task3", "owner_x_task/task7"]
    t = tasks["owner_x_task/task7"]
    assert list(t.features) == [1, 2, 3, 4] and t.features[2].tests == "tests.patch 2\n"
    assert (t.base_commit, t.upstream, t.language) == ("abc123", "owner/x", "python")
    assert tasks["go_y_task/task3"].language == "go"


def test_pairs_are_chosen_by_subset_task_features_and_pairs(dataset: Path) -> None:
    """All 2-combinations by default; a subset, --task, --features and --pairs narrow it."""
    tasks = load_tasks(dataset)
    assert len(select_pairs(tasks)) == 6 + 3
    lite = select_pairs(tasks, dataset=dataset, subset="lite")
    assert [(p.task, p.ids) for p in lite] == [("owner_x_task/task7", (1, 2)),
                                                ("owner_x_task/task7", (3, 4))]
    assert len(select_pairs(tasks, task="7")) == 6
    assert [p.ids for p in select_pairs(tasks, task="owner", features="1,2,3")] == [
        (1, 2), (1, 3), (2, 3)]
    assert [p.ids for p in select_pairs(tasks, task="owner", pairs="2-4")] == [(2, 4)]
    assert len(select_pairs(tasks, pairs="2")) == 2
    with pytest.raises(ValueError):
        select_pairs(tasks, task="nothing-like-this")


def test_a_feature_with_itself_is_a_unit_only_when_listed(dataset: Path) -> None:
    """No combination repeats a feature; `--pairs 3-3` (or 3-3-3) asks for one, next
    to the usual pairs, and `--features` still narrows it."""
    tasks = load_tasks(dataset)
    assert all(len(set(p.ids)) == 2 for p in select_pairs(tasks))
    assert [p.ids for p in select_pairs(tasks, task="7", pairs="3-3,2-4")] == [(2, 4), (3, 3)]
    assert [p.ids for p in select_pairs(tasks, task="7", pairs="3-3-3")] == [(3, 3, 3)]
    assert select_pairs(tasks, task="7", pairs="3-3", features="1,2") == []
    assert select_pairs(tasks, task="7", pairs="9-9") == []  # no feature 9
    with pytest.raises(ValueError):
        select_pairs(tasks, task="nothing-like-this")


def test_the_test_command_is_the_runner_scripts_test_step() -> None:
    """The test step and the variables it uses, without the per-run installs."""
    cmd = runner_test_command(RUNNER)
    assert 'python -m pytest "$TEST_PATH" -v' in cmd and 'TEST_PATH="tests/test_x.py"' in cmd
    assert "pip install" not in cmd and cmd.startswith("set -e\n")


def test_a_task_without_its_toolchain_is_unsupported_not_failed(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Go task on a machine without go is reported `unsupported` with the reason,
    outside the pass rate."""
    monkeypatch.setenv("CORRAL_BENCH_GO", str(tmp_path / "no-go"))  # whether or not go is here
    spec = RunSpec(out=tmp_path / "out", dataset=dataset, task="go_y", settings=("coop",),
                   pairs="1-2")
    (r,) = run(spec)["results"]
    assert r.status == "unsupported" and "Go task" in r.reason and not r.counted
