"""Workspaces for scopes: copy-on-write trees, cheap forks, transactional commands.

Backends: `overlay` (kernel overlayfs, needs mount rights) and `copy` (plain
directories, works anywhere). `choose_backend` picks the best one here.
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
    SandboxError,
    Workspace,
)
from ._choose import backends, choose_backend
from ._exec import REPO_PATH
from ._files import apply_changes, snapshot_files
from .copy import CopyBackend
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
    "OverlayBackend",
    "SandboxError",
    "Workspace",
    "apply_changes",
    "backends",
    "choose_backend",
    "snapshot_files",
]
