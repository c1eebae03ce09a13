"""`corral bench cooperbench check`: 0.0.29's gradeability rule (fails on base, passes
with its gold patch), run for real in the task's environment on the mini suite and on
a copy of one of its tasks with two features broken on purpose."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cooperbench._dataset import load_tasks, mini_suite
from bench.cooperbench._gradeable import check_task, gradeable_features
from bench.cooperbench._spec import RunSpec

pytestmark = pytest.mark.slow  # builds a task environment and runs its tests

TRIVIAL_TESTS = """\
diff --git a/tests/test_trivial.py b/tests/test_trivial.py
new file mode 100644
--- /dev/null
+++ b/tests/test_trivial.py
@@ -0,0 +1,2 @@
+def test_nothing_to_do():
+    assert True
"""


def _broken_copy(tmp_path: Path) -> Path:
    """textkit with feature 2's gold patch emptied (it cannot pass) and feature 3's
    tests replaced by one that passes on the base."""
    src = mini_suite() / "dataset" / "mini_textkit_task"
    dst = tmp_path / "dataset" / "mini_textkit_task"
    shutil.copytree(src, dst)
    (dst / "task1" / "feature2" / "feature.patch").write_text("")
    (dst / "task1" / "feature3" / "tests.patch").write_text(TRIVIAL_TESTS)
    return tmp_path / "dataset"


async def test_check_finds_the_features_that_break_the_rule(tmp_path: Path):
    [task] = load_tasks(_broken_copy(tmp_path)).values()
    # dataset None: the mini suite's offline environment and bundled repositories
    spec = RunSpec(out=tmp_path / "out", backend="copy")
    checks = await check_task(task, spec)
    got = {c.feature: (c.gradeable, c.why) for c in checks}
    assert got == {1: (True, ""), 2: (False, "fails with its gold patch"),
                   3: (False, "passes on the base"), 4: (True, ""), 5: (True, "")}
    assert gradeable_features(checks) == {task.key: {1, 4, 5}}
    one = checks[0].as_dict()
    assert one["base"]["passed"] is False and one["gold"]["passed"] is True  # type: ignore[index]


def test_the_command_lists_every_mini_feature_as_gradeable(tmp_path: Path):
    out = tmp_path / "check.json"
    r = subprocess.run([sys.executable, "-m", "coordinator.cli", "bench", "cooperbench", "check",
                        "--task", "textkit,shapes", "--env-cache", str(tmp_path / "cache"),
                        "-o", str(out)], capture_output=True, text=True, timeout=600,
                       cwd=Path(__file__).parents[2])
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    assert report["totals"] == {"features": 10, "gradeable": 10, "not_gradeable": 0, "error": 0}
    assert "mini_textkit_task/task1" in r.stdout and "10 of 10 features are gradeable" in r.stdout
