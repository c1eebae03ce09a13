"""Applying a patch (the `fs.patch` effect) exactly as `git apply` does.

The patch is handed to `git apply --cached` itself, in a throwaway git
directory (`_scratch.GitDir`) whose index holds only the files the patch can
name, read from the workspace. So Corral accepts what `git apply` accepts
(many files, new and deleted files, renames, copies, mode changes, binary
patches, `@@` line counts, offsets but no fuzz) and refuses what it refuses,
with git's own message, and the files come out as git makes them.
`three_way=True` is `git apply --3way`: a file whose patch does not apply is
merged from the blob the patch was made against, when the trace has it.

A bare list of hunks for one file (what `patch(path, diff)` always took) is
given the `--- a/path` / `+++ b/path` header it lacks and is applied with
`--unidiff-zero` (so a hand-made hunk need not carry context at both ends);
a diff that names another file is refused.

The common case (existing text files, every hunk exactly where git looks
first) is worked out in process by `_quick_patch`, with git's result and
without its process; the rest goes to git.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import FileMode, ObjectType

from ..records._errors import PatchError, PathError
from ..records._paths import check_path, resolve_in
from ._gitdir import GitDir
from ._quick_patch import Refusal, apply_quick
from ._trace import Trace

__all__ = [
    "PatchedFile", "apply_patch", "candidate_paths", "for_one_file", "has_workspace_file",
    "trace_blobs", "workspace_files",
]

Preimage = Callable[[str], tuple[bytes, int] | None]
"""A file's current (content, git mode), or None when it is not a file."""


@dataclass(frozen=True, slots=True)
class PatchedFile:
    """One file a patch changes: its new content and mode, or deleted (None)."""

    path: str
    data: bytes | None
    mode: int = 0o100644


_HEADER = re.compile(rb"^(---|\+\+\+) (.*?)(?:\t.*)?\r?$", re.M)
_GIT_LINE = re.compile(rb"^diff --git (.*?)\r?$", re.M)
_EXTENDED = re.compile(rb"^(?:rename|copy) (?:from|to) (.*?)\r?$", re.M)
_INDEX = re.compile(rb"^index ([0-9a-f]{4,64})\.\.[0-9a-f]+", re.M)
_HUNK = re.compile(rb"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)
_ESCAPES = {b"n": b"\n", b"t": b"\t", b'"': b'"', b"\\": b"\\", b"a": b"\a", b"b": b"\b",
            b"f": b"\f", b"r": b"\r", b"v": b"\v"}


def _unquote(name: bytes) -> str:
    """A path as git writes it in a patch: bare, or C-quoted with octal escapes."""
    if len(name) >= 2 and name[:1] == b'"' and name[-1:] == b'"':
        body, out, i = name[1:-1], bytearray(), 0
        while i < len(body):
            c = body[i:i + 1]
            if c == b"\\" and i + 1 < len(body):
                nxt = body[i + 1:i + 2]
                if nxt.isdigit():
                    out.append(int(body[i + 1:i + 4], 8))
                    i += 4
                    continue
                out += _ESCAPES.get(nxt, nxt)
                i += 2
                continue
            out += c
            i += 1
        name = bytes(out)
    return name.decode("utf-8", "surrogateescape")


def _strip_one(name: str) -> str | None:
    """The name with its first component (git's `-p1`) removed."""
    return name.split("/", 1)[1] if "/" in name else None


def candidate_paths(diff: bytes) -> set[str]:
    """Every path the patch could name (a superset: `git apply` decides which
    ones it does): the `---`/`+++` names, each way of splitting a
    `diff --git` line in two, and the rename/copy lines."""
    out: set[str] = set()
    for _, name in _HEADER.findall(diff):
        if name.strip() != b"/dev/null" and (p := _strip_one(_unquote(name.strip()))):
            out.add(p)
    for rest in _GIT_LINE.findall(diff):
        if rest.startswith(b'"'):
            parts = re.findall(rb'"(?:[^"\\]|\\.)*"|\S+', rest)
            splits = [(parts[0], b" ".join(parts[1:]))] if len(parts) >= 2 else []
        else:
            splits = [(rest[:i], rest[i + 1:]) for i, c in enumerate(rest) if c == 0x20]
        for left, right in splits:
            for side in (left, right):
                if p := _strip_one(_unquote(side)):
                    out.add(p)
    out.update(_unquote(name) for name in _EXTENDED.findall(diff))
    return out


def for_one_file(path: str, diff: bytes) -> bytes:
    """A one-file diff made whole: bare hunks get the header for `path`; a
    diff with headers must name `path` (with or without git's a/ b/ prefixes).
    Raises PatchError when it names another file or has no hunk."""
    if _GIT_LINE.search(diff):
        named = {n for n in candidate_paths(diff) if n == path}
        if not named:
            raise PatchError(f"the diff is not of {path!r}")
        return diff
    if not _HUNK.search(diff):
        raise PatchError("the diff has no hunks (expected '@@ -a,b +c,d @@' lines)")
    names = {k: _unquote(v.strip()) for k, v in _HEADER.findall(diff[: _HUNK.search(diff).start()])}  # type: ignore[union-attr]
    for key, prefix in ((b"---", "a/"), (b"+++", "b/")):
        name = names.get(key)
        if name is not None and name != "/dev/null" and name not in (path, prefix + path):
            raise PatchError(f"the diff is of {name!r}, not {path!r}")
    old = "/dev/null" if names.get(b"---") == "/dev/null" else f"a/{path}"
    new = "/dev/null" if names.get(b"+++") == "/dev/null" else f"b/{path}"
    body = diff[_HUNK.search(diff).start():]  # type: ignore[union-attr]
    return f"--- {old}\n+++ {new}\n".encode() + body


def apply_patch(
    diff: bytes,
    preimage: Preimage,
    *,
    three_way: bool = False,
    unidiff_zero: bool = False,
    blob: Callable[[str], bytes | None] = lambda _: None,
) -> list[PatchedFile]:
    """The files `diff` changes, as `git apply` would leave them.

    `preimage(path)` gives a file's current content and mode (None: no file
    there). With `three_way`, `blob(abbreviated id)` gives the blobs the patch
    says it was made against (None when unknown), for `git apply --3way`.
    `unidiff_zero` is `git apply --unidiff-zero` (hunks without context,
    as `diff -U0` makes them, are placed by their line numbers).
    Raises PatchError with git's message when the patch is malformed or does
    not apply (or, three-way, conflicts).
    """
    if not diff.strip():
        raise PatchError("the patch is empty")
    if not three_way:
        # Most patches (an agent's hunk, a gold patch's) need no git process.
        quick = apply_quick(diff, preimage, unidiff_zero=unidiff_zero)
        if isinstance(quick, Refusal):
            raise PatchError(_message(quick.message()))
        if quick is not None:
            return [PatchedFile(path, data, mode) for path, data, mode in quick]
    with GitDir() as git:
        index_file = git.path / "index"
        index = pygit2.Index(str(index_file))
        before: dict[str, tuple[str, int]] = {}
        for path in sorted(candidate_paths(diff)):
            found = preimage(path)
            if found is None:
                continue
            oid = git.blob(found[0])
            before[path] = (oid, found[1])
            index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=oid), FileMode(found[1])))
        if three_way:
            for abbrev in set(_INDEX.findall(diff)):
                data = blob(abbrev.decode())
                if data is not None:
                    git.blob(data)
        index.write()
        args = ["apply", "--cached", *(["--3way"] if three_way else []),
                *(["--unidiff-zero"] if unidiff_zero else []), "-"]
        done = git.run(*args, input=diff, env={"GIT_INDEX_FILE": str(index_file)})
        if done.returncode != 0:
            raise PatchError(_message(done.stderr))
        after = pygit2.Index(str(index_file))
        now = {e.path: (str(e.id), e.mode) for e in after}
        out: list[PatchedFile] = []
        for path in sorted(before.keys() | now.keys()):
            if before.get(path) == now.get(path):
                continue
            if path not in now:
                out.append(PatchedFile(path, None))
            else:
                out.append(PatchedFile(path, git.read(now[path][0])[1], now[path][1]))
        return out


def _message(stderr: bytes) -> str:
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    errors = [ln.removeprefix("error: ") for ln in lines if not ln.startswith("warning:")]
    text = "; ".join(errors or lines) or "git apply refused the patch"
    return f"the patch does not apply: {text}"


def workspace_files(root: Path) -> Preimage:
    """A Preimage reading the workspace at `root`: a file's content and git
    mode; None for what is no file there, or no valid path (a patch naming
    one then fails in git, which finds no such file)."""

    def read(path: str) -> tuple[bytes, int] | None:
        found = _workspace_file(root, path)
        if found is None:
            return None
        target, st = found
        if stat.S_ISLNK(st.st_mode):
            return os.fsencode(os.readlink(target)), 0o120000
        return target.read_bytes(), 0o100755 if st.st_mode & 0o111 else 0o100644

    return read


def has_workspace_file(root: Path, path: str) -> bool:
    """Whether `workspace_files(root)` finds a file at `path` (nothing read)."""
    return _workspace_file(root, path) is not None


def _workspace_file(root: Path, path: str) -> tuple[Path, os.stat_result] | None:
    """The file or symlink at `path` in the workspace and its lstat; None for
    anything else, or no valid path."""
    try:
        target = resolve_in(root, check_path(path), follow_last=False)
        st = target.lstat()
    except (PathError, OSError):
        return None
    return (target, st) if stat.S_ISLNK(st.st_mode) or stat.S_ISREG(st.st_mode) else None


def trace_blobs(trace: Trace) -> Callable[[str], bytes | None]:
    """Blobs of the trace by abbreviated id (for `git apply --3way`)."""

    def blob(abbrev: str) -> bytes | None:
        try:
            obj = trace.repo[abbrev]
        except (KeyError, ValueError):
            return None
        return obj.read_raw() if obj.type == ObjectType.BLOB else None

    return blob
