"""The merge step of `--merge corral`: agent 1's scope merged into a fork of agent 2's
by Corral's merge (N agents: then agents 3..N into it, in turn), and the LLM conflict
resolver (`--resolver llm:PROVIDER/MODEL`).

Corral merges agent 1's scope into a fork of agent 2's (`merged`). When a merge conflicts,
the model sees each conflicted file as git shows it with `merge.conflictStyle=diff3`:
the file with every clean change of both sides merged in, and each conflicting region
numbered, with agent 2's lines ("ours"), the base's and agent 1's ("theirs"). It answers
with one `resolve(region, text)` tool call per region. Each model call is a
`model.call` effect of the `merged` scope; the resolution is then written through the
scope API as that scope's `scope.merge` effect (a two-parent merge commit whose
conflicted files hold the model's text), caused by the last model call. A file the
model leaves unresolved, or a conflict that is not a content conflict (modify/delete,
binary), leaves the merge conflicted: the pair fails as under plain git.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from coordinator import Conflict, Coordinator, MergeResult, Scope

from ._agent_report import AgentReport
from ._patches import git_merge_file
from ._workbench import fold_order

if TYPE_CHECKING:
    from agents import ModelCaller
    from agents.providers import ToolSpec

__all__ = ["RESOLVER_PROMPT", "Region", "marked_regions", "merge_agents", "resolve_merge"]

RESOLVER_PROMPT = """\
You resolve git merge conflicts between two agents who each implemented a different \
feature of the same repository from the same base. Keep both features working: combine \
both sides' intent, never drop one side's feature. For every numbered conflict region, \
call resolve(region, text) with the exact lines that replace the whole region (no \
conflict markers), ending with a newline."""

_MARK = re.compile(rb"^(<{7}|\|{7}|={7}|>{7})(?: .*)?$")


class Region:
    """One conflict region of a diff3-marked file: its three sides."""

    __slots__ = ("base", "ours", "theirs")

    def __init__(self) -> None:
        self.ours: list[bytes] = []
        self.base: list[bytes] = []
        self.theirs: list[bytes] = []


def marked_regions(marked: bytes) -> tuple[list[bytes | int], list[Region]]:
    """Split a diff3-marked file into lines and region numbers, and the regions."""
    out: list[bytes | int] = []
    regions: list[Region] = []
    side: list[bytes] | None = None
    for line in marked.splitlines(keepends=True):
        m = _MARK.match(line.rstrip(b"\r\n"))
        mark = m.group(1)[:1] if m else b""
        if mark == b"<" and side is None:
            regions.append(Region())
            out.append(len(regions) - 1)
            side = regions[-1].ours
        elif mark == b"|" and side is not None:
            side = regions[-1].base
        elif mark == b"=" and side is not None:
            side = regions[-1].theirs
        elif mark == b">" and side is not None:
            side = None
        elif side is not None:
            side.append(line)
        else:
            out.append(line)
    return out, regions


def _diff3(ours: bytes, base: bytes, theirs: bytes) -> bytes:
    """`git merge-file -p --diff3`: the merged file with conflicts marked."""
    return git_merge_file(ours, base, theirs, "--diff3", "-L", "agent2", "-L", "base", "-L",
                          "agent1").stdout


def _prompt(path: str, lines: list[bytes | int], regions: list[Region]) -> str:
    def block(label: str, body: list[bytes]) -> str:
        text = b"".join(body).decode(errors="replace")
        return f"--- {label} ---\n{text}" + ("" if text.endswith("\n") or not text else "\n")

    parts = [f"File {path} after the merge; each [CONFLICT n] marks a region to resolve:\n"]
    parts.append("".join(f"[CONFLICT {x}]\n" if isinstance(x, int) else
                         x.decode(errors="replace") for x in lines))
    for i, r in enumerate(regions):
        parts.append(f"\n[CONFLICT {i}]\n" + block("agent2 (ours)", r.ours)
                     + block("base", r.base) + block("agent1 (theirs)", r.theirs))
    return "".join(parts)


_TOOL: ToolSpec | None = None


def _tool() -> ToolSpec:
    global _TOOL
    if _TOOL is None:
        from agents.providers import ToolSpec

        _TOOL = ToolSpec(name="resolve", description="Replace conflict region `region` "
                         "with `text`.", parameters={"type": "object", "properties": {
                             "region": {"type": "integer"}, "text": {"type": "string"}},
                             "required": ["region", "text"]})
    return _TOOL


async def _resolve_file(coord: Coordinator, scope: Scope, caller: ModelCaller, c: Conflict,
                        report: AgentReport) -> tuple[bytes | None, str | None]:
    """The model's resolution of one conflicted file, and the cause (its model call)."""
    from agents.providers import ModelRequest, UserMessage

    if c.kind not in ("content", "add/add") or c.ours is None or c.theirs is None:
        report.notes.append(f"resolver: {c.path}: a {c.kind} conflict is not resolved")
        return None, None
    trace = coord.trace
    ours, theirs = await coord.io(trace.blob, c.ours), await coord.io(trace.blob, c.theirs)
    base = await coord.io(trace.blob, c.ancestor) if c.ancestor else b""
    marked = await asyncio.to_thread(_diff3, ours, base, theirs)
    lines, regions = marked_regions(marked)
    if not regions:
        return marked, None
    request = ModelRequest(model=caller.provider.model, system=RESOLVER_PROMPT,
                           messages=(UserMessage(text=_prompt(c.path, lines, regions)),),
                           tools=(_tool(),))
    result = await caller.call(scope, request)
    u = result.response.usage
    report.record["resolver_tokens"] = (report.record.get("resolver_tokens", 0)
                                        + u.prompt_tokens + u.completion_tokens)
    answers: dict[int, bytes] = {}
    for use in result.response.tool_calls:
        try:
            i, text = int(use.arguments["region"]), str(use.arguments["text"])
        except (KeyError, TypeError, ValueError):
            continue
        if 0 <= i < len(regions):
            answers[i] = text.encode() if not text or text.endswith("\n") else (
                text + "\n").encode()
    if len(answers) != len(regions):
        report.notes.append(f"resolver: {c.path}: {len(regions) - len(answers)} of "
                            f"{len(regions)} region(s) left unresolved")
        return None, result.effect.id
    return b"".join(answers[x] if isinstance(x, int) else x for x in lines), result.effect.id


async def resolve_merge(coord: Coordinator, target: Scope, other: Scope, resolver: str | None,
                        base_url: str | None, report: AgentReport) -> MergeResult:
    """Merge `other` into `target`; on conflicts with an `llm:PROVIDER/MODEL` resolver,
    the model resolves each file and the merge is committed with its resolutions."""
    if resolver is None:
        return await target.merge(other)
    dry = await target.merge(other, dry_run=True)
    if dry.clean:
        return await target.merge(other)
    from agents import ModelCaller
    from agents.providers import provider_from_spec

    provider = provider_from_spec(resolver.removeprefix("llm:"), base_url)
    caller = ModelCaller(coord, provider)
    resolutions: dict[str, bytes] = {}
    cause = None
    try:
        for c in dry.conflicts:
            text, why = await _resolve_file(coord, target, caller, c, report)
            cause = why or cause
            if text is None:
                return await target.merge(other, cause=cause)  # records the conflict
            resolutions[c.path] = text
    finally:
        await provider.aclose()
    merged = await target.merge(
        other, resolver=lambda c, *_: resolutions[c.path], cause=cause)
    if merged.commit is not None:
        report.record["resolved"] = tuple(sorted(resolutions))
    return merged


async def merge_agents(coord: Coordinator, agents: Sequence[Scope], name: str,
                       resolver: str | None, base_url: str | None, report: AgentReport
                       ) -> tuple[Scope, MergeResult]:
    """The agents' scopes folded into `name`, a fork of agent 2's: agent 1 merged into
    it, then agents 3..N in turn (the evaluation's fold); each merge that conflicts is
    resolved by `resolver` when there is one, and the first that stays conflicted
    stops the fold. The merged scope and the last merge's result (its conflicts when
    the fold stopped)."""
    order = [agents[i] for i in fold_order(len(agents))]
    target = await order[0].fork(name)
    if resolver is None:
        team = await coord.merge_team(target, order[1:], order="given")
        return target, team.conflict or team.merges[-1]
    result: MergeResult | None = None
    for member in order[1:]:
        result = await resolve_merge(coord, target, member, resolver, base_url, report)
        if result.tree is None:
            break
    assert result is not None
    return target, result
