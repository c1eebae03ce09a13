"""The evaluation lab: a plain git checkout of a task's base commit where patches are
applied, branches merged and tests run with stock git, exactly as CooperBench's
evaluation container does it (0.0.29 `eval/sandbox.py` and the task's `runner.sh`).

Every step is a real `git` command; nothing here knows about Corral.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["Lab", "LabSteps", "MergeRun", "TestRun", "git", "parse_results"]

ApplyStatus = Literal["applied", "skipped", "failed"]

_GIT_ENV = {
    # Results must not depend on the user's git configuration: CooperBench's
    # containers have none.
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "CooperBench Eval",
    "GIT_AUTHOR_EMAIL": "eval@cooperbench.local",
    "GIT_COMMITTER_NAME": "CooperBench Eval",
    "GIT_COMMITTER_EMAIL": "eval@cooperbench.local",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_TERMINAL_PROMPT": "0",
}


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `git args` in `cwd` with a neutral configuration; output captured as text."""
    env = {**os.environ, **_GIT_ENV}
    r = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                       errors="replace")
    if check and r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {r.stderr.strip()[:500]}")
    return r


def parse_results(output: str) -> tuple[int, int]:
    """(passed, failed) counted from test output: jest/vitest, pytest, go test, cargo
    test, in that order (0.0.29's `_parse_results`, rule for rule)."""
    m = re.search(r"Tests:\s*(?:(\d+)\s*failed,\s*)?(\d+)\s*passed", output)
    if m:
        return int(m.group(2)), int(m.group(1)) if m.group(1) else 0
    passed = failed = 0
    p = re.search(r"(\d+) passed", output)
    f = re.search(r"(\d+) failed", output)
    e = re.search(r"(\d+) error", output)
    if p:
        passed = int(p.group(1))
    if f:
        failed = int(f.group(1))
    if e:
        failed += int(e.group(1))
    if passed or failed:
        return passed, failed
    go_pass, go_fail = len(re.findall(r"--- PASS:", output)), len(re.findall(r"--- FAIL:", output))
    if go_pass or go_fail:
        return go_pass, go_fail
    ok = len(re.findall(r"^ok\s+\S+", output, re.MULTILINE))
    bad = len(re.findall(r"^FAIL\s+\S+", output, re.MULTILINE))
    if ok or bad:
        return (ok if bad == 0 else 0), bad
    m = re.search(r"test result:.*?(\d+) passed.*?(\d+) failed", output)
    if m:
        return int(m.group(1)), int(m.group(2))
    return 0, 0


@dataclass(frozen=True, slots=True)
class TestRun:
    """One run of a feature's tests on a patched checkout."""

    passed: bool
    """Exit code 0 and at least one test counted as passed."""
    exit_code: int | None
    tests_passed: int
    tests_failed: int
    output: str
    seconds: float
    timed_out: bool = False
    command_seconds: float = 0.0
    """Of `seconds`: the test command alone."""


@dataclass(frozen=True, slots=True)
class MergeRun:
    """Agent branches and their merge (`git merge agent1 --no-commit --no-ff` on agent2)."""

    apply1: ApplyStatus
    apply2: ApplyStatus
    conflict: bool
    diff: str
    """The merged tree's diff against base (empty on a conflict)."""
    strategy: Literal["naive", "union"]
    union_conflict: bool = False
    tree: str | None = None
    """The merged tree's id."""


class Lab:
    """A git checkout at `path` whose commit `base` is the task's base commit."""

    def __init__(self, path: Path, base: str) -> None:
        self.path = path
        self.base = base
        self._patches = path / ".git" / "cooperbench"
        self._patches.mkdir(parents=True, exist_ok=True)

    @classmethod
    def create(cls, path: Path, source: Path, base: str) -> Lab:
        """Clone `source` (a repository holding commit `base`) into `path`."""
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        git(path.parent, "clone", "-q", "--shared", "--no-checkout", str(source), str(path))
        git(path, "checkout", "-q", "--force", base)
        return cls(path, base)

    def _write(self, name: str, text: str) -> Path:
        p = self._patches / name
        p.write_text(text)
        return p

    def reset(self) -> None:
        """Back to a clean checkout of base (runner.sh: reset --hard, clean -fdx)."""
        git(self.path, "merge", "--abort", check=False) if (
            self.path / ".git" / "MERGE_HEAD").exists() else None
        git(self.path, "checkout", "-q", "--force", "--detach", self.base)
        git(self.path, "clean", "-fdxq", "-e", ".git")

    def _apply_agent(self, patch: Path, n: int) -> ApplyStatus:
        """0.0.29 `apply_patch`: plain `git apply`, else `git apply --3way`."""
        if patch.stat().st_size == 0:
            return "skipped"
        if git(self.path, "apply", str(patch), check=False).returncode == 0:
            return "applied"
        if git(self.path, "apply", "--3way", str(patch), check=False).returncode == 0:
            return "applied"
        return "failed"

    def _branch(self, name: str, patch: Path, n: int) -> ApplyStatus:
        self.reset()
        git(self.path, "checkout", "-q", "-B", name)
        status = self._apply_agent(patch, n)
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--allow-empty", "--no-verify", "-m", f"Agent {n} changes")
        return status

    def merge(self, patch1: str, patch2: str, *, union: bool = False) -> MergeRun:
        """Branch agent1 = base + patch1, agent2 = base + patch2, then on agent2
        `git merge agent1 --no-commit --no-ff`; with `union`, a conflicted merge is
        retried with `* merge=union` in .gitattributes (CooperBench <= 0.0.15)."""
        p1, p2 = self._write("patch1.patch", patch1), self._write("patch2.patch", patch2)
        a1 = self._branch("agent1", p1, 1)
        a2 = self._branch("agent2", p2, 2)
        git(self.path, "checkout", "-q", "agent2")
        if git(self.path, "merge", "agent1", "--no-commit", "--no-ff", check=False).returncode == 0:
            return self._merged(a1, a2, "naive")
        git(self.path, "merge", "--abort", check=False)
        if not union:
            return MergeRun(a1, a2, True, "", "naive")
        git(self.path, "reset", "-q", "--hard", "HEAD")
        attrs = self.path / ".gitattributes"
        had = attrs.read_bytes() if attrs.exists() else None
        with attrs.open("a") as f:
            f.write("* merge=union\n")
        try:
            rc = git(self.path, "merge", "agent1", "--no-commit", "--no-ff", check=False)
            if rc.returncode == 0:
                return self._merged(a1, a2, "union")
            git(self.path, "merge", "--abort", check=False)
            return MergeRun(a1, a2, True, "", "union", union_conflict=True)
        finally:
            if had is None:
                attrs.unlink(missing_ok=True)
            else:
                attrs.write_bytes(had)

    def _merged(self, a1: ApplyStatus, a2: ApplyStatus, strategy: Literal["naive", "union"]
                ) -> MergeRun:
        git(self.path, "commit", "-q", "--allow-empty", "--no-verify", "-m", "Temp merge")
        diff = git(self.path, "diff", "--binary", self.base, "HEAD").stdout
        tree = git(self.path, "rev-parse", "HEAD^{tree}").stdout.strip()
        return MergeRun(a1, a2, False, diff, strategy, tree=tree)

    def normalize(self, patch: str) -> str:
        """0.0.29's identical-patch path: the patch as git re-emits it after applying."""
        p = self._write("identical.patch", patch)
        self.reset()
        for extra in ((), ("--recount",)):
            if git(self.path, "apply", *extra, str(p), check=False).returncode == 0:
                git(self.path, "add", "-A")
                return git(self.path, "diff", "--cached", "--binary", self.base).stdout
        return patch

    def run_tests(self, feature_patch: str | None, tests_patch: str, command: str,
                  env: dict[str, str], timeout: float) -> TestRun:
        """runner.sh on a clean checkout of base: apply the feature patch and the tests
        patch (`git apply --ignore-whitespace --ignore-space-change`, else `--3way`),
        then run the test command. Returns the TestRun."""
        started = time.perf_counter()
        self.reset()
        out: list[str] = []
        for name, text in (("feature.patch", feature_patch), ("tests.patch", tests_patch)):
            if text is None:
                continue
            p = self._write(name, text)
            r = git(self.path, "apply", "--ignore-whitespace", "--ignore-space-change", str(p),
                    check=False)
            out.append(r.stdout + r.stderr)
            if r.returncode != 0:
                r = git(self.path, "apply", "--3way", str(p), check=False)
                out.append(r.stdout + r.stderr)
                if r.returncode != 0:  # runner.sh runs under `set -e`
                    text_out = "".join(out) + f"\ncould not apply {name}\n"
                    return TestRun(False, r.returncode, *parse_results(text_out), text_out,
                                   time.perf_counter() - started)
        argv = ["bash", "-c", command]
        # runner.sh's name for the tests patch (the Go runners grep it for Test functions).
        env = {**env, "TEST_PATCH": str(self._patches / "tests.patch")}
        if env.pop("CORRAL_BENCH_OFFLINE", "") == "1":
            # A new network namespace has its loopback down; tests that serve on
            # 127.0.0.1 (Go's httptest, aiohttp) need it up.
            argv = ["unshare", "--net", "--", "sh", "-c",
                    'ip link set lo up 2>/dev/null || true; exec "$@"', "sh", *argv]
        began = time.perf_counter()
        try:
            r2 = subprocess.run(argv, cwd=self.path, env=env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            output = "".join(out) + _text(e.stdout) + _text(e.stderr)
            output += f"\ntest command timed out after {timeout:g}s\n"
            p_, f_ = parse_results(output)
            now = time.perf_counter()
            return TestRun(False, None, p_, f_, output, now - started, True, now - began)
        now = time.perf_counter()
        output = "".join(out) + _text(r2.stdout) + _text(r2.stderr)
        tp, tf = parse_results(output)
        return TestRun(r2.returncode == 0 and tp > 0, r2.returncode, tp, tf, output,
                       now - started, False, now - began)


class LabSteps:
    """A `Lab` as the grading rules use a workbench (`_evaluate.Workbench`): each of its
    blocking git steps awaited on a thread."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    async def merge(self, patch1: str, patch2: str, *, union: bool = False) -> MergeRun:
        return await asyncio.to_thread(self.lab.merge, patch1, patch2, union=union)

    async def normalize(self, patch: str) -> str:
        return await asyncio.to_thread(self.lab.normalize, patch)

    async def run_tests(self, feature_patch: str | None, tests_patch: str, command: str,
                        env: dict[str, str], timeout: float) -> TestRun:
        return await asyncio.to_thread(self.lab.run_tests, feature_patch, tests_patch,
                                       command, env, timeout)


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode("utf-8", "replace")
