"""The provider protocol: one async call from request to response."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._records import ModelRequest, ModelResponse

__all__ = ["Provider"]


@runtime_checkable
class Provider(Protocol):
    """A model backend. Implementations do not retry; `complete_with_retries` does."""

    @property
    def model(self) -> str:
        """The model named in the provider spec; requests name their own `model`."""
        ...

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Returns the model's reply to `request`.

        Raises:
            ModelError: the call failed; `.retryable` says whether to try again.
        """
        ...

    async def aclose(self) -> None:
        """Releases connections; the provider is not used afterwards."""
        ...
