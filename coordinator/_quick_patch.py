"""The common patch worked out in process, exactly as `git apply` would, or declined.

Spawning `git apply` costs a process, a scratch git directory and an index
(~5-10 ms idle, several times that on a loaded machine) for what is usually a
few lines changed in an existing file: an agent's hunk, a gold patch applied
hunk by hunk. This module handles that case and declines everything else, so
`_patch.apply_patch` hands the rest to git unchanged.

What it handles: text modifications of existing regular files (`diff --git`
sections with an optional `index` line, or the bare `--- a/p` / `+++ b/p`
form), each hunk found byte for byte where git looks first. git places hunk k
at its *new* start in the image the earlier hunks left (`apply_one_fragment`:
`pos = newpos - 1`); a hunk with no leading context at line 1 (or at 0) must
match at the beginning, and without `--unidiff-zero` one with no trailing
context must match at the end; a hunk may not touch lines an earlier hunk
wrote (`LINE_PATCHED`). When all of that holds at the first place git tries,
git applies it there, so the result is git's.

What it declines (None): `--3way` (git then tries a merge first), new,
deleted, renamed, copied or binary files, mode lines, `\\ No newline` markers,
a hunk elsewhere than its stated line (git searches for an offset), counts
that do not match the body, anything but hunks after the header, paths that
need quoting, empty files or results, NUL bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["QuickFile", "apply_quick"]

QuickFile = tuple[str, bytes, int]
"""(path, new content, mode)."""

_SAFE_PATH = re.compile(rb"[A-Za-z0-9_.+@=,-]+(?:/[A-Za-z0-9_.+@=,-]+)*")
_HUNK = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_INDEX = re.compile(rb"index [0-9a-f]{7,64}\.\.[0-9a-f]{7,64}(?: (100644|100755))?")


def _split_lines(data: bytes) -> list[bytes]:
    """Lines with their '\\n' (the last may lack one); only '\\n' ends a line, as in git."""
    if b"\r" not in data:  # then bytes.splitlines (~10x faster) splits the same way
        return data.splitlines(keepends=True)
    lines = data.split(b"\n")
    out = [ln + b"\n" for ln in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def _name(line: bytes, prefix: bytes) -> bytes | None:
    """The path of a `--- a/p` / `+++ b/p` line (`prefix` is b'--- a/' or b'+++ b/')."""
    if not line.startswith(prefix) or not line.endswith(b"\n"):
        return None
    path = line[len(prefix):-1]
    return path if _SAFE_PATH.fullmatch(path) else None


def apply_quick(
    diff: bytes,
    preimage: Callable[[str], tuple[bytes, int] | None],
    *,
    unidiff_zero: bool,
) -> list[QuickFile] | None:
    """The files `diff` changes (sorted by path) when it is the common case above
    and applies exactly; None to let git decide (including every refusal)."""
    if b"\0" in diff:
        return None
    lines = _split_lines(diff)
    if not lines or not lines[-1].endswith(b"\n"):
        return None
    i, seen = 0, set()
    out: list[QuickFile] = []
    while i < len(lines):
        mode_line: bytes | None = None
        if lines[i].startswith(b"diff --git "):
            m = re.fullmatch(rb"diff --git a/(\S+) b/(\S+)\n", lines[i])
            if not m or m.group(1) != m.group(2):
                return None
            git_path: bytes | None = m.group(1)
            i += 1
            if i < len(lines) and lines[i].startswith(b"index "):
                found = _INDEX.fullmatch(lines[i].rstrip(b"\n"))
                if found is None or not lines[i].endswith(b"\n"):
                    return None
                mode_line = found.group(1)
                i += 1
        elif i == 0:
            git_path = None  # the bare form: only at the start, one file
        else:
            return None
        if i + 1 >= len(lines):
            return None
        old, new = _name(lines[i], b"--- a/"), _name(lines[i + 1], b"+++ b/")
        if old is None or old != new or (git_path is not None and old != git_path):
            return None
        i += 2
        path = old.decode()
        if path in seen:
            return None  # git applies a second section to the first one's result
        seen.add(path)
        found_file = preimage(path)
        if found_file is None:
            return None
        data, mode = found_file
        if mode not in (0o100644, 0o100755) or not data or b"\0" in data:
            return None
        if mode_line is not None and int(mode_line, 8) != mode:
            return None  # git would take the index line's mode (with a warning)
        image = _split_lines(data)
        floor = 0  # lines before this were written by an earlier hunk (LINE_PATCHED)
        hunks = 0
        while i < len(lines) and lines[i].startswith(b"@@ -"):
            header = _HUNK.match(lines[i])
            if header is None or not lines[i].endswith(b"\n"):
                return None
            old_start, new_start = int(header.group(1)), int(header.group(3))
            old_left = 1 if header.group(2) is None else int(header.group(2))
            new_left = 1 if header.group(4) is None else int(header.group(4))
            i += 1
            pre: list[bytes] = []
            post: list[bytes] = []
            changed = trailing = 0
            while old_left or new_left:
                if i >= len(lines):
                    return None
                line = lines[i]
                tag = line[:1]
                if tag in (b" ", b"\n"):
                    body = line[1:] if tag == b" " else b"\n"
                    pre.append(body)
                    post.append(body)
                    old_left, new_left = old_left - 1, new_left - 1
                    trailing += 1
                elif tag == b"-":
                    pre.append(line[1:])
                    old_left -= 1
                    changed, trailing = changed + 1, 0
                elif tag == b"+":
                    post.append(line[1:])
                    new_left -= 1
                    changed, trailing = changed + 1, 0
                else:
                    return None  # '\\' markers and anything else: git's business
                if old_left < 0 or new_left < 0:
                    return None
                i += 1
            if not changed:
                return None
            pos = new_start - 1 if new_start else 0
            at_start = old_start == 0 or (old_start == 1 and not unidiff_zero)
            at_end = not unidiff_zero and trailing == 0
            if pos < floor or pos + len(pre) > len(image) or image[pos:pos + len(pre)] != pre:
                return None
            if (at_start and pos != 0) or (at_end and pos + len(pre) != len(image)):
                return None
            if pos + len(pre) == len(image) and image and not image[-1].endswith(b"\n"):
                return None  # lines added after a last line without its newline
            image[pos:pos + len(pre)] = post
            floor = pos + len(post)
            hunks += 1
        if not hunks:
            return None
        result = b"".join(image)
        if not result:
            return None  # an emptied file may be taken as a deletion
        if result != data:
            out.append((path, result, mode))
    return sorted(out) if seen else None
