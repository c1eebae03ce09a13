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
    ├── DiskFull             the state's disk is full (ENOSPC, EDQUOT): nothing was
    │                        acknowledged; retry once space is freed
    ├── ExecError            a command that cannot run as asked: empty argv, bad env,
    │                        a timeout past the exec limit timeout_max
    ├── SandboxFailure       the workspace backend failed (wraps sandboxes.SandboxError)
    ├── TeamError            a team operation its rules refuse: completing a task
    │                        another member owns, answering a request not yours
    └── SetupFailed          the project's setup (`Coordinator.prepare`) failed (.log)

A blocked intent is not an error: it is a `Result` whose decision says why.
The errors know nothing of HTTP: the server maps each class to a status
(`coordinator.server._app.STATUS`).
"""

from __future__ import annotations

import errno
import os

__all__ = [
    "AuthError",
    "CorralError",
    "DiskFull",
    "ExecError",
    "Forbidden",
    "MergeError",
    "NotFound",
    "PatchError",
    "PathError",
    "RewindError",
    "SandboxFailure",
    "ScopeDiscarded",
    "ScopeExists",
    "StateError",
    "TeamError",
    "UnknownScope",
]


class CorralError(Exception):
    """Base of every error Corral raises; `.cause` is the underlying exception, if any."""

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class AuthError(CorralError):
    """No token, or a token that is not valid."""


class Forbidden(AuthError):
    """A valid token acting outside its authority."""


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


class DiskFull(CorralError, OSError):
    """The state directory's disk (or quota) is full: the effect was not made
    durable, so it was not acknowledged; the same call succeeds once space is
    freed. `.cause` is the OSError (ENOSPC or EDQUOT), when there is one."""

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message, cause=cause)
        self.errno = getattr(cause, "errno", None) or errno.ENOSPC


_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_FULL_TEXTS = tuple(os.strerror(e) for e in _FULL_ERRNOS)


def disk_full(error: BaseException) -> bool:
    """Whether `error` (or what it wraps) says the disk or a quota is full: an
    OSError with ENOSPC or EDQUOT, a DiskFull, or a tool's failure that quotes one
    (git's index-pack reports it on stderr)."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, DiskFull) or (isinstance(e, OSError) and e.errno in _FULL_ERRNOS):
            return True
        if any(text in str(e) for text in _FULL_TEXTS):
            return True
        e = getattr(e, "cause", None) or e.__cause__
    return False


class ExecError(CorralError, ValueError):
    """A command that cannot run as asked (argv, env, timeout)."""


class SandboxFailure(CorralError):
    """The workspace backend failed."""


class TeamError(CorralError):
    """A team operation its rules refuse (a task that does not exist or that another
    member owns, a request that is not addressed to you, a stale scratchpad write).
    The refused operation is recorded as a failed effect on the member's branch."""
