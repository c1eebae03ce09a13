"""Pairs of the bundled mini suite the team and merge tests run, and helpers to read
what a scripted model was asked and what a one-pair run gave."""

from __future__ import annotations

from typing import Any

from bench.cooperbench import PairResult, RunSpec, run

# invoice 1-3 (adjacent lines): the guard blocks agent 1's second hunk, which its
# feature's tests need.
ADJACENT = {"task": "invoice", "pairs": "1-3"}
# textkit 3-4 (an import block both features extend): Corral's merge conflicts.
IMPORTS = {"task": "textkit", "pairs": "3-4"}


def prompt_text(payload: dict[str, Any]) -> str:
    """Every message's text of an OpenAI or Anthropic request, joined."""
    out = []
    for m in payload["messages"]:
        c = m.get("content")
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, list):
            out.extend(str(b.get("text", b.get("content", ""))) for b in c)
    return "\n".join(out)


def one_result(spec: RunSpec) -> PairResult:
    results = run(spec)["results"]
    assert len(results) == 1, results
    return results[0]
