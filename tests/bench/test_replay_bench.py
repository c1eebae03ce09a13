"""The replay benchmark: runs end to end on a small task and reports what it measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import replay_cache as bench_replay

pytestmark = pytest.mark.slow  # a benchmark run against the model server


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_replay_bench_reports_divergence_savings_and_cache_reuse(tmp_path: Path) -> None:
    """Each replay diverges at the step given, saves the served steps' tokens, and its live
    suffix reads most of its prompt from the server's emulated cache; --json writes it."""
    out = tmp_path / "r.json"
    report = bench_replay.run(diverge=(3,), functions=30, edits=3)
    assert [res["api"] for res in report["apis"]] == ["openai", "anthropic"]
    for res in report["apis"]:
        (r,) = res["replays"]
        assert (r["diverged_at"], r["served"], r["status"]) == (3, 2, "finished")
        assert r["tokens_saved"] > 0 and r["live_calls"] == res["steps"] - 2
        assert 0.5 < r["cache_reuse"] <= 1.0
    assert report["cache_reuse"] > 0.5
    out.write_text(json.dumps(report))
    assert "reuse" in str(bench_replay.render(report).columns[-1].header)
