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

The first hunk of a file (nothing patched yet, no constraint to match at the
beginning or the end) may also be found at an offset, in `find_pos`'s order:
the nearest line to its stated one, the later of two equally near. That is
every hunk an agent sends alone whose line numbers are off (a second feature's
hunk after the first feature moved its lines, a model's miscount). Found
nowhere, in a patch of one file, it is git's refusal (`Refusal`, git's words).

What it declines (None): `--3way` (git then tries a merge first), new,
deleted, renamed, copied or binary files, mode lines, `\\ No newline` markers,
a later hunk elsewhere than its stated line (git searches for an offset with
the lines earlier hunks wrote excluded), counts that do not match the body,
anything but hunks after the header, paths that need quoting, empty files or
results, NUL bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["QuickFile", "Refusal", "apply_quick"]

QuickFile = tuple[str, bytes, int]
"""(path, new content, mode)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """git refuses the patch: the first hunk of its one file (old start `line`)
    matches nowhere in the file."""

    path: str
    line: int

    def message(self) -> bytes:
        """What `git apply` prints."""
        return (f"error: patch failed: {self.path}:{self.line}\n"
                f"error: {self.path}: patch does not apply\n").encode()

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


class _Image:
    """A file as the hunks applied so far leave it, kept as the original bytes and
    the replacements made (a 3,000-line file is not split into lines per hunk).

    Line numbers are git's: the image's, with the earlier hunks applied. Every line
    a hunk's body gives ends with '\\n', so a hunk's lines match the image's iff
    their bytes do, and only the original's last line can lack its newline.
    """

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        """Lines in the image now."""
        self.delta = 0
        """Lines the replacements added (negative: removed)."""
        self.floor = 0
        """Lines before this were written by an earlier hunk (git's LINE_PATCHED)."""
        self._at = (0, 0)
        """(original line, its byte offset): where the next search for a line starts."""
        self._done = 0
        """Original bytes before this are in `_out`."""
        self._out: list[bytes] = []

    def _offset(self, line: int) -> int:
        """The byte offset of original line `line` (at or after `_at`)."""
        at, offset = self._at
        data = self.data
        while at < line:
            # whole blocks of lines at a time, then line by line in the last one
            end = offset + _BLOCK
            if end < len(data):
                n = data.count(b"\n", offset, end)
                if n < line - at:
                    at, offset = at + n, end
                    continue
            while at < line:
                found = data.find(b"\n", offset)
                offset = len(data) if found < 0 else found + 1
                at += 1
        self._at = (at, offset)
        return offset

    def replace(self, pos: int, pre: list[bytes], post: list[bytes], *, at_start: bool,
                at_end: bool) -> bool | None:
        """Replace the image's lines `pre` at line `pos` by `post`, where git applies
        the hunk (see the module's doc); False when git would look elsewhere (the
        caller declines), None when git's search for a first hunk finds it nowhere."""
        end = pos + len(pre)
        if pos < self.floor or end > self.lines:
            return False
        if (at_start and pos != 0) or (at_end and end != self.lines):
            return False
        if end == self.lines and self.lines and not self.data.endswith(b"\n"):
            return False  # lines added after a last line without its newline
        # Lines from `floor` on are the original's, `delta` lines further down.
        start = self._offset(pos - self.delta)
        stop = self._offset(end - self.delta)
        want = b"".join(pre)
        if self.data[start:stop] != want:
            if at_start or at_end or self._out or not want:
                return False
            found = self._nearest(want, pos, start)
            if found is None:
                return None
            pos, start = found
            stop = start + len(want)
            self._at = (pos + len(pre), stop)
        self._out += (self.data[self._done:start], *post)
        self._done = stop
        self.delta += len(post) - len(pre)
        self.lines += len(post) - len(pre)
        self.floor = pos + len(post)
        return True

    def _nearest(self, want: bytes, line: int, offset: int) -> tuple[int, int] | None:
        """Where git's `find_pos` finds `want` (whole lines) in the unpatched image
        when not at `line` (which starts at byte `offset`): (line, byte offset) of
        the nearest occurrence, the later of two equally near; None when there is
        none. It looks outward from `line`, as git does: the cost follows the
        distance, not the file (a context repeated on every line of a long file)."""
        data = self.data
        after = data.find(want, offset + 1)
        while after > 0 and data[after - 1] != 0x0A:  # not at a line's start
            after = data.find(want, after + 1)
        before = data.rfind(want, 0, offset - 1 + len(want))
        while before > 0 and data[before - 1] != 0x0A:
            before = data.rfind(want, 0, before - 1 + len(want))
        down = line + data.count(b"\n", offset, after) if after > 0 else None
        up = line - data.count(b"\n", before, offset) if before >= 0 else None
        if down is not None and (up is None or down - line <= line - up):
            return down, after
        return None if up is None else (up, before)

    def result(self) -> bytes:
        return b"".join((*self._out, self.data[self._done:]))


_BLOCK = 4096
"""Bytes of the original counted at once when looking for a line (~100 lines)."""


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
) -> list[QuickFile] | Refusal | None:
    """The files `diff` changes (sorted by path) when it is the common case above
    and applies exactly, git's refusal when its one file's first hunk matches
    nowhere; None to let git decide (every other refusal included)."""
    if b"\0" in diff:
        return None
    lines = _split_lines(diff)
    if not lines or not lines[-1].endswith(b"\n"):
        return None
    i, seen = 0, set()
    out: list[QuickFile] = []
    refusal: Refusal | None = None
    while i < len(lines):
        section = _file_header(lines, i)
        if section is None:
            return None
        path, mode_line, i = section
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
        edited = _Image(data)
        hunks = 0
        while i < len(lines) and lines[i].startswith(b"@@ -"):
            header = _HUNK.match(lines[i])
            if header is None or not lines[i].endswith(b"\n"):
                return None
            old_start, new_start = int(header.group(1)), int(header.group(3))
            old_left = 1 if header.group(2) is None else int(header.group(2))
            new_left = 1 if header.group(4) is None else int(header.group(4))
            body = _hunk_body(lines, i + 1, old_left, new_left)
            if body is None:
                return None
            pre, post, trailing, i = body
            pos = new_start - 1 if new_start else 0
            at_start = old_start == 0 or (old_start == 1 and not unidiff_zero)
            at_end = not unidiff_zero and trailing == 0
            if refusal is None:  # git stops at the first hunk that fails
                placed = edited.replace(pos, pre, post, at_start=at_start, at_end=at_end)
                if placed is None:
                    refusal = Refusal(path, old_start)
                elif not placed:
                    return None
            hunks += 1
        if not hunks:
            return None
        if refusal is not None:
            continue
        result = edited.result()
        if not result:
            return None  # an emptied file may be taken as a deletion
        if result != data:
            out.append((path, result, mode))
    if refusal is not None:
        # git checks every file of a patch and reports each failure: one file only
        return refusal if len(seen) == 1 else None
    return sorted(out) if seen else None


def _file_header(lines: list[bytes], i: int) -> tuple[str, bytes | None, int] | None:
    """(path, the index line's mode or None, where its hunks start) of the file section
    at line `i`, in the one form handled here (None for anything else)."""
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
    return old.decode(), mode_line, i + 2


def _hunk_body(lines: list[bytes], i: int, old_left: int, new_left: int
               ) -> tuple[list[bytes], list[bytes], int, int] | None:
    """(the lines the hunk expects, the lines it leaves, how many context lines end it,
    where the next line starts) for the body at line `i`; None when it is not a plain
    body that changes something."""
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
    return (pre, post, trailing, i) if changed else None
