"""The slow rule is checked: a test not marked slow that takes longer than the fast
budget fails, naming the budget; marked slow, the same test passes."""

from __future__ import annotations

import pytest

CONFTEST = ("from tests.conftest import _SPENT, pytest_addoption, pytest_runtest_makereport"
            "  # noqa: F401\n")
TESTS = """
import time
import pytest

def test_quick():
    pass

def test_drags():
    time.sleep(0.3)

@pytest.mark.slow
def test_drags_marked():
    time.sleep(0.3)
"""


def test_a_fast_test_over_budget_fails(pytester: pytest.Pytester,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CORRAL_FAST_BUDGET_S", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nfast_budget_s = 0.2\nmarkers =\n    slow: slow\n")
    pytester.makepyfile(test_made=TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_drags is not marked slow but took*over the fast "
                                 "budget of 0.2s*"])
