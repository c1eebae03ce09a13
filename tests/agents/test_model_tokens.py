"""Token-level model effects: the server's token ids and logprobs, asked for through the
real `openai` SDK, kept as a blob beside each call's request and response; absent (and
flagged so) when the server sends none."""

from __future__ import annotations

import itertools
from pathlib import Path

from agents import CodingAgent, ModelCaller, canonical, read_tokens
from agents._server_tokens import SPECIAL, completion_tokens, prompt_tokens
from agents.model_server import Reply, ScriptedCall, ScriptedModelServer
from agents.providers import (
    AnthropicProvider,
    ModelRequest,
    OpenAIProvider,
    Tokens,
    UserMessage,
    provider_from_spec,
)
from coordinator import Coordinator, ModelCall, ModelOutcome
from tests.agents._helpers import CALC, by_step, call
from tests.conftest import make_repo

ASK = ModelRequest(model="m", system="Be brief.", messages=(UserMessage(text="add mul"),))


async def test_token_ids_and_logprobs_come_back_when_asked(server: ScriptedModelServer) -> None:
    """With logprobs and token ids asked for, the response carries the prompt's and the
    completion's ids and one logprob per completion token, taken out of its raw JSON; the
    same request gives the same tokens, another seed other logprobs."""
    server.script("m", lambda payload: Reply("sure", [ScriptedCall("read_file", {"path": "a"})]))
    async with OpenAIProvider("m", base_url=server.base_url, logprobs=True,
                              token_ids=True) as provider:
        first = await provider.complete(ASK)
        again = await provider.complete(ASK)
        other = await provider.complete(ASK.model_copy(update={"seed": 7}))
    sent = server.requests[0].json()
    assert sent["return_token_ids"] is True and sent["logprobs"] is True
    assert "seed" not in sent and server.requests[2].json()["seed"] == 7
    tokens = first.tokens
    assert tokens is not None and tokens.prompt_ids and tokens.completion_ids
    assert tokens.logprobs is not None and len(tokens.logprobs) == len(tokens.completion_ids)
    assert all(-4 < p < 0 for p in tokens.logprobs)
    assert tokens.prompt_ids[-1] == SPECIAL["<|assistant|>"]
    assert tokens.completion_ids[-1] == SPECIAL["<|end|>"]
    assert "prompt_token_ids" not in first.raw and "token_ids" not in first.raw["choices"][0]
    assert first.raw["choices"][0]["logprobs"] is None
    assert again.tokens == tokens
    assert other.tokens is not None and other.tokens.logprobs != tokens.logprobs
    assert other.tokens.completion_ids == tokens.completion_ids


async def test_nothing_is_asked_or_made_up_by_default(server: ScriptedModelServer) -> None:
    """A provider not asked for tokens sends neither option and gets no tokens; so does
    Anthropic's API, which has none."""
    server.script("m", ["hi", "hi"])
    async with OpenAIProvider("m", base_url=server.base_url) as provider:
        plain = await provider.complete(ASK)
    async with AnthropicProvider("m", base_url=server.anthropic_base_url) as provider:
        anthropic = await provider.complete(ASK)
    sent = server.requests[0].json()
    assert "return_token_ids" not in sent and "logprobs" not in sent
    assert plain.tokens is None and anthropic.tokens is None
    assert plain.raw["choices"][0]["logprobs"] is None


def test_the_seed_is_left_out_of_a_request_record_without_one() -> None:
    """A request without a seed records the bytes it did before seeds existed; one with a
    seed records it and reads back equal."""
    assert b"seed" not in canonical(ASK)
    seeded = ASK.model_copy(update={"seed": 3})
    assert canonical(seeded).endswith(b',"seed":3}')
    assert ModelRequest.model_validate_json(canonical(seeded)) == seeded


def test_a_trajectory_is_one_sequence() -> None:
    """The template renders an assistant turn sent back as it generated it, so the next
    prompt starts with the previous prompt and completion."""
    reply = Reply("", [ScriptedCall("edit", {"path": "a.py", "old": "x", "new": "y"})])
    first = {"model": "m", "messages": [{"role": "system", "content": "s"},
                                         {"role": "user", "content": "do it"}]}
    p1 = prompt_tokens(first)
    c1 = completion_tokens(reply.text, reply.tool_calls)
    sent_back = {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "edit", "arguments": '{"path":"a.py","new":"y","old":"x"}'}}]}
    second = {**first, "messages": [*first["messages"], sent_back,
                                    {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]}
    p2 = prompt_tokens(second)
    assert p2.ids[: len(p1.ids) + len(c1.ids)] == p1.ids + c1.ids
    assert len(p2.ids) > len(p1.ids) + len(c1.ids)


SCRIPT = by_step([
    call("read_file", path="calc.py"),
    call("write_file", path="notes.md", content="mul next\n"),
    call("finish", summary="noted"),
])


async def test_a_run_keeps_each_calls_tokens_beside_it(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    """Every model call of a run with tokens asked for records a tokens blob that reads
    back as the server's ids; consecutive calls line up; a run without them records None."""
    server.script("m", SCRIPT)
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    async with Coordinator.open(tmp_path / "s", repo) as coord:
        spec = provider_from_spec("openai/m", server.base_url, logprobs=True, token_ids=True)
        plain = provider_from_spec("openai/m", server.base_url)
        for name, provider in (("tok", spec), ("plain", plain)):
            scope = await coord.root.fork(name)
            result = await CodingAgent(coord, scope, ModelCaller(coord, provider), "t").run()
            assert result.status == "finished"
            await provider.aclose()
        outcomes: dict[str, list[ModelOutcome]] = {}
        for name in ("tok", "plain"):
            outcomes[name] = [
                e.effect.outcome for e in coord.trace.log(coord.scope(name).head)
                if e.effect and isinstance(e.effect.intent, ModelCall)
                and isinstance(e.effect.outcome, ModelOutcome)]
        assert len(outcomes["tok"]) == 3 and all(o.tokens for o in outcomes["tok"])
        assert all(o.tokens is None for o in outcomes["plain"])
        assert all(read_tokens(coord.trace, o) is None for o in outcomes["plain"])
        read = [read_tokens(coord.trace, o) for o in outcomes["tok"]]
        assert all(isinstance(t, Tokens) and t.prompt_ids and t.completion_ids and t.logprobs
                   for t in read)
        served = server.requests[0].json()
        assert list(read[0].prompt_ids or ()) == prompt_tokens(served).ids  # type: ignore[union-attr]
        for before, after in itertools.pairwise(read):
            assert before is not None and after is not None
            joined = [*(before.prompt_ids or ()), *(before.completion_ids or ())]
            assert list((after.prompt_ids or ())[: len(joined)]) == joined
