"""The scope workbench: the operations CooperBench's `test_merged` does with git in its
container, done in Corral scopes forked from a task's `TaskState`, each an effect in
the trace.

- an agent branch (base + patch): the agent's own scope when the graded patch is its
  whole diff (the tree is then base + patch by construction), else a fork of `env`
  with `scope.patch(patch)` (`git apply`, then `--3way`);
- the merge (`git merge agent1 --no-commit --no-ff` on agent2, then agent3.. into the
  result): the branches merged in that order into a fork of agent2's by
  `Coordinator.merge_team` (libgit2's verdicts and trees, which agree with git's;
  `union` as `* merge=union` gives);
- each test run: a fork of the merged state (or of the branch the rules test) and one
  `scope.exec`, network off, of runner.sh's last steps: the feature's tests.patch
  applied as runner.sh applies it (`git apply --ignore-whitespace
  --ignore-space-change`, else `--3way`), then the task's test command, in the
  environment every scope shares copy-on-write from `env`.

It is a `Workbench` as the stock-git `GitWorkbench` is, so the same rules run on both
(tests/bench/test_cooperbench_grade.py runs each case on both). Its steps run on the
task state's event loop itself: no thread hop to and from it per step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal, NamedTuple

from coordinator import ExecOutcome, PatchError, PathError, Scope

from ._recipe import REPO
from ._task_state import TaskState
from ._workbench import ApplyStatus, MergeRun, TestRun, fold_order, parse_results

__all__ = ["ScopeWorkbench"]


class ScopeWorkbench:
    """One graded unit's evaluation; its scopes are named `<prefix>.<what><n>`. `known`
    maps a patch's text to a scope whose tree is base + that patch (an agent's own
    scope), tested there instead of applying the patch again."""

    def __init__(self, state: TaskState, prefix: str, known: dict[str, Scope] | None = None
                 ) -> None:
        self.state = state
        self.prefix = prefix
        self.base = state.env.head
        self._states: dict[str, Scope] = dict(known or {})
        """A graded diff's text -> a scope whose tree is base + that diff."""
        self.scopes: list[Scope] = []
        """The scopes made here (the unit discards them when graded)."""
        self._n = 0

    async def _fork(self, parent: Scope, what: str) -> Scope:
        self._n += 1
        s = await parent.fork(f"{self.prefix}.{what}{self._n}")
        self.scopes.append(s)
        return s

    async def _apply(self, parent: Scope, patch: str, what: str) -> tuple[Scope, str]:
        """A fork of `parent` with `patch` applied (`git apply`, else `--3way`): the
        scope and '' or the reason it did not apply."""
        s = await self._fork(parent, what)
        try:
            await s.patch(patch)
            return s, ""
        except PatchError:
            try:
                await s.patch(patch, three_way=True)
                return s, ""
            except PatchError as e:
                return s, str(e)

    async def _branch(self, patch: str, n: int) -> tuple[Scope, ApplyStatus]:
        if not patch:
            return self.state.env, "skipped"
        known = self._states.get(patch)
        if known is not None:
            return known, "applied"
        s, error = await self._apply(self.state.env, patch, f"agent{n}-branch")
        if error:
            return s, "failed"
        self._states[patch] = s
        return s, "applied"

    async def merge(self, patches: Sequence[str], *, union: bool = False) -> MergeRun:
        """Branches agent1..agentN and their fold (`MergeRun`): the other branches
        merged in fold order into a fork of agent2's by `Coordinator.merge_team`."""
        branches = [await self._branch(p, n) for n, p in enumerate(patches, 1)]
        applies = tuple(a for _, a in branches)
        if "failed" in applies:
            return MergeRun(applies, False, "", "naive")
        order = [branches[i][0] for i in fold_order(len(branches))]
        team = await self._fold(order, "fail")
        strategy: Literal["naive", "union"] = "naive"
        step = None
        conflicts = team.conflicts
        if team.stopped is not None:
            step = _step(order, team.stopped)
            if not union:
                return MergeRun(applies, True, "", "naive", step=step, conflicts=conflicts)
            team = await self._fold(order, "union")
            strategy = "union"
            if team.stopped is not None:
                return MergeRun(applies, True, "", "union", union_conflict=True, step=step,
                                conflicts=conflicts)
        target = self.state.coord.scopes[team.into]
        diff = self.state.diff(target)
        self._states[diff] = target
        return MergeRun(applies, False, diff, strategy, tree=team.tree, step=step,
                        conflicts=conflicts)

    async def _fold(self, order: list[Scope], strategy: Literal["fail", "union"]) -> _Fold:
        """A fork of `order[0]` with the rest merged into it in order (each branch once:
        two agents whose branch is the same scope, or base, merge it once, as git's
        second merge of a branch is "Already up to date")."""
        target = await self._fork(order[0], "merged")
        members = [s for i, s in enumerate(order[1:], 1)
                   if all(s is not o for o in order[:i])]
        t = await self.state.coord.merge_team(target, members, order="given",
                                              strategy=strategy)
        paths = () if t.conflict is None else tuple(sorted({c.path for c in t.conflict.conflicts}))
        return _Fold(target.name, t.tree, t.stopped, paths)

    async def normalize(self, patch: str) -> str:
        """The identical-patch path: the patch as the tree it makes diffs (unchanged
        when it does not apply)."""
        s = self._states.get(patch)
        if s is None:
            s, error = await self._apply(self.state.env, patch, "identical")
            if error:
                return patch
        diff = self.state.diff(s)
        self._states[diff] = s
        return diff

    async def files(self, patch: str, paths: Sequence[str]) -> dict[str, bytes | None]:
        """See `Workbench.files`: read in the scope of base + `patch`."""
        state = self.state.env if not patch else self._states.get(patch)
        if state is None:
            state, error = await self._apply(self.state.env, patch, "read")
            if error:
                return {}
            self._states[patch] = state
        out: dict[str, bytes | None] = {}
        for p in paths:
            try:
                out[p] = await state.read(p)
            except (FileNotFoundError, IsADirectoryError, PathError):
                out[p] = None
        return out

    async def run_tests(self, feature_patch: str | None, tests_patch: str, command: str,
                        timeout: float) -> TestRun:
        """runner.sh in a scope: the state of base + `feature_patch` forked, the tests
        patch applied, the command run offline in the environment of `env`."""
        started = time.perf_counter()
        state = self.state.env if not feature_patch else self._states.get(feature_patch)
        if state is None:
            assert feature_patch is not None
            state, error = await self._apply(self.state.env, feature_patch, "feature")
            if error:
                return _not_applied("feature.patch", error, started)
            self._states[feature_patch] = state
        t = await self._fork(state, "tests")
        env = dict(self.state.test_env)
        if len(tests_patch) < _ENV_MAX:
            # runner.sh's own step, in the same command: its flags, and the test files
            # it writes recorded as the command's changes.
            env["CORRAL_TESTS_PATCH"] = tests_patch
            script = _APPLY_TESTS + command
        else:  # too long for an environment variable: a patch effect first
            try:
                await t.patch(tests_patch)
            except PatchError:
                try:
                    await t.patch(tests_patch, three_way=True)
                except PatchError as e:
                    return _not_applied("tests.patch", str(e), started)
            # A copy for $TEST_PATCH, at a path Corral ignores by default.
            await t.write(_LONG_PATCH, tests_patch.encode())
            env["TEST_PATCH"] = f"{REPO}/{_LONG_PATCH}"
            script = command
        result = await t.exec(["bash", "-c", script], timeout=timeout, env=env, network=False)
        outcome = result.outcome
        if not isinstance(outcome, ExecOutcome):
            text = f"the test command did not run: {result.reason}\n"
            return TestRun(False, None, 0, 0, text, time.perf_counter() - started)
        trace = self.state.coord.trace
        output = (trace.blob(outcome.stdout) + trace.blob(outcome.stderr)).decode(
            "utf-8", "replace")
        if outcome.timed_out:
            output += f"\ntest command timed out after {timeout:g}s\n"
        tp, tf = parse_results(output)
        code = None if outcome.timed_out else outcome.returncode
        return TestRun(code == 0 and tp > 0, code, tp, tf, output,
                       time.perf_counter() - started, outcome.timed_out, outcome.duration_s)


class _Fold(NamedTuple):
    into: str
    tree: str
    stopped: str | None
    """The member whose merge conflicted."""
    conflicts: tuple[str, ...] = ()
    """The paths it conflicted at."""


def _step(order: list[Scope], stopped: str) -> int:
    """The fold step (`MergeRun.step`) of the branch named `stopped`: its first place
    in the fold, counted from 1 (the start is step 1)."""
    return next(i for i, s in enumerate(order, 1) if s.name == stopped)


_ENV_MAX = 100_000
"""Bytes of a tests.patch passed to the command in its environment (Linux takes up to
128 KiB per variable)."""

_LONG_PATCH = ".cache/corral-tests.patch"

# $TEST_PATCH names the tests patch as runner.sh's own variable does (the Go runners
# grep it for the Test functions to run), a private file of the command.
_APPLY_TESTS = """\
printf '%s' "$CORRAL_TESTS_PATCH" > /tmp/tests.patch
unset CORRAL_TESTS_PATCH
export TEST_PATCH=/tmp/tests.patch
git apply --ignore-whitespace --ignore-space-change /tmp/tests.patch \\
    || git apply --3way /tmp/tests.patch \\
    || { echo "could not apply tests.patch" >&2; exit 1; }
"""


def _not_applied(name: str, error: str, started: float) -> TestRun:
    text = f"{error}\ncould not apply {name}\n"
    return TestRun(False, 1, *parse_results(text), text, time.perf_counter() - started)
