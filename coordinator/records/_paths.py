"""Checking the paths agents give: relative, inside the workspace, never in `.git`."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from ._errors import PathError

__all__ = ["MAX_PATH_BYTES", "MAX_PATH_DEPTH", "check_path", "check_scope_name", "resolve_in"]

MAX_PATH_BYTES = 2048
"""Longest workspace-relative path (UTF-8 bytes): the workspace's own prefix
must still fit in the kernel's PATH_MAX (4096) in front of it."""
MAX_PATH_DEPTH = 128
"""Most components in a path: deeper trees overflow recursive tree walks
(git's, Python's) long before any real repository needs them."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Code points HFS+ ignores when comparing names (git's is_hfs_dotgit list):
# ".g\u200cit" is ".git" on a Mac.
_HFS_IGNORED = re.compile("[\u200c\u200d\u200e\u200f\u202a-\u202e\u206a-\u206f\ufeff]")


def _is_dotgit(part: str) -> bool:
    """Whether a path component names `.git` on some filesystem git protects:
    any case, trailing dots or spaces (NTFS), an NTFS stream (`.git::$DATA`)
    or backslash, the 8.3 short name `git~1`, or HFS+ ignorable code points
    (git's `verify_path` with core.protectNTFS and core.protectHFS)."""
    if part.isascii():
        name = part.lower()
        if "git" not in name:
            return False  # the common case, without the regular expressions
    else:
        name = _HFS_IGNORED.sub("", part).casefold()
    name = re.split(r"[:\\]", name, maxsplit=1)[0].rstrip(". ")
    return name in (".git", "git~1")


def check_path(path: str) -> str:
    """The normalized POSIX form of a workspace-relative `path`.

    Raises PathError for an empty, absolute or `..` path, a control character
    (NUL, newline, ...), a path into `.git` under any spelling git refuses
    (`.GIT`, `.git.`, `.git `, `git~1`), or one longer than MAX_PATH_BYTES or
    deeper than MAX_PATH_DEPTH: the repository's own metadata is never an
    agent's to write, and what git cannot record is refused before anything
    is written.
    """
    if not isinstance(path, str) or not path:
        raise PathError(f"invalid path {path!r}: must be a non-empty string")
    if _CONTROL.search(path):
        raise PathError(f"invalid path {path!r}: control characters are not allowed")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        raise PathError(f"invalid path {path!r}: must be relative to the workspace")
    try:
        size = len(path.encode())
    except UnicodeEncodeError as e:  # a lone surrogate
        raise PathError(f"invalid path {path!r}: not valid unicode", cause=e) from e
    if size > MAX_PATH_BYTES:
        raise PathError(f"invalid path {path[:60]!r}...: longer than {MAX_PATH_BYTES} bytes")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts:
        raise PathError(f"invalid path {path!r}: names no file")
    if len(parts) > MAX_PATH_DEPTH:
        raise PathError(f"invalid path {path[:60]!r}...: deeper than {MAX_PATH_DEPTH} levels")
    if ".." in parts:
        raise PathError(f"invalid path {path!r}: '..' is not allowed")
    if any(_is_dotgit(p) for p in parts):
        raise PathError(f"invalid path {path!r}: writing into .git is not allowed")
    if any(len(p.encode()) > 255 for p in parts):
        raise PathError(f"invalid path {path[:60]!r}...: a component is longer than 255 bytes")
    return "/".join(parts)


_SCOPE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_scope_name(name: str) -> str:
    """`name`, when it can name a scope: letters, digits, '.', '_', '-' (up to
    64, starting with a letter or digit) and a valid git ref name under every
    ref Corral makes for it (no '..', no trailing '.', no '.lock' suffix).
    Raises PathError."""
    # Within _SCOPE_NAME's alphabet, these are the only ways git refuses the refs
    # (tests/coordinator/test_integrity_names.py checks it against libgit2's rule).
    if (
        not isinstance(name, str)
        or not _SCOPE_NAME.match(name)
        or ".." in name
        or name.endswith((".", ".lock"))
    ):
        raise PathError(
            f"invalid scope name {name!r}: use up to 64 letters, digits, '.', '_', '-', "
            "starting with a letter or digit, that git accepts in a ref name (no '..', "
            "no trailing '.', no '.lock' suffix)"
        )
    return name


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
