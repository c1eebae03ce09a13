"""`corral bench cro`: suffix replays against full re-runs of recorded scripted runs, and
its table on the results page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench import cro as cro_bench
from bench import results


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_the_suffix_replays_agree_with_full_reruns_on_fewer_tokens(tmp_path: Path) -> None:
    """Two runs of 6 steps, a note at step 4: each replay starts at step 4, both kinds
    of replay pass (the recorded runs answered 0), the suffixes spend fewer live tokens,
    and the results page shows both rows and the agreement."""
    from coordinator.cli import app

    done = CliRunner().invoke(app, ["bench", "cro", "--runs", "2", "--steps", "6", "--at",
                                    "4", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert [r["step"] for r in report["per_run"]] == [4, 4]
    assert (report["agree"], report["compared"]) == (2, 2)
    assert report["suffix"]["mean_reward"] == report["full"]["mean_reward"] == 1.0
    assert 0 < report["suffix"]["tokens"] < report["full"]["tokens"]
    assert report["token_share"] < 1
    assert cro_bench.render(report).row_count == 3
    out = tmp_path / "cro.json"
    out.write_text(json.dumps(report))
    page = results.render([out])
    assert f"| full re-run | {report['full']['tokens']} |" in page
    assert "| suffix / full |" in page and "2 of 2 runs agree" in page


def test_a_note_outside_the_run_is_refused() -> None:
    from coordinator.cli import app

    done = CliRunner().invoke(app, ["bench", "cro", "--steps", "5", "--at", "6"])
    assert done.exit_code == 2 and "within the run's 5 steps" in done.output
    with pytest.raises(ValueError):
        cro_bench.run(steps=5, at=6)
