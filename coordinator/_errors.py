"""Corral's errors: one base class, each carrying the underlying `.cause`.

::

    CorralError
    ├── PathError            a path that is absolute, has `..`, enters `.git`
    │                        or resolves outside the workspace
    ├── NotFound             unknown scope, commit or file
    │   └── UnknownScope
    ├── ScopeDiscarded       an operation on a discarded scope
    ├── ScopeExists          fork to a name already in use
    ├── RewindError          a target that is not on the scope's branch since its fork
    ├── PatchError           a unified diff that does not apply
    ├── MergeError           a merge that cannot be done as asked
    ├── StateError           a state directory that does not fit the request
    ├── ExecError            a command that cannot run as asked: empty argv, bad env,
    │                        a timeout past the exec limit timeout_max
    └── SandboxFailure       the workspace backend failed (wraps sandboxes.SandboxError)

A blocked intent is not an error: it is a `Result` whose decision says why.
The errors know nothing of HTTP: the server maps each class to a status
(`coordinator._server.STATUS`).
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

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class PathError(CorralError, ValueError):
    """A path that is absolute, has `..`, enters `.git` or leaves the workspace."""


class NotFound(CorralError, LookupError):
    """An unknown scope, commit or file."""


class UnknownScope(NotFound):
    pass


class ScopeDiscarded(CorralError):
    """An operation on a discarded scope."""


class ScopeExists(CorralError):
    """A fork to a name already in use."""


class RewindError(CorralError, ValueError):
    """A rewind target that is not on the scope's branch since its fork."""


class PatchError(CorralError, ValueError):
    """A patch that is malformed or does not apply (git's reason)."""


class MergeError(CorralError):
    """A merge that cannot be done as asked."""


class StateError(CorralError):
    """A state directory that does not fit the request."""


class ExecError(CorralError, ValueError):
    """A command that cannot run as asked (argv, env, timeout)."""


class SandboxFailure(CorralError):
    """The workspace backend failed."""
