"""Replay: a recorded run re-runs deterministically, and a changed prompt diverges where it
changed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agents import Changes, CodingAgent, ModelCaller, replay
from agents.model_server import ScriptedModelServer
from agents.providers import OpenAIProvider
from coordinator import ConflictGuard, Coordinator, Effect, TraceEntry
from tests.agents._helpers import CALC, by_step, call
from tests.conftest import make_repo

SCRIPT = by_step([
    call("read_file", path="calc.py"),
    call("edit", path="calc.py", old="    return a + b\n",
         new="    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"),
    call("write_file", path="notes.md", content="mul added\n"),
    call("run", command="python -c 'import calc; print(calc.mul(6, 7))'"),
    call("finish", summary="added mul"),
])


@pytest.fixture
def server(server: ScriptedModelServer) -> ScriptedModelServer:
    """The shared scripted server, playing SCRIPT as model "m"."""
    server.script("m", SCRIPT)
    return server


@pytest_asyncio.fixture
async def recorded(
    tmp_path: Path, server: ScriptedModelServer
) -> AsyncIterator[tuple[Coordinator, OpenAIProvider]]:
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    provider = OpenAIProvider("m", base_url=server.base_url)
    async with Coordinator.open(tmp_path / "s", repo, clock=lambda: 1700000000,
                                policies=[ConflictGuard()]) as coord:
        scope = await coord.root.fork("w")
        result = await CodingAgent(coord, scope, ModelCaller(coord, provider), "add mul").run()
        assert result.status == "finished"
        yield coord, provider
    await provider.aclose()


def _own(coord: Coordinator, name: str) -> list[TraceEntry]:
    """The effects a scope made after its fork, oldest first."""
    return [e for e in coord.trace.log(coord.scope(name).head)
            if e.effect is not None and e.effect.scope == name and e.effect.seq > 0]


def _normal(entry: TraceEntry, name: str) -> tuple[str, dict[str, Any]]:
    """An effect record with the scope's name taken out of its ids, its parent commit left
    out (the replay's commits are others, on another branch), `replayed` unset, and a
    command's wall-clock duration (the one measured field: commands re-run) zeroed."""
    eff = entry.effect
    assert isinstance(eff, Effect)
    data = eff.model_dump(mode="json", exclude={"parent"})
    if data["outcome"] and data["outcome"].get("kind") == "exec":
        data["outcome"]["duration_s"] = 0.0
    text = repr(data).replace(f"'{name}#", "'S#").replace(f"'{name}'", "'S'")
    if data["outcome"] and data["outcome"].get("kind") == "model":
        text = text.replace("'replayed': True", "'replayed': False")
    return entry.tree, {"record": text}


@pytest.mark.slow
async def test_replay_reproduces_the_trace_exactly(
    recorded: tuple[Coordinator, OpenAIProvider], server: ScriptedModelServer
) -> None:
    """Replaying a run from its fork point serves every model call from the recording (no
    request reaches the server) and yields the same effect records and the same trees."""
    coord, provider = recorded
    w = coord.scope("w")
    before = len(server.requests)
    report = await replay(coord, w, w.fork_point, provider=provider)
    assert len(server.requests) == before
    assert report.diverged_at is None and report.served == 5 and report.live_calls == 0
    assert report.tokens_saved > 0 and report.cache_reuse is None
    original = _own(coord, "w")
    again = _own(coord, report.scope)
    assert [e.effect.seq for e in again] == [e.effect.seq for e in original]  # type: ignore[union-attr]
    assert [_normal(e, report.scope) for e in again] == [_normal(e, "w") for e in original]
    served = [e.effect for e in again if e.effect and e.effect.kind == "model.call"]
    assert all(e.outcome.replayed for e in served)  # type: ignore[union-attr]
    assert report.result.patch == (await CodingAgent(coord, w, ModelCaller(coord, provider),
                                                     "").patch())


@pytest.mark.slow
async def test_a_note_at_step_k_diverges_exactly_at_k(
    recorded: tuple[Coordinator, OpenAIProvider], server: ScriptedModelServer
) -> None:
    """A prompt changed at step 3 is served from the recording for steps 1-2 and goes live
    at step 3; the live suffix reads its shared prefix from the provider's prompt cache."""
    coord, provider = recorded
    w = coord.scope("w")
    before = len(server.requests)
    report = await replay(coord, w, w.fork_point, provider=provider,
                          changes=Changes(notes={3: "Keep notes.md short."}))
    assert (report.diverged_at, report.served) == (3, 2)
    assert report.live_calls == 3 == len(server.requests) - before
    assert report.live_cached_tokens > 0 and report.cache_reuse is not None
    assert report.result.status == "finished"


async def test_replay_from_a_later_commit_rebuilds_the_conversation(
    recorded: tuple[Coordinator, OpenAIProvider],
) -> None:
    """Forking after step 2 rebuilds the conversation from the trace: steps 3-5 are served
    from the recording, and a changed system prompt diverges at step 3."""
    coord, provider = recorded
    w = coord.scope("w")
    calls = [e for e in coord.trace.log(w.head) if e.effect and e.effect.kind == "model.call"]
    after_step_2 = coord.trace.log(w.head)[
        [e.commit for e in coord.trace.log(w.head)].index(calls[2].commit) - 1
    ].commit
    same = await replay(coord, w, after_step_2, provider=provider)
    assert (same.diverged_at, same.served, same.live_calls) == (None, 3, 0)
    assert coord.trace.commit(coord.scope(same.scope).head).tree_id == (
        coord.trace.commit(w.head).tree_id
    )
    other = await replay(coord, w, after_step_2, provider=provider,
                         changes=Changes(system="You are terse."))
    assert (other.diverged_at, other.served) == (3, 0)
