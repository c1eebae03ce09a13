"""docs/cooperbench.md's real-data tables of the team settings come from committed
reports: each `bench/results/cooperbench-*.json` rendered by `bench.results`'s
`cooperbench_table` is in the page as it renders, so no figure there is typed by hand."""

from __future__ import annotations

import json
from pathlib import Path

from bench.results import RESULTS, ROOT, cooperbench_table

REPORTS = sorted(RESULTS.glob("cooperbench-*.json"))


def test_every_cooperbench_report_is_in_the_page_as_it_renders() -> None:
    assert REPORTS, "no bench/results/cooperbench-*.json"
    page = (ROOT / "docs" / "cooperbench.md").read_text()
    for path in REPORTS:
        table = "\n".join(cooperbench_table(json.loads(path.read_text())))
        assert table in page, f"{path.name}: render it into docs/cooperbench.md"


def test_the_table_has_a_row_per_setting_with_its_interval_and_time(tmp_path: Path) -> None:
    report = {"rows": [{"row": "team/plain N=3", "size": 3, "counted": 4, "passed": 1,
                        "pass_rate": 0.25, "wilson95": [0.046, 0.699],
                        "merge_clean_rate": 0.5, "feature_pass_rate": 0.5, "handoffs": 2}],
              "per_task": [], "timings_median_s": {"team/plain N=3": {"total": 12.34}}}
    assert cooperbench_table(report)[2] == (
        "| team/plain | 3 | 4 | 1 | 25 % (5\u201370 %) | 50 % | 50 % | 2 | 12.3 |")
