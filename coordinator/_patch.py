"""Applying unified-diff hunks to one file's content (the `fs.patch` effect)."""

from __future__ import annotations

import re

from ._errors import PatchError

__all__ = ["apply_unified_diff"]

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _hunks(diff: bytes) -> list[tuple[int, list[bytes], list[bytes]]]:
    """(old start, old lines, new lines) for each hunk; lines keep their newline."""
    hunks: list[tuple[int, list[bytes], list[bytes]]] = []
    current: tuple[int, list[bytes], list[bytes]] | None = None
    prev = b""
    for line in diff.splitlines(keepends=True):
        m = _HUNK.match(line)
        if m:
            current = (int(m.group(1)), [], [])
            hunks.append(current)
        elif current is None:
            continue  # headers (---, +++, diff --git, index ...)
        elif line.startswith(b"\\"):
            # "\ No newline at end of file" applies to the previous line
            last_old = current[1][-1] if current[1] else None
            last_new = current[2][-1] if current[2] else None
            if prev == b"-" and last_old is not None:
                current[1][-1] = last_old.rstrip(b"\n")
            elif prev == b"+" and last_new is not None:
                current[2][-1] = last_new.rstrip(b"\n")
            elif prev == b" ":
                if last_old is not None:
                    current[1][-1] = last_old.rstrip(b"\n")
                if last_new is not None:
                    current[2][-1] = last_new.rstrip(b"\n")
            continue
        else:
            tag, body = line[:1], line[1:]
            if tag == b"\n" or line == b"\n":
                tag, body = b" ", b"\n"
            if not body.endswith(b"\n"):
                body += b"\n"
            if tag == b" ":
                current[1].append(body)
                current[2].append(body)
            elif tag == b"-":
                current[1].append(body)
            elif tag == b"+":
                current[2].append(body)
            else:
                raise PatchError(f"malformed diff line: {line[:60]!r}")
        prev = line[:1]
    if not hunks:
        raise PatchError("the diff has no hunks (expected '@@ -a,b +c,d @@' lines)")
    return hunks


def apply_unified_diff(original: bytes, diff: bytes, path: str = "") -> bytes:
    """`original` with every hunk of `diff` applied, in order.

    A hunk is placed at its stated line, or at the nearest place where its
    context matches exactly (as `patch` does with an offset). Raises PatchError
    when a hunk's context is not found.
    """
    lines = original.splitlines(keepends=True)
    out: list[bytes] = []
    pos = 0  # next unconsumed line of `lines`
    for start, old, new in _hunks(diff):
        want = max(start - 1, 0) if old else start
        at = _find(lines, old, want, pos)
        if at is None:
            raise PatchError(f"hunk at line {start} does not apply to {path or 'the file'}")
        out.extend(lines[pos:at])
        out.extend(new)
        pos = at + len(old)
    out.extend(lines[pos:])
    return b"".join(out)


def _find(lines: list[bytes], old: list[bytes], want: int, lo: int) -> int | None:
    n = len(old)
    if n == 0:
        return min(max(want, lo), len(lines))
    for delta in range(0, len(lines) + 1):
        for at in (want - delta, want + delta) if delta else (want,):
            if lo <= at <= len(lines) - n and lines[at : at + n] == old:
                return at
    return None
