"""The rollouts benchmark: runs end to end on a small run and reports what it measured."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from bench import rollouts as bench_rollouts

pytestmark = pytest.mark.slow  # a recorded run and siblings against the model server


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_rollouts_bench_times_siblings_and_suffixes() -> None:
    """A pair's siblings are timed; a sibling forked before step 1 re-runs every step, a
    later one only the suffix, for fewer tokens; the table renders."""
    report = bench_rollouts.run(history=2, runs=3, steps=5, at=(1, 4), backend="copy",
                                ray_siblings=0)
    s = report["siblings"]
    assert s["runs"] == 3 and s["median_ms"] > 0 and s["backend"] == "copy"
    rec = report["suffix"]["recorded"]
    assert (rec["status"], rec["steps"]) == ("finished", 5)
    full, late = report["suffix"]["rows"]
    assert (full["live_steps"], full["served_steps"], full["token_share"]) == (5, 0, 1.0)
    assert (late["live_steps"], late["served_steps"]) == (2, 3)
    assert 0 < late["live_tokens"] < full["live_tokens"]
    assert bench_rollouts.render(report).row_count == 2 + len(report["suffix"]["rows"])


def test_rollouts_bench_counts_siblings_per_second_on_ray() -> None:
    """With Ray, K siblings are grown on a local cluster of 2 workers and in process; both
    rates are positive and the table has the Ray row."""
    pytest.importorskip("ray")
    import ray

    try:
        report = bench_rollouts.run(history=1, runs=1, steps=3, at=(1,), backend="copy",
                                    ray_siblings=2)
    finally:
        ray.shutdown()
    r = report["ray"]
    assert (r["workers"], r["siblings"]) == (2, 2)
    assert r["ray_per_second"] > 0 and r["local_per_second"] > 0
    assert bench_rollouts.render(report).row_count == 3 + len(report["suffix"]["rows"])


def test_the_command_writes_json(tmp_path: object) -> None:
    """`corral bench rollouts --json` prints the report."""
    import json

    from coordinator.cli import app

    done = CliRunner().invoke(app, ["bench", "rollouts", "--runs", "2", "--steps", "3",
                                    "--at", "1,2", "--history", "1", "--backend", "copy",
                                    "--ray-siblings", "0", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["benchmark"] == "rollouts"


def test_only_siblings_runs_the_pair_alone() -> None:
    """`--only siblings` times the pair's siblings and leaves the other parts null (the
    table has the one row); an unknown part is refused before any work."""
    import json

    from coordinator.cli import app

    done = CliRunner().invoke(app, ["bench", "rollouts", "--runs", "3", "--history", "1",
                                    "--backend", "copy", "--only", "siblings", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["siblings"]["runs"] == 3
    assert (report["suffix"], report["ray"]) == (None, None)
    assert bench_rollouts.render(report).row_count == 1
    refused = CliRunner().invoke(app, ["bench", "rollouts", "--only", "siblings,cro"])
    assert refused.exit_code == 2 and "no part cro" in refused.output
