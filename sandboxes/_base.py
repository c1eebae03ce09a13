"""The workspace backend protocol: what every sandbox backend provides.

A *workspace* is a directory tree that one scope sees and writes. Backends make
workspaces copy-on-write over a shared base layer, fork them cheaply, and run
commands transactionally in a throwaway child layer. This package knows nothing
of git, effects or policies: the coordinator drives it.

Errors::

    SandboxError                 base of everything raised here (.cause)
    ├── BackendUnavailable       the backend cannot run on this machine (.reason)
    ├── ExecUnavailable          no way to run a command isolated (bubblewrap missing)
    ├── TreeTooDeep              a command made a tree deeper than MAX_SCAN_DEPTH (.path)
    └── ChangesTooLarge          a command changed more than Limits.changed_bytes or
                                 changed_files allow (.limit, .allowed, .found)
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
    "BaseTree",
    "Change",
    "ChangesTooLarge",
    "ExecResult",
    "ExecUnavailable",
    "Interceptor",
    "Limits",
    "MutationIntent",
    "MutationOp",
    "SandboxError",
    "TreeTooDeep",
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


MAX_SCAN_DEPTH = 256
"""Deepest directory a scan of a tree (a command's changes, a workspace's files)
descends into. Past it the scan raises TreeTooDeep instead of building paths
the kernel refuses (PATH_MAX) or recursing without end; git could not record
such a path anyway (the coordinator refuses more than 128 components)."""


class TreeTooDeep(SandboxError):
    """A tree holds a directory deeper than MAX_SCAN_DEPTH; `.path` is the first
    one found (relative to the tree's root, cut to MAX_SCAN_DEPTH + 1 components)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"directory deeper than {MAX_SCAN_DEPTH} levels: {path[:200]!r}...")
        self.path = path


class ChangesTooLarge(SandboxError):
    """A command left more changes than its Limits let the coordinator record:
    `.limit` names the field ("changed_bytes" or "changed_files"), `.allowed` is
    its value and `.found` what the command's layer held (at least), both
    measured from lstat before anything was read."""

    def __init__(self, limit: str, allowed: int, found: int, what: str) -> None:
        super().__init__(f"the command changed {what}: more than Limits.{limit} = {allowed}")
        self.limit = limit
        self.allowed = allowed
        self.found = found


_MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """What one command may use. Every field is a ceiling a caller may raise."""

    timeout_max: float = 900.0
    """Seconds: the longest `timeout` a command may ask for."""
    processes: int = 256
    """Processes and threads of the command at once (its pids cgroup where the host
    has one; always RLIMIT_NPROC of the sandbox user)."""
    memory: int = 4096 * _MiB
    """Bytes of memory the command's processes use together (its memory cgroup where
    the host has one), and of address space per process (RLIMIT_AS)."""
    output: int = 16 * _MiB
    """Bytes of stdout and of stderr kept; the rest is read and dropped (`truncated`)."""
    file_size: int = 1024 * _MiB
    """Bytes one file may grow to (RLIMIT_FSIZE; a write past it fails with EFBIG)."""
    layer: int = 2048 * _MiB
    """Bytes the command may add to the throwaway layer over its workspace."""
    tmp: int = 512 * _MiB
    """Bytes of the command's private /tmp."""
    open_files: int = 4096
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    changed_bytes: int = 1024 * _MiB
    """Bytes of changed files the coordinator reads (and holds) to record one
    command; a file counts its apparent size (st_size, what reading it yields)
    and, apart, its allocated size (st_blocks * 512): a sparse file costs the
    command nothing on disk but its whole length to record."""
    changed_files: int = 100_000
    """Files, symlinks and deletions one command may leave to record (and as many
    directories, counted apart)."""


_UNITS = {"": 1, "K": 1024, "M": _MiB, "G": 1024 * _MiB}


def parse_limits(overrides: Sequence[str], base: Limits | None = None) -> Limits:
    """`base` (default Limits()) with each "name=value" applied; sizes take a K, M
    or G suffix. Raises ValueError naming the bad entry."""
    import dataclasses

    limits = base or Limits()
    names = {f.name: f.type for f in dataclasses.fields(Limits)}
    for item in overrides:
        name, _, raw = item.partition("=")
        name, raw = name.strip(), raw.strip().upper()
        if name not in names or not raw:
            raise ValueError(f"bad limit {item!r}: expected NAME=VALUE, NAME one of "
                             f"{', '.join(names)}")
        try:
            if name == "timeout_max":
                value: float | int = float(raw)
            else:
                unit = raw[-1] if raw[-1] in _UNITS else ""
                value = int(float(raw[: len(raw) - len(unit)]) * _UNITS[unit])
        except ValueError:
            raise ValueError(f"bad limit {item!r}: {raw!r} is not a number") from None
        if value <= 0:
            raise ValueError(f"bad limit {item!r}: must be positive")
        limits = dataclasses.replace(limits, **{name: value})  # type: ignore[arg-type]
    return limits


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
    truncated: bool = False
    """stdout or stderr passed Limits.output: only its first bytes are kept."""


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


class BaseTree(Protocol):
    """The tree a workspace holds as its owner recorded it (the trace's head tree):
    a run compares a changed file with it by content id, so it never reads the
    old file through a path the command could have redirected."""

    def entry(self, path: str, /) -> tuple[int, str] | None:
        """(git mode, git blob id as 40 hex digits) of the file or symlink at
        `path` (POSIX, relative); None when the tree holds none there."""


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
        limits: Limits | None = None,
        toolchain: Sequence[Path] = (),
        base: BaseTree | None = None,
    ) -> ExecResult:
        """Run `argv` in a throwaway child layer over this workspace, seen at
        /workspace/repo, in the sandbox `run_isolated` describes (unprivileged,
        minimal read-only host, private /tmp, no network unless asked, the
        `limits`, killed at `timeout`; `toolchain` directories shown read-only).

        Returns the result with the changes the command made; `self.path` is
        untouched. A changed file equal to its entry in `base` (or, for a path
        `base` lacks or without `base`, to the file in `self.path`, read without
        following anything) is no change. Raises ExecUnavailable when isolation
        is impossible here, ValueError for a timeout past `limits.timeout_max`,
        ChangesTooLarge past `limits.changed_bytes` or `changed_files` (nothing
        of the command's files read), TreeTooDeep past MAX_SCAN_DEPTH.
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
