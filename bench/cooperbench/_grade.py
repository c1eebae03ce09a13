"""CooperBench's grading rules (0.0.29 `test_merged` and `test_solo`) on a `Workbench`.

coop:   strip test files from both patches; agent1 = base + patch1, agent2 = base +
        patch2 (`git apply`, else `--3way`; a failure is `missing_input`); on agent2
        `git merge agent1 --no-commit --no-ff`. Clean: each feature's tests run on base
        + merged diff + its tests.patch. Conflict or missing input: both fail unless
        agent1's patch alone (the lead's) passes both suites. Byte-identical patches
        skip the merge. `union` retries a conflicted merge with `* merge=union`
        (<= 0.0.15); `corral` grades the tree Corral's merge made.
solo:   one patch, tested against each feature's tests.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ._patches import sanitize, strip_tests
from ._records import FeatureResult, MergePolicy, MergeStatus
from ._workbench import TestRun, Workbench

__all__ = ["Grade", "TestRunner", "feature_result", "grade_merged", "grade_solo"]


TestRunner = Callable[[Workbench, str | None, int], Awaitable[TestRun]]
"""(workbench, feature patch, feature id) -> the feature's test run on base + that
patch."""

_TAIL = 1500


@dataclass
class Grade:
    """A graded pair: both features' results and how the merge went."""

    features: tuple[FeatureResult, FeatureResult]
    merge_status: MergeStatus
    strategy: str
    apply: tuple[str, str] = ("", "")
    merged_diff: str = ""
    merge_seconds: float = 0.0
    test_seconds: float = 0.0
    command_seconds: float = 0.0
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(f.passed for f in self.features)


def feature_result(fid: int, run: TestRun | None, reason: str = "") -> FeatureResult:
    if run is None:
        return FeatureResult(id=fid, passed=False, reason=reason or "not tested")
    if not reason and not run.passed:
        if run.timed_out:
            reason = "test timeout"
        elif "could not apply" in run.output[-300:]:
            reason = "patch did not apply"
        elif run.tests_passed == 0 and run.exit_code == 0:
            reason = "no test passed"
        else:
            reason = f"tests failed (exit {run.exit_code}, {run.tests_failed} failed)"
    return FeatureResult(
        id=fid, passed=run.passed, exit_code=run.exit_code, tests_passed=run.tests_passed,
        tests_failed=run.tests_failed, seconds=round(run.seconds, 4), reason=reason,
        output_tail=run.output[-_TAIL:],
    )


class _Clock:
    def __init__(self, grade: Grade, run: TestRunner) -> None:
        self.grade = grade
        self._run = run

    async def test(self, bench: Workbench, patch: str | None, fid: int, label: str) -> TestRun:
        t = time.perf_counter()
        r = await self._run(bench, patch, fid)
        self.grade.test_seconds += time.perf_counter() - t
        self.grade.command_seconds += r.command_seconds
        self.grade.outputs[label] = r.output
        return r


async def grade_merged(
    bench: Workbench,
    f1: int,
    f2: int,
    patch1: str,
    patch2: str,
    run_tests: TestRunner,
    *,
    policy: MergePolicy = "plain",
    corral_diff: str | None = None,
) -> Grade:
    """Grade a coop pair by 0.0.29's rules. `corral_diff` is the diff Corral's merge
    made (None: it conflicted), used with policy "corral"."""
    p1 = strip_tests(sanitize(patch1 or ""))
    p2 = strip_tests(sanitize(patch2 or ""))
    grade = Grade((FeatureResult(id=f1, passed=False), FeatureResult(id=f2, passed=False)),
                  "none", "")
    clock = _Clock(grade, run_tests)
    t = time.perf_counter()
    if p1 and p2 and p1 == p2:
        merged = await bench.normalize(p1)
        grade.merge_seconds = time.perf_counter() - t
        grade.merge_status, grade.strategy, grade.apply = "identical", "identical", (
            "applied", "applied")
        grade.merged_diff = merged
        r1 = await clock.test(bench, merged, f1, "f1")
        r2 = await clock.test(bench, merged, f2, "f2")
        grade.features = (feature_result(f1, r1), feature_result(f2, r2))
        return grade
    m = await bench.merge(p1, p2, union=policy == "union")
    grade.apply = (m.apply1, m.apply2)
    if "failed" in (m.apply1, m.apply2):
        status: MergeStatus = "missing_input"
    elif policy == "corral":
        status = "clean" if corral_diff is not None else "conflicts"
    else:
        status = "conflicts" if m.conflict else "clean"
    if policy == "union" and status != "missing_input" and m.strategy == "union":
        grade.strategy = "union"
        status = "conflicts" if m.union_conflict else "clean"
        # The merge status stays the plain merge's verdict, as CooperBench reports it.
        grade.merge_status = "conflicts"
    else:
        grade.strategy = "corral" if policy == "corral" else "naive"
        grade.merge_status = status
    grade.merge_seconds = time.perf_counter() - t
    if status == "clean":
        merged = strip_tests(sanitize(corral_diff)) if policy == "corral" and corral_diff \
            else (m.diff if policy != "corral" else "")
        grade.merged_diff = merged
        r1 = await clock.test(bench, merged, f1, "f1")
        r2 = await clock.test(bench, merged, f2, "f2")
        grade.features = (feature_result(f1, r1), feature_result(f2, r2))
        return grade
    why = {"missing_input": "a patch did not apply", "conflicts": "merge conflict"}[status]
    if policy == "union" and m.union_conflict:
        why = "merge conflict (also with merge=union)"
    results = [feature_result(f1, None, why), feature_result(f2, None, why)]
    if m.apply1 == "applied":
        # The lead fallback: agent1's patch alone, against both suites.
        s1 = await clock.test(bench, p1, f1, "lead-f1")
        if s1.passed:
            s2 = await clock.test(bench, p1, f2, "lead-f2")
            if s2.passed:
                results = [feature_result(f1, s1), feature_result(f2, s2)]
                grade.strategy = "solo-agent1"
    grade.features = (results[0], results[1])
    return grade


async def grade_solo(bench: Workbench, f1: int, f2: int, patch: str, run_tests: TestRunner
                     ) -> Grade:
    """Grade a solo patch: tested against each feature's tests."""
    p = strip_tests(sanitize(patch or ""))
    grade = Grade((FeatureResult(id=f1, passed=False), FeatureResult(id=f2, passed=False)),
                  "solo", "solo")
    clock = _Clock(grade, run_tests)
    r1 = await clock.test(bench, p, f1, "f1")
    r2 = await clock.test(bench, p, f2, "f2")
    grade.features = (feature_result(f1, r1), feature_result(f2, r2))
    grade.merged_diff = p
    return grade
