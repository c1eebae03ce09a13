"""The one error raised by model providers."""

from __future__ import annotations

__all__ = ["ModelError", "status_error", "unreachable"]


class ModelError(Exception):
    """A model call failed: no key, server unreachable, or an error status.

    `.cause` is the underlying exception (usually the SDK's), `.status` the HTTP status if the
    server answered, and `.retryable` whether trying again may help (429, 5xx, connection).
    """

    def __init__(
        self,
        message: str,
        *,
        cause: BaseException | None = None,
        status: int | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.cause = cause
        self.status = status
        self.retryable = retryable


def status_error(cause: BaseException, status: int, base_url: str) -> ModelError:
    """Returns the error for an error status from the model server at `base_url`."""
    # 408 and 409 are what providers send for timeouts and lock contention: worth a retry.
    retryable = status in (408, 409, 429) or status >= 500
    return ModelError(
        f"model server at {base_url} answered {status}: {cause}",
        cause=cause,
        status=status,
        retryable=retryable,
    )


def unreachable(cause: BaseException, base_url: str, *, timed_out: bool = False) -> ModelError:
    """Returns the error for a model server that could not be reached or did not answer."""
    what = "timed out" if timed_out else "unreachable"
    return ModelError(f"model server at {base_url} {what}: {cause}", cause=cause, retryable=True)
