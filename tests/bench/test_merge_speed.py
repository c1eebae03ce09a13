"""The merge timing benchmark: a median per case and strategy, as JSON."""

from __future__ import annotations

import json

from bench import merge_speed


def test_merge_speed_reports_every_strategy_for_each_case(capsys):
    assert merge_speed.main(["--runs", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["runs"] == 1
    assert set(report["cases"]) == set(merge_speed.CASES)
    for row in report["cases"].values():
        for strategy in merge_speed.STRATEGIES:
            timing = row[strategy]
            assert 0 < timing["min_ms"] <= timing["median_ms"] <= timing["max_ms"]
