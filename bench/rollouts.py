"""The rollout trees' benchmark (`agents.rollouts`): what a sibling costs.

- **Sibling creation for a pair**: two scopes with `history` effects each are cut and the
  pair forked from the cut (`Coordinator.fork_team`), `runs` times: the time per sibling
  (target: at most 2 ms).
- **Suffix against a full re-run**: a coding agent makes a recorded run of `steps` model
  calls (one file written per step) against the local model server; then one sibling is
  grown at each fork step (served from the trace before it, live after it) and timed, its
  live tokens counted. Forking before step 1 is the full re-run.

    corral bench rollouts [--history 10] [--runs 200] [--steps 30] [--at 1,10,20,29] [-o FILE]
                          [--only siblings,suffix,ray]

`--only` runs some of the parts (the others are null in the report).
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

__all__ = ["PARTS", "TARGET_MS", "render", "run"]

TARGET_MS = 2.0
PARTS = ("siblings", "suffix", "ray")


def _repo(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "README.md").write_text("bench\n")
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b", "PATH": "/usr/bin:/bin:/usr/local/bin"}
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "snapshot"]):
        subprocess.run(["git", "-C", str(path), *argv], check=True, env=env)
    return path


async def _siblings(work: Path, history: int, runs: int, backend: str | None
                    ) -> dict[str, Any]:
    from coordinator import Coordinator

    async with Coordinator.open(work / "state", _repo(work / "repo"), backend=backend) as coord:
        pair = [await coord.root.fork(n) for n in ("agent-1", "agent-2")]
        for scope in pair:
            for i in range(history):
                await scope.write(f"{scope.name}/f{i}.txt", f"{i}\n".encode())
        cut = await coord.cut(pair, name="bench")
        times = []
        for i in range(runs):
            started = time.perf_counter()
            await coord.fork_team(cut, f"s{i}.")
            times.append((time.perf_counter() - started) * 1000)
        used = coord.backend.name
    median = statistics.median(times)
    return {"history": history, "runs": runs, "members": 2, "backend": used,
            "median_ms": round(median, 3),
            "p90_ms": round(sorted(times)[int(len(times) * 0.9)], 3),
            "per_member_ms": round(median / 2, 3), "target_ms": TARGET_MS,
            "meets_target": median <= TARGET_MS}


def _script(steps: int) -> Any:
    """A model that writes one note per step and finishes at step `steps`."""
    from agents.model_server import Reply, ScriptedCall

    def script(payload: dict[str, Any]) -> Reply:
        n = sum(1 for m in payload["messages"] if m.get("role") == "assistant")
        if n + 1 >= steps:
            return Reply(tool_calls=[ScriptedCall("finish", {"summary": "done"})])
        return Reply(f"Step {n + 1}.", [ScriptedCall(
            "write_file", {"path": f"notes/{n + 1}.md", "content": f"note {n + 1}\n"})])

    return script


async def _suffix(work: Path, steps: int, at: Sequence[int], backend: str | None
                  ) -> dict[str, Any]:
    from agents import CodingAgent, ModelCaller
    from agents.model_server import ScriptedModelServer
    from agents.providers import OpenAIProvider
    from agents.rollouts import Sampling, fork_points, grow
    from coordinator import Coordinator

    rows = []
    async with ScriptedModelServer() as server:
        server.script("bench", _script(steps))
        provider = OpenAIProvider("bench", base_url=server.base_url, logprobs=True,
                                  token_ids=True)
        async with Coordinator.open(work / "state", _repo(work / "repo"),
                                    backend=backend) as coord:
            scope = await coord.root.fork("agent-1")
            caller = ModelCaller(coord, provider)
            started = time.perf_counter()
            result = await CodingAgent(coord, scope, caller, "Write the notes.",
                                       max_steps=steps + 5).run()
            recorded = {"status": result.status, "steps": result.steps,
                        "tokens": caller.prompt_tokens + caller.completion_tokens,
                        "seconds": round(time.perf_counter() - started, 3)}
            heads = {"agent-1": scope.head}
            points = {p.step + 1: p for p in await coord.io(
                lambda: fork_points(coord.trace, heads, every=1))}
            for k in at:
                started = time.perf_counter()
                tree = await grow(coord, ["agent-1"], [points[k]], [Sampling(seed=1)],
                                  provider_for=lambda _: provider, max_steps=steps + 5,
                                  tree_id=f"bench-{k}")
                leaf = tree.leaves[0]
                rows.append({"fork_before_step": k, "served_steps": k - 1,
                             "live_steps": leaf.members[0].steps - (k - 1),
                             "live_tokens": leaf.tokens,
                             "seconds": round(time.perf_counter() - started, 3)})
        await provider.aclose()
    full = next((r for r in rows if r["fork_before_step"] == 1), None)
    for r in rows:
        if full is not None and full["live_tokens"]:
            r["token_share"] = round(r["live_tokens"] / full["live_tokens"], 3)
            r["time_share"] = round(r["seconds"] / full["seconds"], 3)
    return {"steps": steps, "recorded": recorded, "rows": rows}


async def _ray(work: Path, k: int, steps: int, backend: str | None) -> dict[str, Any] | None:
    """K siblings of a `steps`-step run forked at its middle, grown in process (2 at once)
    and on a local Ray cluster of 2 workers; siblings per second of each (None: no Ray).
    A warm-up tree first starts the Ray workers; the timed tree pays its shipping."""
    try:
        from agents.rollouts.on_ray import RayExecutor, connect
    except ImportError:
        return None
    from agents import CodingAgent, ModelCaller
    from agents.model_server import ScriptedModelServer
    from agents.providers import OpenAIProvider
    from agents.rollouts import fork_points, grow, siblings
    from coordinator import Coordinator

    connect(num_cpus=2)
    rates: dict[str, float] = {}
    async with ScriptedModelServer() as server:
        server.script("bench", _script(steps))
        url = server.base_url
        async with Coordinator.open(work / "state", _repo(work / "repo"),
                                    backend=backend) as coord:
            scope = await coord.root.fork("agent-1")
            provider = OpenAIProvider("bench", base_url=url, logprobs=True, token_ids=True)
            await CodingAgent(coord, scope, ModelCaller(coord, provider), "Write the notes.",
                              max_steps=steps + 5).run()
            await provider.aclose()
            heads = {"agent-1": scope.head}
            point = (await coord.io(lambda: fork_points(coord.trace, heads, every=1)))[
                steps // 2]
            for name in ("warm-up", "local", "ray"):
                run = None if name == "local" else (lambda g: RayExecutor(g, base_url=url))
                started = time.perf_counter()
                tree = await grow(coord, ["agent-1"], [point],
                                  siblings(2 if name == "warm-up" else k),
                                  base_url=url, max_steps=steps + 5, tree_id=f"bench-{name}",
                                  parallel=2, executor=run)
                assert all(leaf.status == "ungraded" for leaf in tree.leaves)
                rates[name] = len(tree.leaves) / (time.perf_counter() - started)
    return {"workers": 2, "siblings": k, "steps": steps, "fork_before_step": point.step + 1,
            "ray_per_second": round(rates["ray"], 3),
            "local_per_second": round(rates["local"], 3)}


async def _run(history: int, runs: int, steps: int, at: Sequence[int],
               backend: str | None, ray_siblings: int, only: Sequence[str]) -> dict[str, Any]:
    parts = set(only or PARTS)
    before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="corral-bench-rollouts-") as tmp:
        siblings = (await _siblings(Path(tmp) / "pair", history, runs, backend)
                    if "siblings" in parts else None)
        suffix = (await _suffix(Path(tmp) / "suffix", steps, at, backend)
                  if "suffix" in parts else None)
        ray = (await _ray(Path(tmp) / "ray", ray_siblings, 10, backend)
               if ray_siblings > 0 and "ray" in parts else None)
    return {"benchmark": "rollouts", "siblings": siblings, "suffix": suffix, "ray": ray,
            "machine": {"cores": os.cpu_count(), "kernel": platform.release(),
                        "python": platform.python_version(), "load_before": before,
                        "load_after": [round(x, 2) for x in os.getloadavg()]}}


def run(history: int = 10, runs: int = 200, steps: int = 30, at: Sequence[int] = (1, 10, 20, 29),
        backend: str | None = None, ray_siblings: int = 8, only: Sequence[str] = ()
        ) -> dict[str, Any]:
    """Returns the report (see the module); `ray_siblings` 0 skips the Ray row, `only`
    (names from PARTS; empty: all) runs some parts. Raises ValueError for another name."""
    unknown = sorted(set(only) - set(PARTS))
    if unknown:
        raise ValueError(f"no part {', '.join(unknown)} (parts: {', '.join(PARTS)})")
    return asyncio.run(_run(history, runs, steps, at, backend, ray_siblings, only))


def render(report: dict[str, Any]) -> Table:
    table = Table("measure", "value", title="rollout trees: sibling cost")
    s = report["siblings"]
    if s:
        table.add_row("sibling of a pair (fork_team of a 2-scope cut), median",
                      f"{s['median_ms']:.3f} ms (p90 {s['p90_ms']:.3f}; "
                      f"target <= {TARGET_MS} ms)")
    rec = report["suffix"]["recorded"] if report["suffix"] else None
    if rec:
        table.add_row(f"recorded run ({rec['steps']} steps)",
                      f"{rec['tokens']} tokens, {rec['seconds']:.2f} s")
    for r in report["suffix"]["rows"] if report["suffix"] else ():
        share = (f" ({r['token_share']:.0%} of the tokens, {r['time_share']:.0%} of the time)"
                 if "token_share" in r else "")
        table.add_row(f"sibling forked before step {r['fork_before_step']}",
                      f"{r['live_steps']} live steps, {r['live_tokens']} tokens, "
                      f"{r['seconds']:.2f} s{share}")
    ray = report.get("ray")
    if ray:
        table.add_row(f"siblings per second on Ray ({ray['workers']} local workers, "
                      f"{ray['siblings']} siblings of a {ray['steps']}-step run)",
                      f"{ray['ray_per_second']:.2f} (in process, 2 at once: "
                      f"{ray['local_per_second']:.2f})")
    return table


if __name__ == "__main__":
    from bench.cli import app

    app(["rollouts", *sys.argv[1:]], prog_name="corral bench")
