"""Providers, driven through the real SDKs against the local scripted model server."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from agents.model_server import Reply, ScriptedCall, ScriptedModelServer
from agents.providers import (
    AnthropicProvider,
    ModelError,
    ModelRequest,
    OpenAIProvider,
    Provider,
    ScriptedProvider,
    ToolResult,
    ToolSpec,
    UserMessage,
    complete_with_retries,
    provider_from_spec,
)

SYSTEM = "You are a careful coding agent working in a shared repository. " * 12
READ = ToolSpec(
    name="read",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)

Backend = Callable[[ScriptedModelServer], Provider]


def _openai(server: ScriptedModelServer) -> Provider:
    return OpenAIProvider("m", base_url=server.base_url, api_key="dummy")


def _anthropic(server: ScriptedModelServer) -> Provider:
    # No api_key: a loopback base_url needs none.
    return AnthropicProvider("m", base_url=server.anthropic_base_url)


BACKENDS = pytest.mark.parametrize("backend", [_openai, _anthropic], ids=["openai", "anthropic"])


@pytest_asyncio.fixture
async def server() -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer() as running:
        yield running


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never pick up a developer's real keys or endpoints."""
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def _ask(text: str, **fields: object) -> ModelRequest:
    return ModelRequest.model_validate(
        {"model": "m", "system": SYSTEM, "messages": [UserMessage(text=text)], **fields}
    )


@BACKENDS
@pytest.mark.asyncio
async def test_text_reply(server: ScriptedModelServer, backend: Backend) -> None:
    """A text reply comes back as text, end_turn, and usage with every prompt token counted."""
    server.script("m", ["hello there"])
    provider = backend(server)
    response = await provider.complete(_ask("hi"))
    await provider.aclose()
    assert (response.text, response.tool_calls, response.stop_reason) == (
        "hello there",
        (),
        "end_turn",
    )
    assert response.usage.completion_tokens == 2
    assert response.usage.prompt_tokens > 64
    assert response.raw["usage"]


@BACKENDS
@pytest.mark.asyncio
async def test_tool_call_round_trip(server: ScriptedModelServer, backend: Backend) -> None:
    """Tools go out, a tool call comes back, its result goes in, and the final text arrives."""
    server.script("m", [Reply(tool_calls=[ScriptedCall("read", {"path": "a.py"})]), "it prints 1"])
    provider = backend(server)
    first = await provider.complete(_ask("what does a.py do?", tools=[READ]))
    assert first.stop_reason == "tool_use"
    (call,) = first.tool_calls
    assert (call.name, call.arguments) == ("read", {"path": "a.py"})
    request = _ask("what does a.py do?", tools=[READ])
    follow_up = request.model_copy(
        update={
            "messages": (
                *request.messages,
                first.as_message(),
                ToolResult(call_id=call.id, content="print(1)"),
            )
        }
    )
    final = await provider.complete(follow_up)
    await provider.aclose()
    assert (final.text, final.stop_reason) == ("it prints 1", "end_turn")
    sent = server.requests[1].json()
    if isinstance(provider, OpenAIProvider):
        assert sent["tools"][0]["function"]["name"] == "read"
        assert sent["messages"][-1] == {
            "role": "tool",
            "tool_call_id": call.id,
            "content": "print(1)",
        }
    else:
        assert sent["tools"][0]["input_schema"] == READ.parameters
        assert sent["messages"][-1]["content"][0]["tool_use_id"] == call.id


@BACKENDS
@pytest.mark.asyncio
async def test_cached_tokens_grow_when_a_request_extends_the_previous(
    server: ScriptedModelServer, backend: Backend
) -> None:
    """The second turn of a conversation reads the first turn's prompt from the cache."""
    server.script("m", ["one", "two"])
    provider = backend(server)
    request = _ask("first question")
    first = await provider.complete(request)
    longer = request.model_copy(
        update={"messages": (*request.messages, first.as_message(), UserMessage(text="next"))}
    )
    second = await provider.complete(longer)
    await provider.aclose()
    assert first.usage.cached_prompt_tokens == 0
    assert second.usage.cached_prompt_tokens == first.usage.prompt_tokens // 64 * 64
    assert second.usage.prompt_tokens > first.usage.prompt_tokens


@BACKENDS
@pytest.mark.asyncio
async def test_same_request_gives_identical_bytes(
    server: ScriptedModelServer, backend: Backend
) -> None:
    """Two equal ModelRequests, built separately, reach the server as identical bodies."""
    server.script("m", ["a", "b"])
    provider = backend(server)
    for _ in range(2):
        await provider.complete(_ask("same", tools=[READ], temperature=0.0))
    await provider.aclose()
    first, second = server.requests
    assert first.body == second.body
    assert first.json()["temperature"] == 0.0


@pytest.mark.asyncio
async def test_anthropic_requests_carry_two_cache_breakpoints(server: ScriptedModelServer) -> None:
    """The system prompt and the newest message block are marked cache_control ephemeral."""
    server.script("m", [Reply(tool_calls=[ScriptedCall("read", {"path": "a"})]), "done"])
    async with AnthropicProvider("m", base_url=server.anthropic_base_url) as provider:
        request = _ask("go", tools=[READ])
        first = await provider.complete(request)
        result = ToolResult(call_id=first.tool_calls[0].id, content="1")
        turn = (*request.messages, first.as_message(), result)
        await provider.complete(request.model_copy(update={"messages": turn}))
    body = server.requests[1].json()
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    marked = [b for m in body["messages"] for b in m["content"] if "cache_control" in b]
    assert len(marked) == 1


@pytest.mark.asyncio
async def test_retries_after_a_429_then_succeeds(server: ScriptedModelServer) -> None:
    """One 429 costs one retry, reported through on_retry, and the call then succeeds."""
    server.script("m", ["finally"])
    server.fail_next(1, status=429)
    retries: list[tuple[int, int | None]] = []
    async with OpenAIProvider("m", base_url=server.base_url) as provider:
        response = await complete_with_retries(
            provider,
            _ask("hi"),
            base_delay=0.001,
            on_retry=lambda attempt, error: retries.append((attempt, error.status)),
        )
    assert response.text == "finally"
    assert retries == [(1, 429)]


@pytest.mark.asyncio
async def test_gives_up_after_the_last_attempt(server: ScriptedModelServer) -> None:
    """Persistent 500s end in a ModelError with the status, after attempts - 1 async retries."""
    server.fail_next(3, status=500)
    retries: list[int] = []

    async def record(attempt: int, error: ModelError) -> None:
        retries.append(attempt)

    async with AnthropicProvider("m", base_url=server.anthropic_base_url) as provider:
        with pytest.raises(ModelError, match="gave up after 3 attempts") as raised:
            await complete_with_retries(
                provider, _ask("hi"), attempts=3, base_delay=0.001, on_retry=record
            )
    assert raised.value.status == 500
    assert retries == [1, 2]


@pytest.mark.asyncio
async def test_client_errors_are_not_retried(server: ScriptedModelServer) -> None:
    """A 4xx other than 429 (here: an unscripted model) fails at once, without retries."""
    retries: list[int] = []
    async with OpenAIProvider("m", base_url=server.base_url) as provider:
        with pytest.raises(ModelError, match="answered 404") as raised:
            await complete_with_retries(
                provider, _ask("hi"), on_retry=lambda attempt, _: retries.append(attempt)
            )
    assert (raised.value.status, raised.value.retryable, retries) == (404, False, [])


@BACKENDS
@pytest.mark.asyncio
async def test_unreachable_server_is_a_clear_model_error(backend: Backend) -> None:
    """A closed port gives 'model server at URL unreachable' after the retries."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    closed = ScriptedModelServer(port=port)  # never started: only its URLs are used
    provider = backend(closed)
    with pytest.raises(
        ModelError, match=rf"model server at http://127.0.0.1:{port}\S* unreachable"
    ):
        await complete_with_retries(provider, _ask("hi"), attempts=2, base_delay=0.001)
    await provider.aclose()


@pytest.mark.parametrize(
    ("spec", "variable"),
    [("openai/gpt-4o-mini", "OPENAI_API_KEY"), ("anthropic/claude-x", "ANTHROPIC_API_KEY")],
)
def test_missing_key_names_the_variable(spec: str, variable: str) -> None:
    """Without a key, a provider for the real endpoint says which variable to set."""
    with pytest.raises(ModelError, match=f"{variable} is not set"):
        provider_from_spec(spec)


@pytest.mark.asyncio
async def test_key_from_the_environment_is_used(
    server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OPENAI_API_KEY is read when no key is passed."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server.script("m", ["ok"])
    provider = provider_from_spec("openai/m", base_url=server.base_url)
    assert (await provider.complete(_ask("hi"))).text == "ok"
    await provider.aclose()


def test_provider_from_spec_parses_backend_and_model() -> None:
    """The model is everything after the first slash; unknown backends are refused."""
    provider = provider_from_spec("openai/org/model-7b", base_url="http://localhost:8000/v1")
    assert isinstance(provider, OpenAIProvider) and provider.model == "org/model-7b"
    assert isinstance(provider_from_spec("scripted/echo"), ScriptedProvider)
    with pytest.raises(ValueError, match="not PROVIDER/MODEL"):
        provider_from_spec("openai")
    with pytest.raises(ValueError, match="unknown provider 'gemini'"):
        provider_from_spec("gemini/x")


@pytest.mark.asyncio
async def test_scripted_provider_serves_replies_in_order_then_fails() -> None:
    """Replies come in order with deterministic ids; running out is a non-retryable error."""
    provider = ScriptedProvider([Reply(tool_calls=[ScriptedCall("read", {"path": "a"})]), "done"])
    first = await provider.complete(_ask("go"))
    again = await ScriptedProvider([Reply(tool_calls=[ScriptedCall("read")])]).complete(_ask("go"))
    assert first.tool_calls[0].id == again.tool_calls[0].id
    assert (await provider.complete(_ask("go"))).text == "done"
    with pytest.raises(ModelError, match="no replies left") as raised:
        await provider.complete(_ask("go"))
    assert not raised.value.retryable


@pytest.mark.asyncio
async def test_scripted_provider_echoes_without_a_script_and_counts_cache() -> None:
    """The spec-built scripted provider echoes the last user message and emulates caching."""
    provider = provider_from_spec("scripted/echo")
    first = await provider.complete(_ask("hello"))
    second = await provider.complete(_ask("hello"))
    assert first.text == "hello"
    assert second.usage.cached_prompt_tokens == first.usage.prompt_tokens // 64 * 64 > 0
