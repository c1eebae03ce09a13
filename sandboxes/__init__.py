"""Workspaces for scopes: copy-on-write trees, cheap forks, transactional commands.

Backends: `overlay` (kernel overlayfs, needs mount rights), `copy` (plain
directories, works anywhere) and `fuse` (the overlay seen through a FUSE mount
that asks an interceptor before every mutating call; opt-in).
`choose_backend` picks the best one here.
"""

from ._base import (
    MODE_EXEC,
    MODE_FILE,
    MODE_LINK,
    Backend,
    BackendUnavailable,
    Change,
    ExecResult,
    ExecUnavailable,
    Interceptor,
    MutationIntent,
    MutationOp,
    SandboxError,
    Workspace,
)
from ._choose import backends, choose_backend
from ._exec import REPO_PATH
from ._files import apply_changes, snapshot_files
from .copy import CopyBackend
from .fuse import FuseBackend
from .overlay import OverlayBackend

__all__ = [
    "MODE_EXEC",
    "MODE_FILE",
    "MODE_LINK",
    "REPO_PATH",
    "Backend",
    "BackendUnavailable",
    "Change",
    "CopyBackend",
    "ExecResult",
    "ExecUnavailable",
    "FuseBackend",
    "Interceptor",
    "MutationIntent",
    "MutationOp",
    "OverlayBackend",
    "SandboxError",
    "Workspace",
    "apply_changes",
    "backends",
    "choose_backend",
    "snapshot_files",
]
