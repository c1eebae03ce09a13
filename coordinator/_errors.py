"""Corral's errors: one base class, each carrying the underlying `.cause`.

::

    CorralError
    ├── PathError            a path that is absolute, has `..`, enters `.git`
    │                        or resolves outside the workspace (400)
    ├── NotFound             unknown scope, commit or file (404)
    │   └── UnknownScope
    ├── ScopeDiscarded       an operation on a discarded scope (409)
    ├── ScopeExists          fork to a name already in use (409)
    ├── RewindError          a target that is not on the scope's branch since its fork (400)
    ├── PatchError           a unified diff that does not apply (400)
    ├── MergeError           a merge that cannot be done as asked (409)
    ├── StateError           a state directory that does not fit the request (409)
    ├── ExecError            a command that cannot run as asked: empty argv, bad env,
    │                        a timeout past the exec limit timeout_max (400)
    └── SandboxFailure       the workspace backend failed (500; wraps sandboxes.SandboxError)

A blocked intent is not an error: it is a `Result` whose decision says why.
"""

from __future__ import annotations

__all__ = [
    "CorralError",
    "ExecError",
    "MergeError",
    "NotFound",
    "PatchError",
    "PathError",
    "RewindError",
    "SandboxFailure",
    "ScopeDiscarded",
    "ScopeExists",
    "StateError",
    "UnknownScope",
]


class CorralError(Exception):
    """Base of every error Corral raises; `.cause` is the underlying exception, if any."""

    status = 500

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class PathError(CorralError, ValueError):
    status = 400


class NotFound(CorralError, LookupError):
    status = 404


class UnknownScope(NotFound):
    pass


class ScopeDiscarded(CorralError):
    status = 409


class ScopeExists(CorralError):
    status = 409


class RewindError(CorralError, ValueError):
    status = 400


class PatchError(CorralError, ValueError):
    status = 400


class MergeError(CorralError):
    status = 409


class StateError(CorralError):
    status = 409


class ExecError(CorralError, ValueError):
    status = 400


class SandboxFailure(CorralError):
    status = 500
