"""The workspace backend protocol: what every sandbox backend provides.

A *workspace* is a directory tree that one scope sees and writes. Backends make
workspaces copy-on-write over a shared base layer, fork them cheaply, and run
commands transactionally in a throwaway child layer. This package knows nothing
of git, effects or policies: the coordinator drives it.

Errors::

    SandboxError                 base of everything raised here (.cause)
    ├── BackendUnavailable       the backend cannot run on this machine (.reason)
    └── ExecUnavailable          no way to run a command isolated (bubblewrap missing)
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, Protocol

__all__ = [
    "Backend",
    "BackendUnavailable",
    "Change",
    "ExecResult",
    "ExecUnavailable",
    "Interceptor",
    "MutationIntent",
    "MutationOp",
    "SandboxError",
    "Workspace",
]

# git file modes, used for Change.mode so the coordinator can write trees directly
MODE_FILE = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000


class SandboxError(Exception):
    """Base of every error raised by a sandbox backend."""

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class BackendUnavailable(SandboxError):
    """The backend cannot run here; `.reason` says why in one sentence."""

    def __init__(self, backend: str, reason: str) -> None:
        super().__init__(f"sandbox backend {backend!r} is not available: {reason}")
        self.backend = backend
        self.reason = reason


class ExecUnavailable(SandboxError):
    """Commands cannot be run isolated on this machine."""


@dataclass(frozen=True, slots=True)
class Change:
    """One path's new state after a command: written (data) or deleted (data is None)."""

    path: str
    """POSIX path relative to the workspace root, no leading slash."""
    data: bytes | None
    """File content, or the link target for a symlink; None means deleted."""
    mode: int = MODE_FILE
    """git file mode: MODE_FILE, MODE_EXEC or MODE_LINK."""


@dataclass(frozen=True, slots=True)
class ExecResult:
    """What a transactional command did: its exit and the changes it would make."""

    returncode: int
    """Exit status; negative for a signal, as subprocess reports it."""
    stdout: bytes
    stderr: bytes
    changes: tuple[Change, ...]
    """Every path the command created, modified or deleted, sorted by path."""
    timed_out: bool = False
    duration_s: float = 0.0
    meta: Mapping[str, str] = field(default_factory=dict)


MutationOp = Literal[
    "open_write", "create", "truncate", "unlink", "rename", "mkdir", "rmdir", "symlink", "link",
    "chmod", "chown",
]
"""A mutating filesystem call that an intercepting backend asks about before it happens."""


@dataclass(frozen=True, slots=True)
class MutationIntent:
    """One mutating call a process made in an intercepting workspace, not yet carried out."""

    op: MutationOp
    path: str
    """POSIX path relative to the workspace root: the path that changes (rename: the source)."""
    target: str | None = None
    """rename: the destination; link: the existing file linked to; symlink: the link's content."""


class Interceptor(Protocol):
    """What an intercepting workspace calls, from its own threads (blocking calls).

    `decide` runs before the call and may take as long as it needs (the process
    waits); `done` and `closed` run after an allowed change is complete.
    """

    def decide(self, intent: MutationIntent, /) -> str | None:
        """None allows the call; a string denies it (the process gets EACCES) and says why."""

    def done(self, intent: MutationIntent, /) -> None:
        """An allowed call other than a write open (unlink, rename, mkdir...) succeeded."""

    def closed(self, path: str, /) -> None:
        """A file opened for writing (or created, or truncated) was closed after a change."""


class Workspace(abc.ABC):
    """One scope's copy-on-write directory tree.

    `path` is where the files are visible and writable by the coordinator. It
    never moves for the life of the workspace.
    """

    path: Path
    name: str

    @abc.abstractmethod
    def fork(self, name: str) -> Workspace:
        """A child workspace equal to this one now; later writes to either are
        invisible to the other. Must work while a process is using `self.path`.
        """

    @abc.abstractmethod
    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        network: bool = False,
    ) -> ExecResult:
        """Run `argv` in a throwaway child layer over this workspace, seen at
        /workspace/repo, isolated (own mount namespace, read-only rest of the
        filesystem, private /tmp, no network unless asked, killed at `timeout`).

        Returns the result with the changes the command made; `self.path` is
        untouched. Raises ExecUnavailable when isolation is impossible here.
        """

    @abc.abstractmethod
    def discard(self) -> None:
        """Release this workspace's mounts and directories. Idempotent."""

    @property
    @abc.abstractmethod
    def layer_bytes(self) -> int:
        """Bytes held by this workspace's own writable layer."""

    @property
    def backing(self) -> Path:
        """Where the workspace's owner reads and writes without being intercepted: the
        same tree as `path`. Equal to `path` unless the backend intercepts writes."""
        return self.path

    def intercept(self, interceptor: Interceptor | None) -> bool:
        """Send every mutating call made under `path` to `interceptor` before it
        happens (None: stop). Returns False when this backend cannot intercept."""
        return False


class Backend(abc.ABC):
    """A way of making workspaces. One instance owns one directory (`root`);
    every mount and file it makes lives under it."""

    name: ClassVar[str]

    @classmethod
    @abc.abstractmethod
    def unavailable_reason(cls) -> str | None:
        """None when this backend works here, else a one-sentence reason."""

    @abc.abstractmethod
    def __init__(self, root: Path) -> None:
        """Take ownership of `root`, clearing anything a crashed run left there
        (stale mounts found in /proc/self/mountinfo, old layers)."""

    @abc.abstractmethod
    def base(self, key: str, populate: Callable[[Path], None], name: str = "root") -> Workspace:
        """A workspace over the base layer identified by `key`.

        The layer is built once by `populate(dir)` and reused while `key` is the
        same (also across processes, if it was completed).
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Discard every workspace and unmount everything under `root`. Idempotent."""
