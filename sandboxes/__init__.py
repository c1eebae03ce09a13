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
    BaseTree,
    Change,
    ChangesTooLarge,
    ExecResult,
    ExecUnavailable,
    Interceptor,
    Limits,
    MutationIntent,
    MutationOp,
    SandboxError,
    TreeTooDeep,
    Workspace,
    parse_limits,
)
from ._choose import backends, choose_backend
from ._exec import (
    REPO_PATH,
    SANDBOX_UID,
    SYSTEM_DIRS,
    check_hidden,
    default_env,
    run_bare_bwrap,
    sandbox_can_read,
)
from ._files import (
    Entry,
    apply_changes,
    leaves,
    read_entry,
    read_entry_beneath,
    share_file,
    snapshot_files,
)
from ._scratch import clear_dir, exec_base
from .copy import CopyBackend
from .fuse import FuseBackend
from .overlay import OverlayBackend

__all__ = [
    "MODE_EXEC",
    "MODE_FILE",
    "MODE_LINK",
    "REPO_PATH",
    "SANDBOX_UID",
    "SYSTEM_DIRS",
    "Backend",
    "BackendUnavailable",
    "BaseTree",
    "Change",
    "ChangesTooLarge",
    "CopyBackend",
    "ExecResult",
    "Entry",
    "ExecUnavailable",
    "FuseBackend",
    "Interceptor",
    "Limits",
    "MutationIntent",
    "MutationOp",
    "OverlayBackend",
    "SandboxError",
    "TreeTooDeep",
    "Workspace",
    "apply_changes",
    "backends",
    "check_hidden",
    "clear_dir",
    "choose_backend",
    "default_env",
    "exec_base",
    "leaves",
    "parse_limits",
    "read_entry",
    "read_entry_beneath",
    "run_bare_bwrap",
    "snapshot_files",
    "sandbox_can_read",
    "share_file",
]
