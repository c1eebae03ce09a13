"""The prompt-cache benchmark of replay (`agents.replay`): cache reuse of fork-and-replay.

A built-in coding agent runs a scripted task (read two files, make a series of edits, run
the tests, finish) against the local model server (`agents.model_server`), through the real
`openai` and `anthropic` SDKs, with the server's prompt-cache emulation (blocks of 64
tokens). Then the run is replayed from its fork point with a note added at step k: steps
before k are served from the recording (zero tokens), step k and after go live. The figure
is the share of the live suffix's prompt tokens the server served from its cache (Shepherd
reports about 95%; the target is >= 95%).

    corral bench replay [--diverge 4,8] [-o FILE]

(The command keeps the short name: under `corral bench` it is the benchmark of replay.)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

__all__ = ["TARGET", "render", "run", "run_async"]

TARGET = 0.95


def _source(functions: int) -> str:
    parts = ['"""Order pricing rules."""\n']
    for i in range(functions):
        parts.append(
            f"\n\ndef rule_{i}(order):\n"
            f'    """Discount rule {i}: orders above {100 + i} get {i % 7}% off."""\n'
            f"    if order.total > {100 + i}:\n"
            f"        return order.total * {(100 - i % 7) / 100}\n"
            f"    return order.total\n"
        )
    return "".join(parts)


def _tests(functions: int) -> str:
    body = "".join(
        f"\n    def test_rule_{i}(self):\n"
        f"        self.assertEqual(pricing.rule_{i}(Order({50 + i})), {50 + i})\n"
        for i in range(0, functions, 3)
    )
    return (
        "import unittest\n\nimport pricing\n\n\nclass Order:\n    def __init__(self, total):\n"
        "        self.total = total\n\n\nclass PricingTest(unittest.TestCase):" + body
        + '\n\nif __name__ == "__main__":\n    unittest.main()\n'
    )


def _script(edits: int) -> list[Any]:
    from agents.model_server import Reply, ScriptedCall

    def call(name: str, **args: Any) -> Reply:
        return Reply(f"Step: {name}.", [ScriptedCall(name, args)])

    steps = [call("read_file", path="pricing.py"), call("read_file", path="test_pricing.py")]
    for i in range(edits):
        steps.append(call(
            "edit", path="pricing.py", old=f"def rule_{i}(order):\n",
            new=f"def rule_{i}(order):\n    # reviewed: rule {i} keeps totals non-negative\n",
        ))
    steps.append(call("run", command="python -m unittest -q test_pricing"))
    steps.append(call("finish", summary=f"reviewed {edits} rules"))
    return steps


async def _measure(api: str, diverge: Sequence[int], functions: int, edits: int,
                   work: Path) -> dict[str, Any]:
    from agents import Changes, CodingAgent, ModelCaller, replay
    from agents.model_server import ScriptedModelServer
    from agents.providers import AnthropicProvider, OpenAIProvider, Provider
    from coordinator import Coordinator

    repo = work / f"repo-{api}"
    repo.mkdir()
    (repo / "pricing.py").write_text(_source(functions))
    (repo / "test_pricing.py").write_text(_tests(functions))
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b", "PATH": "/usr/bin:/bin:/usr/local/bin"}
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "snapshot"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env)
    script = _script(edits)

    def by_step(payload: dict[str, Any]) -> Any:
        n = sum(1 for m in payload["messages"] if m.get("role") == "assistant")
        return script[min(n, len(script) - 1)]

    out: dict[str, Any] = {"api": api, "steps": len(script), "replays": []}
    async with ScriptedModelServer() as server:
        server.script("bench", by_step)
        provider: Provider = (
            OpenAIProvider("bench", base_url=server.base_url) if api == "openai"
            else AnthropicProvider("bench", base_url=server.anthropic_base_url)
        )
        async with Coordinator.open(work / f"state-{api}", repo) as coord:
            scope = await coord.root.fork("original")
            caller = ModelCaller(coord, provider)
            first = await CodingAgent(coord, scope, caller, "Review every pricing rule.",
                                      max_steps=64).run()
            out["original"] = {"status": first.status, "prompt_tokens": caller.prompt_tokens,
                               "cached_tokens": caller.cached_tokens}
            for k in diverge:
                rep = await replay(coord, scope, scope.fork_point, provider=provider,
                                   changes=Changes(notes={k: "Keep comments short."}),
                                   max_steps=64)
                out["replays"].append({
                    "diverge_at": k, "diverged_at": rep.diverged_at, "served": rep.served,
                    "live_calls": rep.live_calls, "tokens_saved": rep.tokens_saved,
                    "live_prompt_tokens": rep.live_prompt_tokens,
                    "live_cached_tokens": rep.live_cached_tokens,
                    "cache_reuse": rep.cache_reuse, "status": rep.result.status,
                })
        await provider.aclose()
    return out


async def run_async(diverge: Sequence[int] = (4, 8), functions: int = 60,
                    edits: int = 10) -> dict[str, Any]:
    """Returns the report: per API, the original run and one replay per divergence step."""
    results = []
    with tempfile.TemporaryDirectory(prefix="corral-bench-replay-") as tmp:
        for api in ("openai", "anthropic"):
            work = Path(tmp) / api
            work.mkdir()
            results.append(await _measure(api, diverge, functions, edits, work))
    live = sum(r["live_prompt_tokens"] for res in results for r in res["replays"])
    cached = sum(r["live_cached_tokens"] for res in results for r in res["replays"])
    reuse = cached / live if live else 0.0
    return {"block_size": 64, "functions": functions, "edits": edits, "target": TARGET,
            "cache_reuse": reuse, "meets_target": reuse >= TARGET, "apis": results}


def run(diverge: Sequence[int] = (4, 8), functions: int = 60, edits: int = 10) -> dict[str, Any]:
    """Synchronous `run_async`."""
    return asyncio.run(run_async(diverge, functions, edits))


def render(report: dict[str, Any]) -> Table:
    table = Table("api", "diverged at", "served", "live", "tokens saved", "live prompt",
                  "cached", "reuse",
                  title="fork-and-replay prompt-cache reuse (local model server, 64-token blocks)",
                  caption=f"overall reuse of the live suffix: {report['cache_reuse']:.1%} "
                  f"(target {report['target']:.0%})")
    for res in report["apis"]:
        for r in res["replays"]:
            table.add_row(res["api"], str(r["diverged_at"]), str(r["served"]),
                          str(r["live_calls"]), str(r["tokens_saved"]),
                          str(r["live_prompt_tokens"]), str(r["live_cached_tokens"]),
                          f"{r['cache_reuse']:.1%}" if r["cache_reuse"] is not None else "-")
    return table


if __name__ == "__main__":
    # `python -m bench.replay_cache ...` is `corral bench replay ...`: one command line
    from bench.cli import app

    app(["replay", *sys.argv[1:]], prog_name="corral bench")
