"""What every workbench shares: reading test counts from test output."""

from __future__ import annotations

from bench.cooperbench._workbench import parse_results


def test_parse_results_reads_pytest_jest_go_and_cargo() -> None:
    """Passed/failed counts come from each framework's summary, as 0.0.29 reads them."""
    assert parse_results("==== 3 passed, 1 failed, 2 errors in 0.1s ====") == (3, 3)
    assert parse_results("Tests:       2 failed, 15 passed, 17 total") == (15, 2)
    assert parse_results("--- PASS: TestA\n--- PASS: TestB\n--- FAIL: TestC\n") == (2, 1)
    assert parse_results("ok  \tgithub.com/x/y\t0.1s\n") == (1, 0)
    assert parse_results("FAIL\tgithub.com/x/y [build failed]\nok  \tgithub.com/x/z\n") == (0, 1)
    assert parse_results("test result: ok. 7 passed; 0 failed; 0 ignored") == (7, 0)
    assert parse_results("nothing here") == (0, 0)
