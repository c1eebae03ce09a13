"""Patch text: CooperBench 0.0.29's test-file stripping."""

from __future__ import annotations

from bench.cooperbench import strip_tests


def test_strip_tests_drops_test_files_of_every_language() -> None:
    """Test files (tests?/ dirs, test_*, *_test.*, *.test.*, tests.py) leave the patch;
    source files whose names merely contain 'test' stay."""
    sections = ["tests/test_a.py", "pkg/foo_test.go", "web/a.test.ts", "app/tests.py",
                "src/test_util.py", "pkg/core.py", "pkg/latest.py", "contest/x.py"]
    patch = "".join(f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n"
                    for p in sections)
    kept = [ln.split(" b/")[1] for ln in strip_tests(patch).splitlines()
            if ln.startswith("diff --git")]
    assert kept == ["pkg/core.py", "pkg/latest.py", "contest/x.py"]
