"""A hypothesis strategy the laws against git share: a text edited line by line."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st


@st.composite
def edited(draw: st.DrawFn, data: bytes, *, min_edits: int = 1,
           new: Sequence[bytes] = (b"X\n", b"Y\n", b"\n", b"a\n"),
           keep_a_line: bool = True, no_eol_one_in: int = 7) -> bytes:
    """`data` with 1-4 (at least `min_edits`) lines inserted, replaced or deleted
    (the last line kept when `keep_a_line`), its final newlines stripped one time in
    `no_eol_one_in`."""
    lines = data.splitlines(keepends=True)
    for _ in range(draw(st.integers(min_edits, 4))):
        at = draw(st.integers(0, len(lines)))
        line = draw(st.sampled_from(list(new)))
        what = draw(st.sampled_from(["insert", "replace", "delete"]))
        if what == "insert" or at == len(lines):
            lines.insert(at, line)
        elif what == "replace":
            lines[at] = line
        elif len(lines) > 1 or not keep_a_line:
            del lines[at]
    out = b"".join(lines)
    return out.rstrip(b"\n") if draw(st.integers(1, no_eol_one_in)) == 1 else out
