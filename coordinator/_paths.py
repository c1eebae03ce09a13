"""Checking the paths agents give: relative, inside the workspace, never in `.git`."""

from __future__ import annotations

import os
import stat
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

    For writes (`follow_last` False) no directory on the way may be a symlink,
    as git refuses paths beyond a symbolic link: the file would land somewhere
    other than the tree records, possibly outside the workspace. For reads,
    symlinks are followed but must resolve inside `root`. Only the components
    below `root` are looked at (an lstat each), so the check costs the path's
    depth in the workspace, not in the filesystem. Raises PathError.
    """
    rel = check_path(rel)
    parts = rel.split("/")
    current = os.fspath(root)
    for i, part in enumerate(parts):
        current = f"{current}/{part}"
        if i == len(parts) - 1 and not follow_last:
            break  # a write replaces whatever is there, a symlink included
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            break  # what is missing will be created (or reported) by the caller
        if not stat.S_ISLNK(mode):
            continue
        link = "/".join(parts[: i + 1])
        if not follow_last:
            raise PathError(
                f"path {rel!r} goes through the symbolic link {link!r}: writes beyond a "
                "symlink are refused (they could land outside the workspace)"
            )
        real_root = os.path.realpath(root)
        real = os.path.realpath(os.path.join(root, rel))
        if real != real_root and not real.startswith(real_root + os.sep):
            raise PathError(f"path {rel!r} resolves outside the workspace through a symlink")
        break
    return Path(root, rel)
