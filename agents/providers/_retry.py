"""Retrying model calls with exponential backoff, reporting each retry."""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Awaitable, Callable

from ._errors import ModelError
from ._protocol import Provider
from ._records import ModelRequest, ModelResponse

__all__ = ["OnRetry", "complete_with_retries"]

OnRetry = Callable[[int, ModelError], Awaitable[None] | None]
"""Called with the failed attempt's number (1-based) and its error, before waiting."""


async def complete_with_retries(
    provider: Provider,
    request: ModelRequest,
    *,
    attempts: int = 4,
    base_delay: float = 0.5,
    on_retry: OnRetry | None = None,
) -> ModelResponse:
    """Returns `provider.complete(request)`, retrying on 429, 5xx and connection errors.

    Attempt n waits `base_delay * 2**(n-1)`, scaled by a random factor in [0.5, 1] so agents
    that were throttled together do not retry together. `on_retry` may be sync or async.

    Raises:
        ModelError: a non-retryable failure at once, or the last failure after `attempts`.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    for attempt in range(1, attempts + 1):
        try:
            return await provider.complete(request)
        except ModelError as error:
            if not error.retryable:
                raise
            if attempt == attempts:
                raise ModelError(
                    f"{error} (gave up after {attempts} attempts)",
                    cause=error.cause,
                    status=error.status,
                    retryable=True,
                ) from error
            if on_retry is not None:
                reported = on_retry(attempt, error)
                if inspect.isawaitable(reported):
                    await reported
            await asyncio.sleep(base_delay * 2 ** (attempt - 1) * random.uniform(0.5, 1.0))
    raise AssertionError("unreachable")  # the loop returns or raises
