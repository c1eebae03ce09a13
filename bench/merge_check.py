"""Corral's patches and merges against git's, on CooperBench's gold patches.

For each task of one repository in the CooperBench dataset, every feature's
`feature.patch` is applied on the task's base commit (from `setup.sh`) with
`scope.patch` and with `git apply`; then every pair of features whose patches
both apply is merged with `merge(dry_run=True)` for each strategy and with
`git merge` (with the first feature checked out, so its `.gitattributes` are
the ones in play; "union" with `* merge=union` in `info/attributes`,
"ours"/"theirs" with `-X`), and the verdicts, trees and conflicting paths
are compared.

    python -m bench.merge_check DATASET_GIT_DIR pallets_click_task UPSTREAM_GIT_DIR

DATASET_GIT_DIR is a clone of cooperbench/CooperBench (bare is fine), and
UPSTREAM_GIT_DIR one of the task's upstream repository (pallets/click). Each
base tree is committed afresh as a root commit, so a shallow or partial
upstream clone is enough. Prints a JSON report: per strategy, the pairs that
agree, the pairs git leaves conflicting, the dry-run merge p50 in ms, and the
first pairs that disagree. Where git leaves a conflict, `same_conflicts`
counts the pairs where Corral reports the same conflicting paths, and
`settled` those Corral merged clean (a disagreement: under a favor too, git
leaves modify/delete and rename clashes conflicting, and so does Corral).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from coordinator import Coordinator, PatchError, Scope

__all__ = ["main", "check"]

Strategy = Literal["fail", "union", "ours", "theirs"]
STRATEGIES: tuple[Strategy, ...] = ("fail", "union", "ours", "theirs")
_ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
        "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b",
        "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def _git(repo: Path, *args: str, input: bytes | None = None,
         check: bool = False) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=_ENV,
                          input=input)
    if check and done.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.decode(errors='replace')}")
    return done


class _Check:
    def __init__(self, dataset: str, task_dir: str, upstream: str) -> None:
        self.dataset, self.task_dir, self.upstream = dataset, task_dir, upstream
        self.patches = {"agree": 0, "total": 0}
        self.merges: dict[str, dict[str, Any]] = {
            s: {"agree": 0, "total": 0, "git_conflict": 0, "same_conflicts": 0, "settled": 0,
                "ms": [], "differ": []}
            for s in STRATEGIES}

    def _show(self, path: str) -> bytes:
        return subprocess.run(["git", "--git-dir", self.dataset, "show", f"HEAD:{path}"],
                              capture_output=True, check=True).stdout

    def _ls(self, path: str) -> list[str]:
        return subprocess.run(["git", "--git-dir", self.dataset, "ls-tree", "-r", "--name-only",
                               f"HEAD:{path}"], capture_output=True, text=True,
                              check=True).stdout.split()

    def tasks(self) -> list[str]:
        """The task directories (those with a setup.sh)."""
        files = self._ls(f"dataset/{self.task_dir}")
        return sorted({p.split("/", 1)[0] for p in files if p.endswith("/setup.sh")})

    async def task(self, task: str, tmp: Path) -> None:
        where = f"dataset/{self.task_dir}/{task}"
        found = re.search(rb'BASE_COMMIT="([0-9a-f]+)"', self._show(f"{where}/setup.sh"))
        if found is None:
            return
        files = self._ls(where)
        features = sorted(int(m[1]) for f in files
                          if (m := re.fullmatch(r"feature(\d+)/feature\.patch", f)))
        repo = tmp / task
        _git(tmp, "init", "-q", str(repo), check=True)
        (repo / ".git/objects/info/alternates").write_text(self.upstream + "/objects\n")
        base = _git(repo, "commit-tree", _complete_tree(repo, found[1].decode()), "-m", "base",
                    check=True).stdout.decode().strip()
        patches = {k: self._show(f"{where}/feature{k}/feature.patch") for k in features}
        want: dict[int, str | None] = {}
        for k in features:
            _git(repo, "checkout", "-q", "-f", "-B", f"f{k}", base, check=True)
            if _git(repo, "apply", input=patches[k]).returncode == 0:
                _git(repo, "add", "-A")
                _git(repo, "commit", "-q", "-m", f"f{k}", check=True)
                want[k] = _git(repo, "rev-parse", "HEAD^{tree}").stdout.decode().strip()
            else:
                want[k] = None
        async with Coordinator.open(tmp / f"state-{task}", repo, base=base,
                                    backend="copy") as coord:
            scopes: dict[int, Scope] = {}
            for k in features:
                scope = await coord.root.fork(f"f{k}")
                try:
                    await scope.patch(patches[k])
                    got: str | None = str(coord.trace.commit(scope.head).tree_id)
                    scopes[k] = scope
                except PatchError:
                    got = None
                self.patches["total"] += 1
                self.patches["agree"] += got == want[k]
            for i, j in itertools.combinations(sorted(scopes), 2):
                for strategy in STRATEGIES:
                    git_tree, git_paths = self._git_merge(repo, i, j, strategy)
                    t = time.perf_counter()
                    merged = await scopes[i].merge(scopes[j], strategy=strategy, dry_run=True)
                    stats = self.merges[strategy]
                    stats["ms"].append((time.perf_counter() - t) * 1e3)
                    stats["total"] += 1
                    ours_paths = {c.path for c in merged.conflicts}
                    if git_tree is not None:
                        ok = merged.tree == git_tree
                    else:
                        stats["git_conflict"] += 1
                        # git moves one side of a type clash aside (`p~HEAD`)
                        same = {q.split("~", 1)[0] if q.split("~", 1)[0] in ours_paths else q
                                for q in git_paths} == ours_paths
                        stats["same_conflicts"] += same and merged.tree is None
                        settled = strategy != "fail" and merged.tree is not None
                        stats["settled"] += settled
                        ok = same and merged.tree is None
                    stats["agree"] += ok
                    if not ok:
                        stats["differ"].append(f"{task}:{i}-{j}")

    @staticmethod
    def _git_merge(repo: Path, i: int, j: int, strategy: str) -> tuple[str | None, set[str]]:
        """git's merged tree of features i and j (None when git leaves a
        conflict) and its conflicting paths."""
        attributes = repo / ".git/info/attributes"
        attributes.parent.mkdir(exist_ok=True)
        attributes.write_text("* merge=union\n" if strategy == "union" else "")
        _git(repo, "checkout", "-q", "-f", "--detach", f"f{i}", check=True)
        option = ["-X", strategy] if strategy in ("ours", "theirs") else []
        done = _git(repo, "merge", "-q", "--no-edit", *option, f"f{j}")
        tree = _git(repo, "rev-parse", "HEAD^{tree}").stdout.decode().strip()
        paths: set[str] = set()
        if done.returncode:
            unmerged = _git(repo, "diff", "--name-only", "-z", "--diff-filter=U").stdout
            paths = set(unmerged.decode().split("\0")) - {""}
            _git(repo, "merge", "--abort")
        _git(repo, "reset", "-q", "--hard")
        return (tree, paths) if done.returncode == 0 else (None, paths)

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"patches": self.patches}
        for strategy, s in self.merges.items():
            out[strategy] = {
                "agree": s["agree"], "total": s["total"], "git_conflict": s["git_conflict"],
                "same_conflicts": s["same_conflicts"], "settled": s["settled"],
                "p50_ms": round(statistics.median(s["ms"]), 2) if s["ms"] else None,
                "differ": s["differ"][:20],
            }
        return out


def _complete_tree(repo: Path, commit: str) -> str:
    """The commit's tree, with any blob the (partial) upstream copy lacks
    replaced by a small placeholder: a snapshot may leave out its largest
    files (images, fonts), which no gold patch edits as text. Git and Corral
    then start from the same base."""
    listing = _git(repo, "ls-tree", "-r", "-z", commit, check=True).stdout.split(b"\0")
    blobs = {line.split(b"\t", 1)[1]: line.split()[2] for line in listing
             if line and line.split()[1] == b"blob"}
    ids = b"\n".join(blobs.values()) + b"\n"
    checked = _git(repo, "cat-file", "--batch-check", input=ids).stdout.splitlines()
    missing = {oid.split()[0] for oid in checked if oid.endswith(b" missing")}
    tree = f"{commit}^{{tree}}"
    if not missing:
        return tree
    _git(repo, "read-tree", tree, check=True)
    for path, oid in blobs.items():
        if oid in missing:
            stand_in = _git(repo, "hash-object", "-w", "--stdin", input=b"missing " + oid + b"\n",
                            check=True).stdout.decode().strip()
            _git(repo, "update-index", "--cacheinfo", f"100644,{stand_in},{path.decode()}",
                 check=True)
    return _git(repo, "write-tree", check=True).stdout.decode().strip()


async def check(dataset: str, task_dir: str, upstream: str) -> dict[str, Any]:
    """Run the comparison for one `<repo>_task` directory; returns the report."""
    run = _Check(dataset, task_dir, upstream)
    tmp = Path(tempfile.mkdtemp(prefix="corral-merge-check-"))
    try:
        for task in run.tasks():
            await run.task(task, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return run.report()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.merge_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", help="git dir of cooperbench/CooperBench")
    parser.add_argument("task_dir", help="e.g. pallets_click_task")
    parser.add_argument("upstream", help="git dir of the task's upstream repository")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(check(args.dataset, args.task_dir, args.upstream)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
