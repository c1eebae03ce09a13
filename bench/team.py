"""The team benchmark: a consistent cut of many live scopes, and a team forked from it.

`corral bench team` opens a coordinator on a small repository, forks `--scopes` live
scopes, gives each `--history` effects (writes and messages to a teammate), then times
`Coordinator.cut` of all of them and `Coordinator.fork_team` of the first `--team` from
a cut, `--runs` times each (median and p90). Targets (issue 26): a cut of 64 live scopes
within 5 ms p50, fork_team of 8 within 10 ms, both flat in history length (run it at two
`--history` values and compare).

    corral bench team [--scopes 64] [--team 8] [--history 10,1000] [--runs 20] [--json]
"""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from coordinator import Coordinator

from .substrate import stats

__all__ = ["CUT_TARGET_MS", "FORK_TEAM_TARGET_MS", "render", "run"]

CUT_TARGET_MS = 5.0
FORK_TEAM_TARGET_MS = 10.0


def _repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# team\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "s"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env)
    return repo


async def _one(root: Path, scopes: int, team: int, history: int, runs: int,
               backend: str | None) -> dict[str, Any]:
    async with Coordinator.open(root / f"state-{history}", root / "repo",
                                backend=backend) as coord:
        names = [f"s{i:03d}" for i in range(scopes)]
        members = [await coord.root.fork(n) for n in names]
        for step in range(history):
            await asyncio.gather(*(
                (s.write(f"{s.name}.txt", f"{step}\n".encode()) if step % 2 == 0 else
                 s.send(names[(i + 1) % scopes], f"step {step}"))
                for i, s in enumerate(members)))
            if step % 2 == 1:  # as agents do at each step: the inboxes stay short
                for s in members:
                    s.take_messages()
        await coord.checkpoint()
        cuts, forks = [], []
        for r in range(runs):
            t = time.perf_counter()
            cut = await coord.cut(members, name=f"h{history}-r{r}")
            cuts.append(time.perf_counter() - t)
            t = time.perf_counter()
            forked = await coord.fork_team(_first(cut, team), f"r{r}-")
            forks.append(time.perf_counter() - t)
            for s in forked:
                await s.discard()
        return {"history": history, "scopes": scopes, "team": team,
                "cut": stats(cuts), "fork_team": stats(forks),
                "backend": coord.runtime.backend}


def _first(cut: Any, team: int) -> Any:
    """The cut narrowed to its first `team` members (a team forked from a larger cut)."""
    from dataclasses import replace

    return replace(cut, members=cut.members[:team])


async def run_async(scopes: int = 64, team: int = 8, history: Sequence[int] = (10, 1000),
                    runs: int = 20, backend: str | None = None) -> dict[str, Any]:
    """Measure cut and fork_team at each history length; the JSON-ready report."""
    if scopes < 1 or team < 1 or team > scopes or runs < 1:
        raise ValueError("need 1 <= team <= scopes and runs >= 1")
    rows = []
    before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="corral-bench-team-") as tmp:
        root = Path(tmp)
        _repo(root)
        for h in history:
            rows.append(await _one(root, scopes, team, h, runs, backend))
    return {"machine": {"cores": os.cpu_count(), "kernel": platform.release(),
                        "python": platform.python_version(),
                        "backend": rows[0]["backend"] if rows else backend,
                        "load_before": before,
                        "load_after": [round(x, 2) for x in os.getloadavg()]},
            "targets": {"cut_p50_ms": CUT_TARGET_MS, "fork_team_p50_ms": FORK_TEAM_TARGET_MS},
            "rows": rows}


def run(scopes: int = 64, team: int = 8, history: Sequence[int] = (10, 1000), runs: int = 20,
        backend: str | None = None) -> dict[str, Any]:
    return asyncio.run(run_async(scopes, team, history, runs, backend))


def render(report: dict[str, Any]) -> Table:
    table = Table(title="team: consistent cuts (ms)")
    for col in ("history", "scopes", "cut p50", "cut p90", "team", "fork_team p50",
                "fork_team p90"):
        table.add_column(col, justify="right")
    for r in report["rows"]:
        cut, fork = r["cut"], r["fork_team"]
        table.add_row(str(r["history"]), str(r["scopes"]),
                      _mark(cut["median_ms"], CUT_TARGET_MS), f"{cut['p90_ms']:.2f}",
                      str(r["team"]), _mark(fork["median_ms"], FORK_TEAM_TARGET_MS),
                      f"{fork['p90_ms']:.2f}")
    return table


def _mark(value: float, limit: float) -> str:
    return f"{value:.2f} " + ("[green]✓[/]" if value <= limit else "[red]✗[/]")
