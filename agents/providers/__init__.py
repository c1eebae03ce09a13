"""Model providers: one protocol, one backend per module, provider-neutral records.

`ToolUse` is a tool call the model made (it has the provider's id); `ScriptedCall` is a tool call
a script tells the scripted model to make.

Errors::

    ModelError      every failed model call (.cause, .status, .retryable)
"""

from typing import TYPE_CHECKING

from ._errors import ModelError
from ._prompt_cache import CacheUsage, PrefixCache, tokenize
from ._protocol import Provider
from ._records import (
    AssistantMessage,
    ChatMessage,
    ModelRequest,
    ModelResponse,
    StopReason,
    Tokens,
    ToolResult,
    ToolSpec,
    ToolUse,
    Usage,
    UserMessage,
)
from ._retry import OnRetry, complete_with_retries
from ._spec import provider_from_spec
from .scripted import Reply, Script, ScriptedCall, ScriptedProvider, read_scripts

if TYPE_CHECKING:
    from .anthropic import AnthropicProvider
    from .openai import OpenAIProvider

__all__ = [
    "AnthropicProvider",
    "AssistantMessage",
    "CacheUsage",
    "ChatMessage",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "OnRetry",
    "OpenAIProvider",
    "PrefixCache",
    "Provider",
    "Reply",
    "Script",
    "ScriptedCall",
    "ScriptedProvider",
    "StopReason",
    "Tokens",
    "ToolResult",
    "ToolSpec",
    "ToolUse",
    "Usage",
    "UserMessage",
    "complete_with_retries",
    "provider_from_spec",
    "read_scripts",
    "tokenize",
]


def __getattr__(name: str) -> object:
    # The SDKs take seconds to import (anthropic ~4 s cold); load a backend on first use.
    if name == "OpenAIProvider":
        from .openai import OpenAIProvider

        return OpenAIProvider
    if name == "AnthropicProvider":
        from .anthropic import AnthropicProvider

        return AnthropicProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
