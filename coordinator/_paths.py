"""Checking the paths agents give: relative, inside the workspace, never in `.git`."""

from __future__ import annotations

import os
from pathlib import Path

from ._errors import PathError

__all__ = ["check_path", "resolve_in"]


def check_path(path: str) -> str:
    """The normalized POSIX form of a workspace-relative `path`.

    Raises PathError for an empty, absolute or `..` path, a NUL byte, or a path
    into `.git` (the repository's own metadata is never an agent's to write).
    """
    if not isinstance(path, str) or not path or "\x00" in path:
        raise PathError(f"invalid path {path!r}: must be a non-empty string")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        raise PathError(f"invalid path {path!r}: must be relative to the workspace")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts:
        raise PathError(f"invalid path {path!r}: names no file")
    if ".." in parts:
        raise PathError(f"invalid path {path!r}: '..' is not allowed")
    if ".git" in parts:
        raise PathError(f"invalid path {path!r}: writing into .git is not allowed")
    return "/".join(parts)


def resolve_in(root: Path, rel: str, *, follow_last: bool) -> Path:
    """The absolute path of `rel` under `root`, refusing symlinks that lead outside.

    Parent directories are resolved through symlinks and must stay within
    `root`; the last component is followed only if `follow_last` (reads).
    Raises PathError on an escape.
    """
    rel = check_path(rel)
    real_root = os.path.realpath(root)
    target = os.path.join(real_root, rel)
    parent = os.path.realpath(os.path.dirname(target))
    if parent != real_root and not parent.startswith(real_root + os.sep):
        raise PathError(f"path {rel!r} resolves outside the workspace through a symlink")
    final = os.path.join(parent, os.path.basename(target))
    if follow_last and os.path.islink(final):
        real = os.path.realpath(final)
        if real != real_root and not real.startswith(real_root + os.sep):
            raise PathError(f"path {rel!r} is a symlink that points outside the workspace")
    return Path(final)
