"""The scripted model server: the OpenAI and Anthropic wire formats, answered from scripts.

Tests and benchmarks point the real `openai` / `anthropic` SDKs at it (through `base_url`),
so everything between our provider code and the socket is the code that runs in production.

* `POST /v1/chat/completions` answers in OpenAI's chat-completions format;
  `POST /v1/messages` in Anthropic's messages format. Non-streaming only.
* Replies come from a per-model `Script` (`server.script("model-a", [...])`, the same
  scripts as `ScriptedProvider`'s): replies consumed in order, or a function of the request
  JSON. `corral model-server --script FILE` reads them with `read_scripts`.
* `server.fail_next(n, status)` makes the next n requests fail, to exercise retries.
* Prompt caching is emulated (`agents.providers.PrefixCache`), so forks can be shown to reuse
  the provider cache.
* Token ids and logprobs, as vLLM returns them, when an OpenAI-format request asks
  (`return_token_ids: true`, `logprobs: true`): from a small tokenizer and chat template
  (`agents._server_tokens`), deterministic, and a trajectory's turns line up as one sequence.

Prompt-cache emulation: the prompt is cut into *segments* in the order providers cache it
(tools, then system, then each message; Anthropic content blocks are segments of their own).
Each segment is serialized as canonical JSON (sorted keys, no spaces, `cache_control` removed,
because a breakpoint marks the prompt but is not part of it), and split into tokens by
`tokenize`: every run of word characters is one token and every other non-space character is
one token. A prompt's cached tokens are the longest prefix, in whole blocks of `block_size`
tokens (64 by default), that an earlier request for the same API and model already wrote.
OpenAI caches every prompt whole. Anthropic caches only up to the end of the last segment that
carries `cache_control`; the blocks it reads are `cache_read_input_tokens`, the blocks it adds
are `cache_creation_input_tokens`, and `input_tokens` is the rest, as in Anthropic's usage.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

from aiohttp import web

from agents._server_tokens import completion_tokens, logprobs, prompt_tokens
from agents.providers import (
    CacheUsage,
    PrefixCache,
    Reply,
    Script,
    ScriptedCall,
    read_scripts,
    tokenize,
)

# The script vocabulary (agents.providers.scripted), re-exported so tests import one module.
__all__ = ["Api", "LoggedRequest", "Reply", "Script", "ScriptedCall", "ScriptedModelServer",
           "read_scripts"]

Api = Literal["openai", "anthropic"]


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    """A request as the server received it, with the status it answered."""

    api: Api
    model: str
    body: bytes
    """The exact request body bytes, for byte-stability checks."""
    status: int

    def json(self) -> dict[str, Any]:
        """Returns the body parsed as JSON."""
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class _Rejected(Exception):
    """A request the server answers with an error status instead of a reply."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error"}


class ScriptedModelServer:
    """An aiohttp server on loopback that answers OpenAI and Anthropic requests from scripts.

    Use it as `async with ScriptedModelServer() as server:`; it binds `host:port` (port 0 picks
    a free port) and exposes `base_url` for the OpenAI SDK and `anthropic_base_url` for the
    Anthropic SDK.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, block_size: int = 64) -> None:
        self.host = host
        self.port = port
        self.cache = PrefixCache(block_size)
        self.requests: list[LoggedRequest] = []
        self._scripts: dict[str, Script[dict[str, Any]]] = {}
        self._next_step: dict[str, int] = {}
        self._failures: list[int] = []
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI SDK's `base_url`: `http://HOST:PORT/v1`."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The Anthropic SDK's `base_url` (the SDK appends `/v1/messages`)."""
        return f"http://{self.host}:{self.port}"

    def script(self, model: str, steps: Script[dict[str, Any]]) -> None:
        """Serves `steps` to requests naming `model`, replacing any earlier script for it."""
        self._scripts[model] = steps if callable(steps) else list(steps)
        self._next_step[model] = 0

    def fail_next(self, count: int = 1, status: int = 500) -> None:
        """Answers the next `count` requests, whatever their model, with `status`."""
        self._failures.extend([status] * count)

    async def start(self) -> None:
        """Binds the socket and starts serving; `port` then holds the bound port."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = self._runner.addresses[0][1]

    async def close(self) -> None:
        """Stops serving and releases the socket."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _openai(self, request: web.Request) -> web.Response:
        return await self._serve(request, "openai")

    async def _anthropic(self, request: web.Request) -> web.Response:
        return await self._serve(request, "anthropic")

    async def _serve(self, request: web.Request, api: Api) -> web.Response:
        body = await request.read()
        model = ""
        try:
            payload = _parse(body, api)
            model = payload["model"]
            if self._failures:
                status = self._failures.pop(0)
                raise _Rejected(status, f"scripted failure with status {status}")
            response = self._answer(payload, api)
        except _Rejected as rejected:
            self.requests.append(LoggedRequest(api, model, body, rejected.status))
            return _error(api, rejected.status, rejected.message)
        self.requests.append(LoggedRequest(api, model, body, 200))
        return web.json_response(response)

    def _answer(self, payload: dict[str, Any], api: Api) -> dict[str, Any]:
        model: str = payload["model"]
        # Ids derive from the request, so the same conversation always gets the same ids.
        seed = hashlib.sha256(_canonical(payload).encode()).hexdigest()[:20]
        segments = _segments(payload, api)
        reply = self._next_reply(model, payload)
        tokens = [token for _, segment in segments for token in segment]
        cacheable = len(tokens)
        if api == "anthropic":
            ends = _ends(segments)
            cacheable = max(
                (end for (marked, _), end in zip(segments, ends, strict=True) if marked), default=0
            )
        usage = self.cache.use(f"{api}\x00{model}", tokens, cacheable)
        completion = len(tokenize(reply.text)) + sum(
            len(tokenize(call.name + _canonical(dict(call.arguments)))) for call in reply.tool_calls
        )
        if api == "openai":
            response = _openai_response(model, reply, seed, usage, completion)
            _add_tokens(response, payload, reply)
            return response
        return _anthropic_response(model, reply, seed, usage, completion)

    def _next_reply(self, model: str, payload: dict[str, Any]) -> Reply:
        if model not in self._scripts:
            raise _Rejected(404, f"no script for model {model!r}")
        script = self._scripts[model]
        if callable(script):
            reply = script(payload)
        else:
            step = self._next_step[model]
            if step >= len(script):
                raise _Rejected(400, f"script for model {model!r} is exhausted after {step} steps")
            self._next_step[model] = step + 1
            reply = script[step]
        return Reply(reply) if isinstance(reply, str) else reply


def _parse(body: bytes, api: Api) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except ValueError as error:
        raise _Rejected(400, f"request body is not JSON: {error}") from error
    if not isinstance(payload, dict) or not isinstance(payload.get("model"), str):
        raise _Rejected(400, "request needs a string 'model'")
    if payload.get("stream"):
        raise _Rejected(400, "stream=true is not supported by the scripted model server")
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _Rejected(400, "request needs a non-empty 'messages' list")
    if not all(isinstance(message, dict) for message in messages):
        raise _Rejected(400, "every message must be a JSON object")
    if api == "anthropic" and not isinstance(payload.get("max_tokens"), int):
        raise _Rejected(400, "max_tokens: field required")
    _check_tool_results(messages, api)
    return payload


def _check_tool_results(messages: list[Any], api: Api) -> None:
    """Rejects tool results that answer no earlier tool call, as the real APIs do."""
    issued: set[str] = set()
    for message in messages:
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if api == "openai":
            issued.update(call["id"] for call in message.get("tool_calls") or [])
            answered = [message.get("tool_call_id")] if message.get("role") == "tool" else []
        else:
            issued.update(b["id"] for b in blocks if b.get("type") == "tool_use")
            answered = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        for call_id in answered:
            if call_id not in issued:
                raise _Rejected(400, f"tool result for unknown tool call id {call_id!r}")


def _segments(payload: dict[str, Any], api: Api) -> list[tuple[bool, list[str]]]:
    """Returns the prompt as (carries a cache breakpoint, tokens) segments in cache order."""
    items: list[Any] = list(payload.get("tools") or [])
    system = payload.get("system")
    items.extend(system if isinstance(system, list) else [system] if system else [])
    for message in payload["messages"]:
        content = message.get("content")
        if api == "anthropic" and isinstance(content, list):
            items.append({"role": message.get("role")})
            items.extend(content)
        else:
            items.append(message)
    return [(_marked(item), tokenize(_canonical(_unmarked(item)))) for item in items]


def _marked(item: Any) -> bool:
    return isinstance(item, dict) and "cache_control" in item


def _unmarked(item: Any) -> Any:
    if isinstance(item, dict):
        return {key: value for key, value in item.items() if key != "cache_control"}
    return item


def _ends(segments: Iterable[tuple[bool, list[str]]]) -> list[int]:
    ends, total = [], 0
    for _, tokens in segments:
        total += len(tokens)
        ends.append(total)
    return ends


def _openai_response(
    model: str, reply: Reply, seed: str, usage: CacheUsage, completion: int
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{seed}_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
            }
            for index, call in enumerate(reply.tool_calls)
        ]
    return {
        "id": f"chatcmpl-{seed}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": usage.prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": usage.read_tokens},
        },
    }


def _add_tokens(response: dict[str, Any], payload: dict[str, Any], reply: Reply) -> None:
    """vLLM's token fields, when the request asks for them: `prompt_token_ids` and
    `choices[0].token_ids` for `return_token_ids`, `choices[0].logprobs` for `logprobs`."""
    ids = payload.get("return_token_ids") is True
    probs = payload.get("logprobs") is True
    if not (ids or probs):
        return
    prompt = prompt_tokens(payload)
    completion = completion_tokens(reply.text, reply.tool_calls)
    choice = response["choices"][0]
    if ids:
        response["prompt_token_ids"] = prompt.ids
        choice["token_ids"] = completion.ids
    if probs:
        seed = payload.get("seed")
        values = logprobs(prompt.ids, seed if isinstance(seed, int) else None, completion.ids)
        choice["logprobs"] = {"content": [
            {"token": text, "logprob": value, "bytes": list(text.encode()), "top_logprobs": []}
            for text, value in zip(completion.texts, values, strict=True)], "refusal": None}


def _anthropic_response(
    model: str, reply: Reply, seed: str, usage: CacheUsage, completion: int
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content.extend(
        {
            "type": "tool_use",
            "id": f"toolu_{seed}_{index}",
            "name": call.name,
            "input": dict(call.arguments),
        }
        for index, call in enumerate(reply.tool_calls)
    )
    uncached = usage.prompt_tokens - usage.read_tokens - usage.written_tokens
    return {
        "id": f"msg_{seed}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": uncached,
            "output_tokens": completion,
            "cache_read_input_tokens": usage.read_tokens,
            "cache_creation_input_tokens": usage.written_tokens,
        },
    }


def _error(api: Api, status: int, message: str) -> web.Response:
    kind = _ERROR_TYPES.get(status, "api_error")
    if api == "openai":
        body: dict[str, Any] = {"error": {"message": message, "type": kind, "code": None}}
    else:
        body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.json_response(body, status=status)


if __name__ == "__main__":
    # `python -m agents.model_server ...` is `corral model-server ...`: one command line
    from agents.cli import app

    app(["model-server", *sys.argv[1:]], prog_name="corral")
