"""The merge step of `--merge corral`: the LLM conflict resolver (the real OpenAI SDK
against the local scripted model server, on the bundled mini suite) and the diff3
regions it is shown."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agents.model_server import Reply, ScriptedModelServer
from bench.cooperbench import RunSpec
from bench.cooperbench._merge import marked_regions
from tests.bench._mini import IMPORTS, one_result, prompt_text


def _resolve_union(payload: dict[str, Any]) -> Reply:
    """A resolver model that keeps both sides of every region (right for additions)."""
    text = prompt_text(payload)
    calls = []
    for m in re.finditer(r"\n\[CONFLICT (\d+)\]\n--- agent2 \(ours\) ---\n(.*?)--- base ---\n"
                         r"(.*?)--- agent1 \(theirs\) ---\n(.*?)(?=\n\[CONFLICT|\Z)", text,
                         re.S):
        calls.append(("resolve", {"region": int(m.group(1)), "text": m.group(2) + m.group(4)}))
    from agents.model_server import ScriptedCall

    return Reply(tool_calls=[ScriptedCall(n, a) for n, a in calls])

@pytest.mark.slow
def test_llm_resolver_resolves_corral_merge_conflicts(server: ScriptedModelServer,
                                                      tmp_path: Path) -> None:
    """Coop oracles on the import-block pair conflict under Corral's merge: without a
    resolver the pair fails; with the LLM resolver (each region's both sides kept) the
    merge is committed with its resolution and the pair passes."""
    server.script("r", _resolve_union)
    common: dict[str, Any] = {**IMPORTS, "settings": ("coop",), "merges": ("corral",),
                              "workers": 1}
    plain = one_result(RunSpec(out=tmp_path / "a", **common))
    resolved = one_result(RunSpec(out=tmp_path / "b", resolver="llm:openai/r",
                            supervisor_base_url=server.base_url, **common))
    assert plain.status == "failed" and plain.merge_status == "conflicts"
    assert resolved.status == "passed", resolved.reason
    assert resolved.resolved == ("textkit/core.py",) and resolved.resolver_tokens > 0
    prompt = prompt_text(json.loads(next(r for r in server.requests if r.model == "r").body))
    assert "[CONFLICT 0]" in prompt and "import string" in prompt
    assert "import unicodedata" in prompt

def test_marked_regions_split_a_diff3_file() -> None:
    marked = (b"a\n<<<<<<< agent2\nours\n||||||| base\nold\n=======\ntheirs\n"
              b">>>>>>> agent1\nz\n")
    lines, regions = marked_regions(marked)
    assert lines == [b"a\n", 0, b"z\n"]
    assert (regions[0].ours, regions[0].base, regions[0].theirs) == (
        [b"ours\n"], [b"old\n"], [b"theirs\n"])
