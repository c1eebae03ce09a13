"""Model calls as effects: every attempt is a `model.call` effect on the caller's scope.

The intent is the exact provider-neutral request as a blob of canonical JSON (`canonical`),
so two requests are byte-identical exactly when their blob ids are equal; the outcome is the
response (a blob of canonical JSON) with its token usage and, when the server returned them,
the call's token ids and logprobs (`Tokens`, a blob of their own; `tokens` is None when it
returned none: nothing is re-tokenised to fill it). Retries go through
`complete_with_retries`: every failed attempt is its own `failed` effect (with
`attempt=n` and the error), and the success is recorded as its own effect. The policy
chain sees each attempt before it is sent.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel

from coordinator import (
    ActInput,
    Coordinator,
    Effect,
    ModelCall,
    ModelOutcome,
    Scope,
    Trace,
)

from .providers import ModelError, ModelRequest, ModelResponse, OnRetry, Provider, Tokens
from .providers import complete_with_retries as _complete_with_retries

__all__ = [
    "ModelBlocked",
    "ModelCaller",
    "ModelResult",
    "RecordedSource",
    "canonical",
    "provider_name",
    "read_tokens",
]


def canonical(record: BaseModel) -> bytes:
    """The record as canonical JSON bytes: fields in declaration order, no spaces, and the
    keys of free-form objects (tool arguments) in the order the model wrote them, which is
    the order they go on the wire. So equal bytes mean an equal request on the wire, and a
    conversation rebuilt from these bytes sends exactly the bytes it sent before."""
    return record.model_dump_json().encode()


def read_tokens(trace: Trace, outcome: ModelOutcome) -> Tokens | None:
    """The token ids and logprobs a model call's outcome recorded, None when the server
    returned none (blocking: run it on `coord.io`)."""
    if outcome.tokens is None:
        return None
    return Tokens.model_validate_json(trace.blob(outcome.tokens))


class ModelBlocked(Exception):
    """The policy chain blocked a model call; `.reason` says why. Not an error of the model."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@runtime_checkable
class RecordedSource(Protocol):
    """A provider that can serve recorded outcomes (the replay provider)."""

    def serve(self, request_blob: str) -> ModelOutcome | None:
        """The recorded outcome for a byte-identical request, or None to go live."""
        ...


class ModelResult(NamedTuple):
    response: ModelResponse
    effect: Effect
    """The materialized `model.call` effect (its id is the cause of the tools it asked for)."""
    replayed: bool


def provider_name(provider: Provider) -> str:
    """The provider's short name as recorded in `ModelCall.provider` (openai, anthropic...)."""
    named = getattr(provider, "name", None)
    if isinstance(named, str) and named:
        return named
    cls = type(provider).__name__.lower()
    return cls.removesuffix("provider") or cls


class _Attempts:
    """The provider `complete_with_retries` drives: each call is one recorded attempt."""

    def __init__(self, caller: ModelCaller, scope: Scope, blob: str, cause: str | None) -> None:
        self._caller, self._scope, self._blob, self._cause = caller, scope, blob, cause
        self.attempt = 0
        self.result: ModelResult | None = None

    @property
    def model(self) -> str:
        return self._caller.provider.model

    async def aclose(self) -> None:
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        caller = self._caller
        trace = caller.coord.trace
        self.attempt += 1
        intent = ModelCall(
            provider=caller.name, model=request.model, request=self._blob, attempt=self.attempt
        )
        got: list[ModelResponse] = []
        replayed = False

        async def act(_: ActInput) -> tuple[ModelOutcome, dict[str, Any]]:
            nonlocal replayed
            source = caller.provider
            if isinstance(source, RecordedSource):
                recorded = source.serve(self._blob)
                if recorded is not None:
                    data = await caller.coord.io(trace.blob, recorded.response)
                    got.append(ModelResponse.model_validate_json(data))
                    replayed = True
                    return recorded.model_copy(update={"replayed": True}), {}
            # A ModelError leaves `perform` as it is, recorded as a failed attempt.
            response = await source.complete(request)
            blob = await caller.coord.io(trace.write_blob, canonical(response))
            tokens = None
            if response.tokens is not None and not response.tokens.empty:
                tokens = await caller.coord.io(trace.write_blob, canonical(response.tokens))
            got.append(response)
            return ModelOutcome(response=blob, usage=response.usage, tokens=tokens), {}

        result = await self._scope.perform(intent, act, cause=self._cause)
        if result.blocked:
            raise ModelBlocked(result.reason)
        self.result = ModelResult(got[0], result.effect, replayed)
        return got[0]


class ModelCaller:
    """Sends requests through `provider`, each attempt recorded as a `model.call` effect.

    Keeps running totals of live usage (`prompt_tokens`, `cached_tokens`,
    `completion_tokens`) and of what replays saved (`replayed_calls`, `saved_tokens`).
    """

    def __init__(
        self,
        coord: Coordinator,
        provider: Provider,
        *,
        name: str | None = None,
        attempts: int = 4,
        base_delay: float = 0.5,
        on_retry: OnRetry | None = None,
    ) -> None:
        self.coord = coord
        self.provider = provider
        self.name = name or provider_name(provider)
        self.attempts = attempts
        self.base_delay = base_delay
        self.on_retry = on_retry
        self.calls = self.retries = self.replayed_calls = 0
        self.prompt_tokens = self.cached_tokens = self.completion_tokens = self.saved_tokens = 0

    async def call(
        self, scope: Scope, request: ModelRequest, *, cause: str | None = None
    ) -> ModelResult:
        """Returns the response and its effect.

        Raises:
            ModelError: the call failed (after the retries, when retryable).
            ModelBlocked: the policy chain blocked the call.
        """
        blob = await self.coord.io(self.coord.trace.write_blob, canonical(request))
        attempts = _Attempts(self, scope, blob, cause)

        async def on_retry(attempt: int, error: ModelError) -> None:
            self.retries += 1
            if self.on_retry is not None:
                reported = self.on_retry(attempt, error)
                if reported is not None:
                    await reported

        await _complete_with_retries(
            attempts, request, attempts=self.attempts, base_delay=self.base_delay,
            on_retry=on_retry,
        )
        result = attempts.result
        assert result is not None
        u = result.response.usage
        if result.replayed:
            self.replayed_calls += 1
            self.saved_tokens += u.prompt_tokens + u.completion_tokens
            return result
        self.calls += 1
        self.prompt_tokens += u.prompt_tokens
        self.cached_tokens += u.cached_prompt_tokens
        self.completion_tokens += u.completion_tokens
        # corral_model_tokens_total is counted by the coordinator from the recorded effect
        return result
