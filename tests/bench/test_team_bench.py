"""`corral bench team`: cuts and team forks timed on a real coordinator."""

from __future__ import annotations

import pytest

from bench import team


def test_the_report_times_cuts_and_team_forks_at_each_history_length():
    report = team.run(scopes=4, team=2, history=(1, 4), runs=3, backend="copy")
    assert report["targets"] == {"cut_p50_ms": team.CUT_TARGET_MS,
                                 "fork_team_p50_ms": team.FORK_TEAM_TARGET_MS}
    assert [r["history"] for r in report["rows"]] == [1, 4]
    for row in report["rows"]:
        assert row["scopes"] == 4 and row["team"] == 2 and row["backend"] == "copy"
        for op in ("cut", "fork_team"):
            assert row[op]["runs"] == 3 and 0 < row[op]["median_ms"] <= row[op]["p90_ms"]
    assert team.render(report).row_count == 2


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="team <= scopes"):
        team.run(scopes=2, team=3)


def test_substrate_carries_the_team_rows_and_the_results_page_shows_them(tmp_path):
    """The issue's targets live in `corral bench substrate --json`: its report has the
    team rows (a cut of 64 live scopes, fork_team of 8), and the results page lists
    them against their targets."""
    import json
    import subprocess
    import sys

    from bench import results

    out = tmp_path / "substrate.json"
    r = subprocess.run([sys.executable, "-m", "coordinator.cli", "bench", "substrate",
                        "--sizes", "", "--team-history", "1", "--runs", "2", "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "team: consistent cuts" in r.stdout + r.stderr
    report = json.loads(out.read_text())
    [row] = report["team"]["rows"]
    assert (row["history"], row["scopes"], row["team"]) == (1, 64, 8)
    assert row["cut"]["runs"] == 2 and row["fork_team"]["median_ms"] > 0
    page = results.render([out])
    assert f"| cut | 1 | 64 | {row['cut']['median_ms']} |" in page
    assert f"| fork_team | 1 | 8 | {row['fork_team']['median_ms']} |" in page
