"""Law: a patch `_quick_patch` works out in process is what `git apply` makes of it.

On generated cases (a file A patched towards B by `git diff -U<n>`, the patch, or
one of its hunks in the bare one-file form, applied to C = A or a perturbation of
A), `apply_quick` either declines (None) or returns exactly the content `git apply`
(`--unidiff-zero` for the bare form) leaves in a real worktree, and it never
accepts a patch git refuses. The examples below pin that it does handle the
common cases (else the speed-up is gone while every law still holds).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator.records._errors import PatchError
from coordinator.store._patch import apply_patch, for_one_file
from coordinator.store._quick_patch import Refusal, apply_quick
from tests.conftest import GIT_ENV
from tests.text_edits import edited


def _git(repo: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, **GIT_ENV, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=env,
                          input=input)


def _repo(tmp: Path) -> Path:
    repo = tmp / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    return repo


def make_diff(a: bytes, b: bytes, context: int, mode: int = 0o100644) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        repo = _repo(Path(tmp))
        f = repo / "d" / "f.py"
        f.parent.mkdir()
        f.write_bytes(a)
        f.chmod(0o755 if mode == 0o100755 else 0o644)
        _git(repo, "add", "-A")
        f.write_bytes(b)
        return _git(repo, "diff", f"-U{context}").stdout


def git_apply(c: bytes, patch: bytes, unidiff_zero: bool) -> bytes | None:
    """What `git apply` leaves in d/f.py of a worktree holding `c`, or None."""
    return git_apply_or_why(c, patch, unidiff_zero)[0]


def git_apply_or_why(c: bytes, patch: bytes, unidiff_zero: bool) -> tuple[bytes | None, bytes]:
    """What `git apply` leaves in d/f.py of a worktree holding `c` (None when it
    refuses) and what it printed on stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = _repo(Path(tmp))
        f = repo / "d" / "f.py"
        f.parent.mkdir()
        f.write_bytes(c)
        done = _git(repo, "apply", *(["--unidiff-zero"] if unidiff_zero else []), input=patch)
        return (f.read_bytes() if done.returncode == 0 else None), done.stderr


def quick(c: bytes, patch: bytes, unidiff_zero: bool, mode: int = 0o100644
          ) -> list[tuple[str, bytes, int]] | Refusal | None:
    return apply_quick(patch, lambda p: (c, mode) if p == "d/f.py" else None,
                       unidiff_zero=unidiff_zero)


LINES = [b"a\n", b"b\n", b"\n", b"def f():\n", b"    return 1\n", b"x\r\n", b"  \n"]
text = st.lists(st.sampled_from(LINES), min_size=1, max_size=14).map(b"".join)


@st.composite
def cases(draw: st.DrawFn) -> tuple[bytes, bytes, int, bytes, str]:
    a = draw(text)
    b = draw(edited(a))
    context = draw(st.sampled_from([0, 1, 3, 3]))
    how = draw(st.sampled_from(["same", "same", "same", "shifted", "shifted", "dropped",
                                "changed", "no-eol"]))
    top = b"".join(draw(st.lists(st.sampled_from(LINES), min_size=1, max_size=4)))
    c = {"same": a, "shifted": top + a, "dropped": a[a.find(b"\n") + 1:],
         "no-eol": a.rstrip(b"\n")}.get(how)
    if c is None:
        c = draw(edited(a))
    return a, b, context, c, how


LAW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _git_apply_or_declined(c: bytes, patch: bytes, how: str, *, unidiff_zero: bool) -> None:
    """The quick patch of `c` either declines or gives what `git apply` gives: the
    same file, or the same refusal in git's words."""
    want, why = git_apply_or_why(c, patch, unidiff_zero=unidiff_zero)
    got = quick(c, patch, unidiff_zero=unidiff_zero)
    event(f"{how}: " + ("declined" if got is None else "refused" if isinstance(got, Refusal)
                        else "in process"))
    if isinstance(got, Refusal):
        assert want is None, "refused a patch git applies"
        assert got.message() == why
    elif got is not None:
        assert want is not None, "accepted a patch git refuses"
        assert got == ([("d/f.py", want, 0o100644)] if want != c else [])


@pytest.mark.slow
@LAW
@given(case=cases())
def test_a_whole_diff_is_git_apply_or_declined(case):
    a, b, context, c, how = case
    patch = make_diff(a, b, context)
    if not patch:
        return
    _git_apply_or_declined(c, patch, how, unidiff_zero=False)


@pytest.mark.slow
@LAW
@given(case=cases(), which=st.integers(0, 5))
def test_a_bare_hunk_is_git_apply_unidiff_zero_or_declined(case, which):
    a, b, context, c, how = case
    patch = make_diff(a, b, context)
    hunks = [h for h in patch.split(b"\n@@")[1:]]
    if not hunks:
        return
    bare = for_one_file("d/f.py", b"@@" + hunks[which % len(hunks)].rstrip(b"\n") + b"\n")
    _git_apply_or_declined(c, bare, how, unidiff_zero=True)


A = b"".join(b"line %d\n" % i for i in range(1, 31))
B = A.replace(b"line 3\n", b"line 3\nnew 3\n").replace(b"line 20\n", b"changed 20\n")


def test_the_common_cases_are_worked_out_in_process():
    """A multi-hunk git diff, and each of its hunks as the oracle sends them (the old
    start moved by the earlier hunks), need no git process, with git's result."""
    patch = make_diff(A, B, 3)
    assert patch.count(b"\n@@ ") == 2
    assert quick(A, patch, unidiff_zero=False) == [("d/f.py", B, 0o100644)]
    files = apply_patch(patch, lambda p: (A, 0o100644) if p == "d/f.py" else None)
    assert [(f.path, f.data, f.mode) for f in files] == [("d/f.py", B, 0o100644)]
    first, second = (b"@@" + h.rstrip(b"\n") + b"\n" for h in patch.split(b"\n@@")[1:])
    step = quick(A, for_one_file("d/f.py", first), unidiff_zero=True)
    assert step is not None
    after = step[0][1]
    assert after == git_apply(A, for_one_file("d/f.py", first), unidiff_zero=True)
    shifted = second.replace(b"@@ -17,", b"@@ -18,", 1)  # +1 line from the first hunk
    assert quick(after, for_one_file("d/f.py", shifted), unidiff_zero=True) == [
        ("d/f.py", B, 0o100644)]


@pytest.mark.parametrize("why", ["offset", "no newline", "new file", "mode line", "overlap",
                                 "a file named twice", "garbage after"])
def test_what_git_must_decide_is_declined(why):
    patch = make_diff(A, B, 3)
    c = A
    if why == "offset":
        c = A.replace(b"line 10\n", b"line 10\nmore\n")  # git finds hunk 2 one line lower
    elif why == "no newline":
        patch = make_diff(A, A.rstrip(b"\n"), 3)
    elif why == "new file":
        patch = patch.replace(b"--- a/d/f.py", b"--- /dev/null")
    elif why == "mode line":
        patch = patch.replace(b"\n--- ", b"\nold mode 100644\nnew mode 100755\n--- ", 1)
    elif why == "overlap":
        # the second hunk starts inside the lines the first one wrote
        patch = patch.replace(b"@@ -17,7 +18,7 @@", b"@@ -2,7 +3,7 @@")
    elif why == "a file named twice":
        patch = patch + patch[patch.index(b"diff --git"):]
    elif why == "garbage after":
        patch = patch + b"trailing words\n"
    assert quick(c, patch, unidiff_zero=False) is None
    # and git's answer still comes: through git
    if why == "offset":
        files = apply_patch(patch, lambda p: (c, 0o100644) if p == "d/f.py" else None)
        assert files[0].data == B.replace(b"line 10\n", b"line 10\nmore\n")


def test_a_first_hunk_off_its_line_is_found_where_git_finds_it():
    """The first hunk of a file, its lines moved up or down (another feature's hunk
    applied first), is placed where git's search places it: the nearest match, the
    later of two equally near. Its line numbers only tell git where to start."""
    hunk = b"@@ -9,3 +9,4 @@\n line 9\n line 10\n+new 10\n line 11\n"
    bare = for_one_file("d/f.py", hunk)
    for c in (b"top\n" * 5 + A, A[A.index(b"line 4\n"):], A.replace(b"line 20\n", b"")):
        want = git_apply(c, bare, unidiff_zero=True)
        assert want is not None
        assert quick(c, bare, unidiff_zero=True) == [("d/f.py", want, 0o100644)]
    # the context twice, 3 lines above and 3 below its stated line: git takes the later
    twice = b"".join(b"l%d\n" % i for i in range(1, 6)) + b"line 9\nline 10\nline 11\n" \
        + b"x\n" * 3 + b"line 9\nline 10\nline 11\n" + b"y\n" * 5
    hunk = b"@@ -9,3 +9,4 @@\n line 9\n line 10\n+new 10\n line 11\n"
    bare = for_one_file("d/f.py", hunk)
    want = git_apply(twice, bare, unidiff_zero=True)
    assert want is not None and want.index(b"new 10") > twice.index(b"x\n")
    assert quick(twice, bare, unidiff_zero=True) == [("d/f.py", want, 0o100644)]
    # no match anywhere: git's refusal, in git's words, with no git process
    ten = A.replace(b"line 10\n", b"ten\n")
    refused = quick(ten, bare, unidiff_zero=True)
    assert refused == Refusal("d/f.py", 9)
    assert git_apply_or_why(ten, bare, unidiff_zero=True) == (None, refused.message())
    with pytest.raises(PatchError, match=re.escape("patch failed: d/f.py:9; d/f.py: patch does")):
        apply_patch(bare, lambda p: (ten, 0o100644) if p == "d/f.py" else None,
                    unidiff_zero=True)
    # in a patch of two files git reports each file's failure: that is git's to say
    two = b"".join(b"diff --git a/%s b/%s\n" % (n, n) + for_one_file(n.decode(), hunk)
                   for n in (b"d/f.py", b"e.py"))
    assert apply_quick(two, lambda p: (ten, 0o100644), unidiff_zero=True) is None
    assert isinstance(apply_quick(two.split(b"diff --git a/e.py")[0], lambda p: (ten, 0o100644),
                                  unidiff_zero=True), Refusal)


def test_a_context_on_every_line_of_a_long_file_is_placed_as_git_places_it():
    """Attack: the hunk's context is every line of a 50,000-line file but not at its
    stated line. The search goes outward from that line (its cost follows the
    distance, not the file) and lands where git lands, above or below."""
    hunk = b"@@ -50030,3 +50030,4 @@\n a\n a\n+new\n a\n"
    bare = for_one_file("d/f.py", hunk)
    for c in (b"a\n" * 50000 + b"b\n" * 60, b"b\n" * 50040 + b"a\n" * 50000):
        want = git_apply(c, bare, unidiff_zero=True)
        assert want is not None
        assert quick(c, bare, unidiff_zero=True) == [("d/f.py", want, 0o100644)]


def test_a_mode_on_the_index_line_must_be_the_files():
    patch = make_diff(A, B, 3, mode=0o100755)
    assert b"index " in patch and b" 100755\n" in patch
    assert quick(A, patch, unidiff_zero=False, mode=0o100755) == [("d/f.py", B, 0o100755)]
    assert quick(A, patch, unidiff_zero=False, mode=0o100644) is None


def test_hunks_far_down_a_long_file_are_git_apply():
    """In a file of thousands of lines (the hunks are found by counting lines a block
    at a time), each hunk applied in turn, and the whole diff, are git's result;
    a file whose last line lacks its newline too."""
    long_a = b"".join(b"def f%d():\n    return %d\n" % (i, i) for i in range(1500))
    long_b = (long_a.replace(b"    return 3\n", b"    return 3  # three\n")
              .replace(b"def f700():\n", b"def f700():\n    '''seven hundred'''\n")
              .replace(b"def f1498():\n    return 1498\n", b""))
    tail = b"".join(b"# %d\n" % i for i in range(8)) + b"# the end"
    for a, b in ((long_a, long_b), (long_a + tail, long_b + tail)):
        patch = make_diff(a, b, 3)
        assert patch.count(b"\n@@ ") == 3
        assert quick(a, patch, unidiff_zero=False) == [("d/f.py", git_apply(a, patch, False),
                                                        0o100644)]
        now = a
        for h in patch.split(b"\n@@")[1:]:
            bare = for_one_file("d/f.py", b"@@" + h.rstrip(b"\n") + b"\n")
            want = git_apply(now, bare, unidiff_zero=True)
            got = quick(now, bare, unidiff_zero=True)
            assert got is not None and want is not None and got[0][1] == want
            now = want
        assert now == b
