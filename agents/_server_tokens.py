"""The scripted model server's tokenizer and chat template: token ids and logprobs that are
deterministic and line up across turns as a real server's do.

The tokenizer is `agents.providers.tokenize` (word runs and single punctuation characters)
with a hashed vocabulary: a token's id is a hash of its text, so every server instance
gives every text the same ids and no vocabulary is shipped. Seven special tokens mark the
chat template's parts::

    <|tools|> TOOLS-JSON <|end|>  <|system|> TEXT <|end|>  <|user|> TEXT <|end|>
    <|tool|> TEXT <|end|>  <|assistant|> COMPLETION

and the prompt ends with the generation prompt `<|assistant|>`. A completion is the reply's
text, then `<|call|> NAME ARGUMENTS-JSON` per tool call (arguments as canonical JSON, keys
sorted), then `<|end|>`. An assistant turn sent back in a later request is rendered the same
way (its arguments parsed and made canonical again, as real chat templates do), so the next
prompt starts with this prompt and this completion: a trajectory's tokens are one sequence.
Only the OpenAI format has token ids (vLLM's `return_token_ids`); logprobs follow
`logprobs: true`. A logprob is a hash of the prompt, the seed and the position, in (-4, 0).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from agents.providers import ScriptedCall, tokenize

__all__ = ["SPECIAL", "TokenText", "completion_tokens", "logprobs", "prompt_tokens", "token_id"]

SPECIAL = {name: index for index, name in enumerate(
    ("<|tools|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|call|>", "<|end|>"),
    start=1)}
_OFFSET = 16  # ids below are special tokens (or unused)
_VOCAB = 1 << 17


class TokenText(NamedTuple):
    """Tokens as ids and as the text each stands for."""

    ids: list[int]
    texts: list[str]

    def extend(self, other: TokenText) -> None:
        self.ids.extend(other.ids)
        self.texts.extend(other.texts)


def token_id(token: str) -> int:
    """The id of one token: a special token's own, else a hash of its text."""
    special = SPECIAL.get(token)
    if special is not None:
        return special
    digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
    return _OFFSET + int.from_bytes(digest, "big") % _VOCAB


def _encode(text: str) -> TokenText:
    texts = tokenize(text)
    return TokenText([token_id(t) for t in texts], texts)


def _special(name: str) -> TokenText:
    return TokenText([SPECIAL[name]], [name])


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def completion_tokens(text: str, calls: Sequence[ScriptedCall]) -> TokenText:
    """A completion: its text, each tool call, and `<|end|>`."""
    out = _encode(text)
    for call in calls:
        out.extend(_special("<|call|>"))
        out.extend(_encode(call.name))
        out.extend(_encode(_canonical(dict(call.arguments))))
    out.extend(_special("<|end|>"))
    return out


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts: their text, in order
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _assistant(message: dict[str, Any]) -> TokenText:
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = {"_raw": function.get("arguments")}
        calls.append(ScriptedCall(str(function.get("name", "")),
                                  arguments if isinstance(arguments, dict) else {}))
    return completion_tokens(_text(message.get("content")), calls)


def prompt_tokens(payload: dict[str, Any]) -> TokenText:
    """The prompt of an OpenAI chat-completions request, ending in the generation prompt."""
    out = TokenText([], [])
    if payload.get("tools"):
        out.extend(_special("<|tools|>"))
        out.extend(_encode(_canonical(payload["tools"])))
        out.extend(_special("<|end|>"))
    for message in payload["messages"]:
        role = message.get("role")
        if role == "assistant":
            out.extend(_special("<|assistant|>"))
            out.extend(_assistant(message))
            continue
        marker = {"system": "<|system|>", "developer": "<|system|>", "tool": "<|tool|>"}
        out.extend(_special(marker.get(str(role), "<|user|>")))
        out.extend(_encode(_text(message.get("content"))))
        out.extend(_special("<|end|>"))
    out.extend(_special("<|assistant|>"))
    return out


def logprobs(prompt: Sequence[int], seed: int | None, completion: Sequence[int]) -> list[float]:
    """One log probability per completion token, in (-4, 0): a function of the prompt, the
    seed and the token's position and id."""
    base = hashlib.blake2b(repr((list(prompt), seed)).encode(), digest_size=8).digest()
    out = []
    for position, token in enumerate(completion):
        h = hashlib.blake2b(base + position.to_bytes(4, "big") + token.to_bytes(4, "big"),
                            digest_size=4).digest()
        out.append(-(1 + int.from_bytes(h, "big") % 3998) / 1000)
    return out
