"""The stock-git workbench: a plain git checkout of a task's base commit where patches
are applied, branches merged and tests run with stock git, exactly as CooperBench's
evaluation container does it (0.0.29 `eval/sandbox.py` and the task's `runner.sh`).
The reference the scope workbench is checked against, and the census's merge.

Every step is a real `git` command run on a thread; nothing here knows about Corral.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from ._host_env import Environment
from ._repos import git
from ._workbench import ApplyStatus, MergeRun, TestRun, fold_order, parse_results

__all__ = ["GitWorkbench"]


class GitWorkbench:
    """A git checkout at `path` whose commit `base` is the task's base commit; tests
    run in the host environment `env` (None: a workbench that only merges, as the
    census's)."""

    def __init__(self, path: Path, base: str, env: Environment | None = None) -> None:
        self.path = path
        self.base = base
        self.env = env
        self._patches = path / ".git" / "cooperbench"
        self._conflicts: tuple[str, ...] = ()
        """The paths the last conflicted fold step conflicted at."""
        self._patches.mkdir(parents=True, exist_ok=True)

    @classmethod
    def create(cls, path: Path, source: Path, base: str, env: Environment | None = None
               ) -> GitWorkbench:
        """Clone `source` (a repository holding commit `base`) into `path`."""
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        git(path.parent, "clone", "-q", "--shared", "--no-checkout", str(source), str(path))
        git(path, "checkout", "-q", "--force", base)
        return cls(path, base, env)

    async def merge(self, patches: Sequence[str], *, union: bool = False) -> MergeRun:
        """See `Workbench.merge`."""
        return await asyncio.to_thread(self._merge, list(patches), union)

    async def normalize(self, patch: str) -> str:
        """See `Workbench.normalize`."""
        return await asyncio.to_thread(self._normalize, patch)

    async def run_tests(self, feature_patch: str | None, tests_patch: str, command: str,
                        timeout: float) -> TestRun:
        """See `Workbench.run_tests`. Raises ValueError on a workbench without `env`."""
        if self.env is None:
            raise ValueError("this git workbench has no test environment")
        env = self.env.env(self.path)
        return await asyncio.to_thread(self._run_tests, feature_patch, tests_patch, command,
                                       env, timeout)

    async def files(self, patch: str, paths: Sequence[str]) -> dict[str, bytes | None]:
        """See `Workbench.files`."""
        return await asyncio.to_thread(self._files, patch, list(paths))

    def _files(self, patch: str, paths: list[str]) -> dict[str, bytes | None]:
        self.reset()
        if patch and self._apply_agent(self._write("read.patch", patch), 0) == "failed":
            return {}
        return {p: (self.path / p).read_bytes() if (self.path / p).is_file() else None
                for p in paths}

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

    def _merge(self, patches: list[str], union: bool) -> MergeRun:
        """Branches agent1..agentN, then the fold (`_fold`); with `union`, a conflicted
        fold again with `* merge=union` in .gitattributes."""
        applies = tuple(self._branch(f"agent{n}", self._write(f"patch{n}.patch", p), n)
                        for n, p in enumerate(patches, 1))
        step = self._fold(len(patches))
        if step is None:
            return self._merged(applies, "naive")
        conflicts = self._conflicts
        if not union:
            return MergeRun(applies, True, "", "naive", step=step, conflicts=conflicts)
        # The next step's reset() drops the appended line again.
        if self._fold(len(patches), self.path / ".gitattributes") is None:
            return self._merged(applies, "union", step, conflicts)
        return MergeRun(applies, True, "", "union", union_conflict=True, step=step,
                        conflicts=conflicts)

    def _fold(self, n: int, union_attrs: Path | None = None) -> int | None:
        """On a branch `merged` from agent2: `git merge agent1 --no-commit --no-ff`, a
        commit, then each of agent3..agentN the same way. The step that conflicted
        (`MergeRun.step`), the merge aborted; None when all merged (HEAD is the fold)."""
        self.reset()
        git(self.path, "checkout", "-q", "-B", "merged", "agent2")
        if union_attrs is not None:
            with union_attrs.open("a") as f:
                f.write("* merge=union\n")
        for k, agent in enumerate(fold_order(n)[1:], 2):
            rc = git(self.path, "merge", f"agent{agent + 1}", "--no-commit", "--no-ff",
                     check=False).returncode
            if rc != 0:
                self._conflicts = tuple(sorted(set(git(
                    self.path, "diff", "-z", "--name-only", "--diff-filter=U"
                ).stdout.split("\0")) - {""}))
                git(self.path, "merge", "--abort", check=False)
                return k
            git(self.path, "commit", "-q", "--allow-empty", "--no-verify", "-m",
                f"Temp merge of agent{agent + 1}")
        return None

    def _merged(self, applies: tuple[ApplyStatus, ...], strategy: Literal["naive", "union"],
                step: int | None = None, conflicts: tuple[str, ...] = ()) -> MergeRun:
        diff = git(self.path, "diff", "--binary", self.base, "HEAD").stdout
        tree = git(self.path, "rev-parse", "HEAD^{tree}").stdout.strip()
        return MergeRun(applies, False, diff, strategy, tree=tree, step=step,
                        conflicts=conflicts)

    def _normalize(self, patch: str) -> str:
        p = self._write("identical.patch", patch)
        self.reset()
        for extra in ((), ("--recount",)):
            if git(self.path, "apply", *extra, str(p), check=False).returncode == 0:
                git(self.path, "add", "-A")
                return git(self.path, "diff", "--cached", "--binary", self.base).stdout
        return patch

    def _run_tests(self, feature_patch: str | None, tests_patch: str, command: str,
                   env: dict[str, str], timeout: float) -> TestRun:
        """runner.sh on a clean checkout of base."""
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


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode("utf-8", "replace")
