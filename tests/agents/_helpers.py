"""Helpers for agent tests: scripts keyed by step, a small repository."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agents.model_server import Reply, ScriptedCall

CALC = '"""A tiny calculator."""\n\n\ndef add(a, b):\n    return a + b\n'

NO_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")


def steps_of(payload: dict[str, Any]) -> int:
    """Model turns already in a request (OpenAI or Anthropic format): its step is this + 1."""
    return sum(1 for m in payload["messages"] if m.get("role") == "assistant")


def by_step(replies: Sequence[Reply | str]) -> Callable[[dict[str, Any]], Reply | str]:
    """A server script that answers step n with replies[n-1], whatever came before: a
    replay that goes live gets the same replies the original run got."""

    def answer(payload: dict[str, Any]) -> Reply | str:
        n = steps_of(payload)
        return replies[n] if n < len(replies) else Reply("done")

    return answer


def call(name: str, **arguments: Any) -> Reply:
    return Reply(tool_calls=[ScriptedCall(name, arguments)])
