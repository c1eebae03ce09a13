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
