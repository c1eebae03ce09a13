"""Building a provider from a `PROVIDER/MODEL` spec string."""

from __future__ import annotations

from ._protocol import Provider
from .scripted import ScriptedProvider

__all__ = ["provider_from_spec"]


def provider_from_spec(
    spec: str, base_url: str | None = None, *, api_key: str | None = None,
    logprobs: bool = False, token_ids: bool = False,
) -> Provider:
    """Returns the provider for `spec`, e.g. `openai/gpt-4o-mini` or `anthropic/claude-x`.

    The model is everything after the first slash, so `openai/org/model` names `org/model`
    (as vLLM serves Hugging Face names). `scripted/NAME` gives an echoing `ScriptedProvider`.
    `logprobs` and `token_ids` ask an OpenAI-compatible server for the calls' tokens
    (`OpenAIProvider`); the other providers return none (their outcomes say so).

    Raises:
        ValueError: the spec is not PROVIDER/MODEL or names an unknown provider.
        ModelError: the provider needs an API key and none is given or set.
    """
    backend, _, model = spec.partition("/")
    if not model:
        raise ValueError(f"provider spec {spec!r} is not PROVIDER/MODEL")
    # Imported here: each SDK takes seconds to import, and a run uses one of them at most.
    if backend == "openai":
        from .openai import OpenAIProvider

        return OpenAIProvider(model, base_url=base_url, api_key=api_key, logprobs=logprobs,
                              token_ids=token_ids)
    if backend == "anthropic":
        from .anthropic import AnthropicProvider

        return AnthropicProvider(model, base_url=base_url, api_key=api_key)
    if backend == "scripted":
        return ScriptedProvider(model=model)
    raise ValueError(
        f"unknown provider {backend!r} in {spec!r}; expected openai, anthropic or scripted"
    )
