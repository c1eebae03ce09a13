"""Model providers: one protocol, one backend per module, provider-neutral records.

Errors::

    ModelError      every failed model call (.cause, .status, .retryable)
"""

from ._errors import ModelError
from ._protocol import Provider
from ._records import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolResult,
    ToolSpec,
    ToolUse,
    Usage,
    UserMessage,
)
from ._retry import OnRetry, complete_with_retries
from ._spec import provider_from_spec
from .anthropic import AnthropicProvider
from .openai import OpenAIProvider
from .scripted import ScriptedProvider

__all__ = [
    "AnthropicProvider",
    "AssistantMessage",
    "Message",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "OnRetry",
    "OpenAIProvider",
    "Provider",
    "ScriptedProvider",
    "StopReason",
    "ToolResult",
    "ToolSpec",
    "ToolUse",
    "Usage",
    "UserMessage",
    "complete_with_retries",
    "provider_from_spec",
]
