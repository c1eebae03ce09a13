"""Scripted replies: the script vocabulary and an in-process provider that serves it.

`Reply` and `ScriptedCall` are what scripts are written in, here and in `agents.model_server`.
`ScriptedProvider` answers without any server, for unit tests; it counts tokens and prompt
cache hits like the model server does, with OpenAI's rule that every prompt is cacheable.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._errors import ModelError
from ._prompt_cache import PrefixCache, tokenize
from ._records import ModelRequest, ModelResponse, ToolUse, Usage, UserMessage

__all__ = ["Reply", "ScriptedCall", "ScriptedProvider"]


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """A tool call a script makes the model emit; its id is derived from the request."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted model turn: text, tool calls, or both."""

    text: str = ""
    tool_calls: Sequence[ScriptedCall] = ()

    def __post_init__(self) -> None:
        # Callers write lists; a tuple keeps the frozen reply immutable.
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))


Replies = Sequence[Reply | str] | Callable[[ModelRequest], Reply | str]


class ScriptedProvider:
    """Answers requests from `replies` in order, or from a function of the request.

    Without replies it echoes the last user message, which is enough for smoke tests.
    """

    def __init__(
        self, replies: Replies | None = None, *, model: str = "scripted", block_size: int = 64
    ) -> None:
        self._model = model
        self._replies = replies if replies is None or callable(replies) else list(replies)
        self._next = 0
        self._cache = PrefixCache(block_size)
        self.requests: list[ModelRequest] = []

    @property
    def model(self) -> str:
        return self._model

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Returns the next scripted reply, with ids and usage derived from the request.

        Raises:
            ModelError: the script has no replies left.
        """
        self.requests.append(request)
        reply = self._reply(request)
        canonical = request.model_dump_json()
        seed = hashlib.sha256(canonical.encode()).hexdigest()[:20]
        calls = tuple(
            ToolUse(id=f"call_{seed}_{index}", name=call.name, arguments=dict(call.arguments))
            for index, call in enumerate(reply.tool_calls)
        )
        parts = [*request.tools, request.system, *request.messages]
        tokens = [
            token
            for part in parts
            for token in tokenize(part if isinstance(part, str) else part.model_dump_json())
        ]
        cache = self._cache.use(request.model, tokens, len(tokens))
        completion = len(tokenize(reply.text)) + sum(
            len(tokenize(call.name + json.dumps(call.arguments))) for call in calls
        )
        return ModelResponse(
            text=reply.text,
            tool_calls=calls,
            stop_reason="tool_use" if calls else "end_turn",
            usage=Usage(
                prompt_tokens=cache.prompt_tokens,
                cached_prompt_tokens=cache.read_tokens,
                completion_tokens=completion,
            ),
            raw={
                "text": reply.text,
                "tool_calls": [call.model_dump() for call in calls],
            },
        )

    async def aclose(self) -> None:
        """Does nothing: the scripted provider holds no connections."""

    def _reply(self, request: ModelRequest) -> Reply:
        if self._replies is None:
            users = [m.text for m in request.messages if isinstance(m, UserMessage)]
            return Reply(users[-1] if users else "")
        if callable(self._replies):
            reply = self._replies(request)
        elif self._next < len(self._replies):
            reply = self._replies[self._next]
            self._next += 1
        else:
            raise ModelError(f"scripted provider has no replies left after {self._next}")
        return Reply(reply) if isinstance(reply, str) else reply
