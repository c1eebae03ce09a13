"""Law: `merge_texts` is `git merge-file -p`: the same verdict (clean or conflict)
and, when clean, the same text, on generated edits of one base text."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator.store._merge import merge_texts
from tests.text_edits import edited

LINES = [b"a\n", b"b\n", b"\n", b"def f():\n", b"    return 1\n", b"}\n", b"x\r\n", b"# c\n"]
text = st.lists(st.sampled_from(LINES), min_size=0, max_size=16).map(b"".join)


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

    def edit() -> bytes:
        return draw(edited(base, min_edits=0, new=[b"X\n", b"Y\n", b"\n", b"a\n", b"}\n"],
                           keep_a_line=False, no_eol_one_in=8))

    return edit(), base, edit()


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


def test_binary_texts_do_not_merge_as_git_refuses_them():
    """Attack: NUL bytes. `git merge-file` refuses binary files (exit 255); so does
    merge_texts (None), even when one side alone changed."""
    base, ours, theirs = b"a\0b\nline\n", b"a\0b\nline ours\n", b"a\0c\nline\n"
    for o, t in ((ours, theirs), (ours, base)):
        assert git_merge_file(o, base, t) is None
        assert merge_texts(o, base, t) is None


def test_merges_on_many_threads_at_once_agree():
    """Attack: the oracle merges on worker threads; each call has its own object
    store, so 8 threads x 50 merges of a 3,000-line file all give the one answer."""
    from concurrent.futures import ThreadPoolExecutor

    base = b"".join(b"line %d\n" % i for i in range(3000))
    ours, theirs = base.replace(b"line 5\n", b"x\n"), base.replace(b"line 2000\n", b"y\n")
    want = ours.replace(b"line 2000\n", b"y\n")
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: merge_texts(ours, base, theirs), range(400)))
    assert got == [want] * 400
