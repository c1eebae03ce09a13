"""CooperBench 0.0.29's grading rules, each on a case built for it: real git, real
pytest runs, on a tiny repository made in a temp dir. Every case runs on both
workbenches: the stock-git `GitWorkbench` (CooperBench's container, step for step) and
`ScopeWorkbench` (what runs use: Corral scopes, tests as exec effects), which must
agree."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.cooperbench import (
    Environment,
    GitWorkbench,
    ScopeWorkbench,
    TaskState,
    grade_merged,
    grade_solo,
)
from bench.cooperbench._repos import git
from tests.bench._calc import BASE, COMMAND, calc_diff, calc_task


def _mul(repo: Path) -> str:
    return calc_diff(repo, {"calc.py": BASE["calc.py"] + "\n\ndef mul(a, b):\n    return a * b\n"})


def _div(repo: Path) -> str:
    return calc_diff(repo, {"calc.py": BASE["calc.py"] + "\n\ndef div(a, b):\n    return a / b\n"})


def _tests(repo: Path, name: str, body: str) -> str:
    return calc_diff(repo, {"tests/test_calc.py": BASE["tests/test_calc.py"]
                        + f"\n\ndef test_{name}():\n    from calc import {name}\n\n"
                          f"    assert {body}\n"})


@pytest.fixture(params=["git", "scopes"])
def lab(request: pytest.FixtureRequest, repo: Path, tmp_path: Path, env_cache: Path
        ) -> Iterator[Any]:
    base = git(repo, "rev-parse", "base").stdout.strip()
    if request.param == "git":
        yield GitWorkbench.create(tmp_path / "lab", repo, base, Environment.current())
        return
    # The bench's loop runs on its own thread; `_graded` runs the rules on it.
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    cm = TaskState.open(calc_task(tmp_path / "task"), repo, tmp_path / "state", env_cache,
                        mini=True)
    try:
        state = asyncio.run_coroutine_threadsafe(cm.__aenter__(), loop).result()
        try:
            yield ScopeWorkbench(state, "pair")
        finally:
            asyncio.run_coroutine_threadsafe(cm.__aexit__(None, None, None), loop).result()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()


def _runner(tests: dict[int, str], command: str = COMMAND):  # type: ignore[no-untyped-def]
    async def run(lab: Any, patch: str | None, fid: int):  # type: ignore[no-untyped-def]
        return await lab.run_tests(patch, tests[fid], command, 60)

    return run


def _graded(lab: Any, rules: Coroutine[Any, Any, Any]) -> Any:
    """The grade `rules` (grade_merged or grade_solo on `lab`) give: on the bench's loop
    for scopes, on a loop of its own for git."""
    if isinstance(lab, ScopeWorkbench):
        return asyncio.run_coroutine_threadsafe(rules, lab.state.loop).result()
    return asyncio.run(rules)


@pytest.mark.slow  # near the 8 s fast budget on a loaded 2-core machine
def test_clean_merge_runs_each_features_tests_on_the_merged_diff(repo: Path, lab: Any) -> None:
    """Disjoint patches merge clean; both features pass on base + merged diff + tests."""
    mul = calc_diff(repo, {"calc.py": "def mul(a, b):\n    return a * b\n\n\n" + BASE["calc.py"]})
    tests = {1: _tests(repo, "mul", "mul(2, 3) == 6"), 2: _tests(repo, "div", "div(6, 3) == 2")}
    g = _graded(lab, grade_merged(lab, (1, 2), (mul, _div(repo)), _runner(tests)))
    assert (g.merge_status, g.strategy, g.apply) == ("clean", "naive", ("applied", "applied"))
    assert g.passed and all(f.tests_passed == 2 for f in g.features)
    assert "def mul" in g.merged_diff and "def div" in g.merged_diff


@pytest.mark.slow
def test_conflict_fails_both_unless_the_leads_patch_passes_both(repo: Path, lab: Any) -> None:
    """A conflicted pair fails both features; the lead fallback counts it passed only
    when agent1's patch alone passes both suites."""
    tests = {1: _tests(repo, "mul", "mul(2, 3) == 6"), 2: _tests(repo, "div", "div(6, 3) == 2")}
    g = _graded(lab, grade_merged(lab, (1, 2), (_mul(repo), _div(repo)), _runner(tests)))
    assert g.merge_status == "conflicts" and not g.passed
    assert [f.passed for f in g.features] == [False, False]
    assert "merge conflict" in g.features[1].reason
    both = calc_diff(repo, {"calc.py": BASE["calc.py"] + "\n\ndef mul(a, b):\n    return a * b\n"
                        "\n\ndef div(a, b):\n    return a / b\n"})
    g = _graded(lab, grade_merged(lab, (1, 2), (both, _div(repo)), _runner(tests)))
    assert g.merge_status == "conflicts" and g.strategy == "solo-agent1" and g.passed


def test_union_merges_a_conflict_by_keeping_both_sides(repo: Path, lab: Any) -> None:
    """With merge=union (<= 0.0.15) the conflicting additions are both kept and graded."""
    tests = {1: _tests(repo, "mul", "mul(2, 3) == 6"), 2: _tests(repo, "div", "div(6, 3) == 2")}
    g = _graded(lab, grade_merged(lab, (1, 2), (_mul(repo), _div(repo)), _runner(tests),
                                  policy="union"))
    assert (g.merge_status, g.strategy) == ("conflicts", "union")
    assert g.passed


def test_a_patch_that_does_not_apply_is_missing_input(repo: Path, lab: Any) -> None:
    """An agent patch git cannot apply, even with --3way, makes the pair missing_input."""
    bogus = ("diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
             "@@ -1,2 +1,2 @@\n-def nothing():\n-    pass\n+def x():\n+    pass\n")
    tests = {1: _tests(repo, "mul", "mul(2, 3) == 6"), 2: _tests(repo, "div", "div(6, 3) == 2")}
    g = _graded(lab, grade_merged(lab, (1, 2), (_mul(repo), bogus), _runner(tests)))
    assert g.apply == ("applied", "failed") and g.merge_status == "missing_input"
    assert not g.passed and g.features[0].reason == "a patch did not apply; lead fallback: passed"
    # the failed fallback keeps the counts of the lead's runs (it passed feature 1 alone)
    assert g.features[0].tests_passed > 0 and "lead fallback" in g.features[1].reason


def test_apply_falls_back_to_three_way(repo: Path, lab: Any) -> None:
    """A patch made against another version of a file fails `git apply` but applies with
    `git apply --3way` (the blob it names is in the repository)."""
    git(repo, "checkout", "-q", "-b", "side")
    side = BASE["calc.py"].replace("b\n\n\ndef sub", "b\n# note\n\ndef sub")
    (repo / "calc.py").write_text(side)
    git(repo, "commit", "-qam", "side")
    (repo / "calc.py").write_text(side.replace("a - b", "a - b  # sub"))
    stale = git(repo, "diff", "--full-index").stdout
    git(repo, "checkout", "-q", "-f", "main")
    if isinstance(lab, GitWorkbench):
        lab = GitWorkbench.create(lab.path.parent / "lab2", repo, lab.base, lab.env)
        (lab.path / ".git" / "p.patch").write_text(stale)
        assert git(lab.path, "apply", "--check", ".git/p.patch", check=False).returncode != 0
    else:  # the trace holds the blob the patch names, as it would an agent's
        trace = lab.state.coord.trace
        asyncio.run_coroutine_threadsafe(lab.state.coord.io(trace.write_blob, side.encode()),
                                         lab.state.loop).result()
    tests = {1: _tests(repo, "mul", "mul(2, 3) == 6"),
             2: calc_diff(repo, {"tests/test_calc.py": BASE["tests/test_calc.py"]
                             + "\n\ndef test_sub():\n    import calc, inspect\n\n"
                               "    assert '# sub' in inspect.getsource(calc.sub)\n"})}
    mul_first = calc_diff(repo, {"calc.py": "def mul(a, b):\n    return a * b\n\n\n"
                             + BASE["calc.py"]})
    g = _graded(lab, grade_merged(lab, (1, 2), (mul_first, stale), _runner(tests)))
    assert g.apply == ("applied", "applied") and g.merge_status == "clean"
    assert g.passed


def test_a_feature_passes_only_with_a_passing_test(repo: Path, lab: Any) -> None:
    """Exit code 0 is not enough: at least one test must be counted as passed."""
    tests = {1: _tests(repo, "mul", "mul(2, 3) == 6"), 2: _tests(repo, "mul", "mul(2, 3) == 6")}
    g = _graded(lab, grade_solo(lab, (1, 2), _mul(repo), _runner(tests, "set -e\necho all good\n")))
    assert [f.exit_code for f in g.features] == [0, 0]
    assert not g.passed and g.features[0].reason == "no test passed"
    g = _graded(lab, grade_solo(lab, (1, 2), _mul(repo), _runner(tests)))
    assert g.passed


@pytest.mark.slow
def test_identical_patches_skip_the_merge(repo: Path, lab: Any) -> None:
    """Byte-identical stripped patches are graded once, as 'identical'."""
    tests = {1: _tests(repo, "mul", "mul(2, 3) == 6"), 2: _tests(repo, "mul", "mul(3, 3) == 9")}
    with_test = _mul(repo) + calc_diff(repo, {"tests/test_extra.py": "def test_x():\n    pass\n"})
    g = _graded(lab, grade_merged(lab, (1, 2), (with_test, _mul(repo)), _runner(tests)))
    assert (g.merge_status, g.strategy) == ("identical", "identical") and g.passed


@pytest.mark.slow
def test_a_clean_merge_can_break_a_test(repo: Path, lab: Any) -> None:
    """A merge git calls clean is graded by the tests: feature 2 changes add(), which
    feature 1's sub() relies on, so feature 1 fails on the merged code."""
    sub_test = calc_diff(repo, {"tests/test_calc.py": BASE["tests/test_calc.py"]
                            + "\n\ndef test_sub():\n    from calc import sub\n\n"
                              "    assert sub(5, 3) == 2\n"})
    tests = {1: sub_test, 2: _tests(repo, "add", "add(2, 2) == 5")}
    p1 = calc_diff(repo, {"calc.py": BASE["calc.py"].replace("return a - b", "return add(a, -b)")})
    p2 = calc_diff(repo, {"calc.py": BASE["calc.py"].replace("return a + b", "return a + b + 1")})
    g = _graded(lab, grade_merged(lab, (1, 2), (p1, p2), _runner(tests)))
    assert g.merge_status == "clean"
    assert [f.passed for f in g.features] == [False, True]
    assert "test_sub - assert 3 == 2" in g.features[0].output_tail




def _add_doc(repo: Path) -> str:
    return calc_diff(repo, {"calc.py": BASE["calc.py"].replace(
        "def add(a, b):\n", 'def add(a, b):\n    """Sum."""\n')})


@pytest.mark.slow
def test_a_group_folds_and_each_feature_is_tested(repo: Path, lab: Any) -> None:
    """Three agents: mul before add, add's docstring, div at the end merge clean (agent 1
    into agent 2, then agent 3); each feature's tests run on the merged code."""
    mul = calc_diff(repo, {"calc.py": "def mul(a, b):\n    return a * b\n\n\n" + BASE["calc.py"]})
    tests = {1: _tests(repo, "mul", "mul(2, 3) == 6"), 2: _tests(repo, "div", "div(6, 3) == 2"),
             3: calc_diff(repo, {"tests/test_calc.py": BASE["tests/test_calc.py"]
                             + "\n\ndef test_doc():\n    from calc import add\n\n"
                               "    assert add.__doc__ == 'Sum.'\n"})}
    g = _graded(lab, grade_merged(lab, (1, 3, 2), (mul, _add_doc(repo), _div(repo)),
                                  _runner(tests)))
    assert (g.merge_status, g.merge_step, g.apply) == ("clean", None, ("applied",) * 3)
    assert g.passed and [f.id for f in g.features] == [1, 3, 2]


@pytest.mark.slow
def test_the_lead_fallback_tests_the_leads_patch_against_every_suite(repo: Path, lab: Any
                                                                     ) -> None:
    """A group whose fold conflicts at agent 3 (div and mul both appended) fails every
    feature, unless agent 1's patch alone passes all three suites; one that passes two
    of three does not rescue it."""
    tests = {1: _tests(repo, "mul", "mul(2, 3) == 6"), 2: _tests(repo, "div", "div(6, 3) == 2"),
             3: calc_diff(repo, {"tests/test_calc.py": BASE["tests/test_calc.py"]
                             + "\n\ndef test_doc():\n    from calc import add\n\n"
                               "    assert add.__doc__ == 'Sum.'\n"})}
    both = calc_diff(repo, {"calc.py": BASE["calc.py"] + "\n\ndef mul(a, b):\n    return a * b\n"
                        "\n\ndef div(a, b):\n    return a / b\n"})
    every = calc_diff(repo, {"calc.py": BASE["calc.py"].replace(
        "def add(a, b):\n", 'def add(a, b):\n    """Sum."""\n')
        + "\n\ndef mul(a, b):\n    return a * b\n\n\ndef div(a, b):\n    return a / b\n"})
    g = _graded(lab, grade_merged(lab, (1, 3, 2), (every, _add_doc(repo), _div(repo)),
                                  _runner(tests)))
    assert (g.merge_status, g.merge_step, g.strategy) == ("conflicts", 3, "solo-agent1")
    assert g.passed and [f.tests_passed for f in g.features] == [2, 2, 2]
    g = _graded(lab, grade_merged(lab, (1, 3, 2), (both, _add_doc(repo), _div(repo)),
                                  _runner(tests)))
    assert (g.merge_status, g.merge_step, g.strategy) == ("conflicts", 3, "naive")
    # the failed fallback keeps what the lead's patch scored (issue 28), not 0/0
    assert not g.passed and all(f.reason.startswith("merge conflict; lead fallback")
                                for f in g.features)
    ran = [f for f in g.features if "stopped" not in f.reason]
    assert ran and all(f.tests_passed + f.tests_failed > 0 for f in ran)
