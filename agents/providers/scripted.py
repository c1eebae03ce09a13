"""Scripted models: the script vocabulary, script files, and the in-process scripted provider.

A `Script` is what a scripted model answers: its `Reply`s (text and `ScriptedCall`s) in
order, or a function of the request that picks the reply. The same scripts drive two models
(see the package docs of `agents`, "Scripted models and the scripted agent"):

- `ScriptedProvider` (here): a `Provider` in process, no socket and no SDK; its script
  functions get the provider-neutral `ModelRequest`. For unit tests of an agent loop.
- `agents.model_server.ScriptedModelServer`: an HTTP server in the OpenAI and Anthropic
  wire formats, for the real SDKs; its script functions get the request's JSON as sent.

`read_scripts` reads a script file (`corral model-server --script FILE`). Both count tokens
and prompt cache hits the same way (`PrefixCache`); the provider with OpenAI's rule that
every prompt is cacheable.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ._errors import ModelError
from ._prompt_cache import PrefixCache, tokenize
from ._records import ModelRequest, ModelResponse, ToolUse, Usage, UserMessage

__all__ = ["Reply", "Script", "ScriptedCall", "ScriptedProvider", "read_scripts"]


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


RequestT = TypeVar("RequestT")

Script = Sequence[Reply | str] | Callable[[RequestT], Reply | str]
"""Replies served in order (a string is a text reply), or a function of the request that
picks the reply: `Script[ModelRequest]` for `ScriptedProvider`, `Script[dict[str, Any]]`
(the request JSON) for the model server."""


def read_scripts(path: str | Path) -> dict[str, list[Reply | str]]:
    """The scripts of a script file, by model: `{"model": [step, ...]}` where a step is a
    string or `{"text": ..., "tool_calls": [{"name": ..., "arguments": {...}}]}`.

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not such JSON (json.JSONDecodeError, KeyError as ValueError).
    """
    raw = json.loads(Path(path).read_text())
    try:
        return {
            model: [
                step
                if isinstance(step, str)
                else Reply(
                    step.get("text", ""),
                    [ScriptedCall(c["name"], c.get("arguments", {}))
                     for c in step.get("tool_calls", [])],
                )
                for step in steps
            ]
            for model, steps in raw.items()
        }
    except (KeyError, AttributeError, TypeError) as e:
        raise ValueError(f"{path} is not a script file ({type(e).__name__}: {e})") from e


class ScriptedProvider:
    """Answers requests from `script`: its replies in order, or a function of the request.

    Without a script it echoes the last user message, which is enough for smoke tests.
    """

    def __init__(
        self, script: Script[ModelRequest] | None = None, *, model: str = "scripted",
        block_size: int = 64,
    ) -> None:
        self._model = model
        self._replies = script if script is None or callable(script) else list(script)
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
