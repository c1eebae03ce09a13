"""The time of one three-way merge per strategy, for a small and a large change.

Each case is a repository of 50 small files and one file both sides changed: "small",
40 lines with 2 edited on each side; "large", 3,000 lines (~100 KB) with 100 edited
on each side. Each side edits lines the other does not, so "fail" merges clean and
every strategy does the same text merge. Two scopes forked from root write their
version; the merge is `scope.merge(other, strategy=..., dry_run=True)` (the whole
merge, no commit), timed `--runs` times after one warm-up; the report gives the
median and the spread in ms.

    python -m bench.merge_speed --runs 60 --json > bench/results/merge-speed.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from coordinator import Coordinator

__all__ = ["CASES", "STRATEGIES", "main", "measure"]

Strategy = Literal["fail", "union", "ours", "theirs"]
STRATEGIES: tuple[Strategy, ...] = ("fail", "union", "ours", "theirs")
CASES = {"small": (40, 2), "large": (3000, 100)}
"""name -> (lines of the file both sides change, lines each side edits)."""


def _texts(lines: int, edits: int) -> tuple[bytes, bytes, bytes]:
    rng = random.Random(1)
    base = [f"line {i} {'x' * 20}\n" for i in range(lines)]
    picked = rng.sample(range(0, lines, 3), 2 * edits)  # apart: never one clash
    sides = []
    for tag, mine in (("ours", picked[:edits]), ("theirs", picked[edits:])):
        side = list(base)
        for k in mine:
            side[k] = f"{tag} {k}\n"
        sides.append("".join(side).encode())
    return "".join(base).encode(), sides[0], sides[1]


def _repo(path: Path, base: bytes) -> Path:
    """A git repository with one commit: 50 small files and `m.txt`."""
    path.mkdir()
    for i in range(50):
        (path / f"f{i}.txt").write_text(f"other {i}\n")
    (path / "m.txt").write_bytes(base)
    env = ["-c", "user.name=b", "-c", "user.email=b@b"]
    for args in (["init", "-q"], ["add", "-A"], [*env, "commit", "-q", "-m", "base"]):
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)
    return path


async def _case(tmp: Path, name: str, lines: int, edits: int, runs: int) -> dict[str, Any]:
    base, ours, theirs = _texts(lines, edits)
    repo = _repo(tmp / f"repo-{name}", base)
    row: dict[str, Any] = {"lines": lines, "edits_per_side": edits}
    async with Coordinator.open(tmp / f"state-{name}", repo, backend="copy") as coord:
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        await a.write("m.txt", ours)
        await b.write("m.txt", theirs)
        for strategy in STRATEGIES:
            await a.merge(b, strategy=strategy, dry_run=True)  # warm-up
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                result = await a.merge(b, strategy=strategy, dry_run=True)
                times.append((time.perf_counter() - start) * 1e3)
                assert result.tree is not None, (name, strategy)
            row[strategy] = {"median_ms": round(statistics.median(times), 3),
                             "min_ms": round(min(times), 3), "max_ms": round(max(times), 3)}
    return row


def measure(runs: int) -> dict[str, Any]:
    """{"runs", "cases": {case: {strategy: {"median_ms", "min_ms", "max_ms"}}}}."""
    with tempfile.TemporaryDirectory() as tmp:
        cases = {name: asyncio.run(_case(Path(tmp), name, lines, edits, runs))
                 for name, (lines, edits) in CASES.items()}
    return {"runs": runs, "cases": cases}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = measure(args.runs)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'case':6} {'strategy':8} {'median ms':>10} {'min':>8} {'max':>8}")
    for case, row in report["cases"].items():
        for strategy in STRATEGIES:
            r = row[strategy]
            print(f"{case:6} {strategy:8} {r['median_ms']:10.2f} {r['min_ms']:8.2f} "
                  f"{r['max_ms']:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
