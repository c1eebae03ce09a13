"""Law: `merge_texts` is `git merge-file -p`: the same verdict (clean or conflict)
and, when clean, the same text, on generated edits of one base text."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator._merge import merge_texts

LINES = [b"a\n", b"b\n", b"\n", b"def f():\n", b"    return 1\n", b"}\n", b"x\r\n", b"# c\n"]
text = st.lists(st.sampled_from(LINES), min_size=0, max_size=16).map(b"".join)


@st.composite
def edited(draw: st.DrawFn, data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(lines)))
        new = draw(st.sampled_from([b"X\n", b"Y\n", b"\n", b"a\n", b"}\n"]))
        what = draw(st.sampled_from(["insert", "replace", "delete"]))
        if what == "insert" or at == len(lines):
            lines.insert(at, new)
        elif what == "replace":
            lines[at] = new
        else:
            del lines[at]
    out = b"".join(lines)
    return out.rstrip(b"\n") if draw(st.integers(0, 7)) == 0 else out


def git_merge_file(ours: bytes, base: bytes, theirs: bytes) -> bytes | None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            (Path(tmp) / name).write_bytes(data)
            paths.append(str(Path(tmp) / name))
        done = subprocess.run(["git", "merge-file", "-p", *paths], capture_output=True)
        assert done.returncode >= 0, done.stderr
        return done.stdout if done.returncode == 0 else None


@st.composite
def triples(draw: st.DrawFn) -> tuple[bytes, bytes, bytes]:
    base = draw(text)
    return draw(edited(base)), base, draw(edited(base))


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=triples())
def test_merge_texts_is_git_merge_file(case):
    ours, base, theirs = case
    want = git_merge_file(ours, base, theirs)
    event("clean" if want is not None else "conflict")
    assert merge_texts(ours, base, theirs) == want


def test_a_clean_merge_and_a_conflict():
    base = b"".join(b"line %d\n" % i for i in range(40))
    ours = base.replace(b"line 3\n", b"line 3 ours\n")
    theirs = base.replace(b"line 30\n", b"line 30 theirs\n")
    assert merge_texts(ours, base, theirs) == ours.replace(b"line 30\n", b"line 30 theirs\n")
    assert merge_texts(ours, base, base.replace(b"line 3\n", b"line 3 theirs\n")) is None
    assert git_merge_file(ours, base, base.replace(b"line 3\n", b"line 3 theirs\n")) is None
