"""The report's statistics: pass rates without errors, Wilson intervals, McNemar."""

from __future__ import annotations

import pytest

from bench.cooperbench._records import FeatureResult, PairResult
from bench.cooperbench._report import mcnemar, summarize, wilson


def test_pass_rate_excludes_errors_and_the_statistics_are_right() -> None:
    """pass_rate = passed / (passed + failed); errors are counted apart. Wilson and
    McNemar match known values."""
    def r(status: str, f1: int) -> PairResult:
        feats = (FeatureResult(id=f1, passed=status == "passed"),
                 FeatureResult(id=9, passed=status == "passed"))
        return PairResult(task="t", group=(f1, 9), setting="coop", merge="plain", agent="oracle",
                          status=status, features=feats if status != "error" else ())  # type: ignore[arg-type]

    s = summarize([r("passed", 1), r("failed", 2), r("error", 3), r("error", 4)])
    row = s["rows"][0]
    assert (row["passed"], row["counted"], row["errors"], row["pass_rate"]) == (1, 2, 2, 0.5)
    lo, hi = wilson(1, 2)
    assert round(lo, 4) == 0.0945 and round(hi, 4) == 0.9055
    assert wilson(0, 0) == (0.0, 0.0)
    assert mcnemar(0, 5) == pytest.approx(0.0625) and mcnemar(3, 3) == 1.0


def test_an_agent_that_handed_off_is_not_an_empty_patch() -> None:
    """A unit whose empty patch came from a handoff's giver is counted apart: the
    empty-patch count and its report line hold only agents that returned nothing."""
    from bench.cooperbench._report import to_markdown

    def r(f1: int, empty: tuple[int, ...], handed_off: tuple[int, ...]) -> PairResult:
        return PairResult(task="t", group=(f1, 9), setting="supervised", merge="plain",
                          agent="oracle", status="passed", empty=empty, handed_off=handed_off,
                          features=(FeatureResult(id=f1, passed=True),
                                    FeatureResult(id=9, passed=True)))

    s = summarize([r(1, (), (1,)), r(2, (2,), ()), r(3, (), ())])
    row = s["rows"][0]
    assert (row["empty_patch_units"], row["handed_off_units"]) == (1, 1)
    assert "1 units with an empty agent patch (1 units with a handoff" in to_markdown(s)
