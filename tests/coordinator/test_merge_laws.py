"""Laws: every merge strategy gives `git merge`'s verdict, tree and conflicting paths.

On random three-way cases (`merge_cases.cases`: random edits of random small files,
LF and CRLF, without a final newline, binary, executable, deleted, renamed, added on
one side or both), Corral's `three_way` with strategy "fail", "union", "ours" and
"theirs" is compared with `git merge` in a real repository (ours checked out):
plain, with `* merge=union` in `.git/info/attributes`, and with `-X ours` /
`-X theirs`. Where git merges, the trees are equal; where git leaves a conflict
(under -X too: modify/delete, rename/delete, rename/rename, binary under union),
Corral conflicts at the same paths (`test_merge_favors.assert_as_git`).

A second slow law runs only the shapes git's directory renames and rename/rename(2to1)
make (`cases(moves=True)`), which `three_way` hands to `git merge` itself.

The suite runs a few hundred cases per strategy (slow), 50 of the moves; the fast law
ten. `CORRAL_MERGE_EXAMPLES=1000` runs each slow law with that many per strategy:

    CORRAL_MERGE_EXAMPLES=1000 python -m pytest -m slow tests/coordinator/test_merge_laws.py

The cases below the laws were found by them (each failed before its fix).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

from tests.coordinator.merge_cases import Files, cases
from tests.coordinator.test_merge_favors import assert_as_git

ALL = ["fail", "union", "ours", "theirs"]
EXAMPLES = int(os.environ.get("CORRAL_MERGE_EXAMPLES", "300"))
MOVES_EXAMPLES = int(os.environ.get("CORRAL_MERGE_EXAMPLES", "50"))


@pytest.mark.slow  # ~60 ms a case (a git checkout and merge each): ~20 s per strategy
@pytest.mark.parametrize("strategy", ALL)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_every_strategy_merges_as_git_merge(strategy: str, case: tuple[Files, Files, Files]):
    assert_as_git(strategy, *case)


@pytest.mark.slow  # one more git merge a case (in a scratch work tree): ~10 s per strategy
@pytest.mark.parametrize("strategy", ALL)
@settings(max_examples=MOVES_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases(moves=True))
def test_directory_renames_and_two_renames_onto_one_merge_as_git_merge(
        strategy: str, case: tuple[Files, Files, Files]):
    """Every case has a side moving a directory while the other adds, edits or
    moves files in it, and half of them two files renamed onto one name."""
    assert_as_git(strategy, *case)


@pytest.mark.parametrize("strategy", ALL)
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_every_strategy_merges_as_git_merge_fast(strategy: str, case: tuple[Files, Files, Files]):
    """The same law on fewer cases, in the fast suite."""
    assert_as_git(strategy, *case)


CRLF_BODY = b"b0\r\nsame0\r\n    return 0\r\n}0\r\n    return 0\r\nb0\r\n\r\nb0\r\nx0\r\n"
BODY = b"x0\nsame0\nb0\n\nx0\n    return 0\na0\nx0\n"
# (name, base, ours, theirs)
FOUND: list[tuple[str, Files, Files, Files]] = [
    # -X and union settle contents only: git leaves these conflicted
    ("modify/delete", {"f.txt": BODY}, {"f.txt": None}, {"f.txt": BODY + b"A0\n"}),
    ("rename/delete", {"f.txt": BODY}, {"f.txt": None, "r.txt": BODY}, {"f.txt": None}),
    ("rename/rename", {"f.txt": BODY}, {"f.txt": None, "r.txt": BODY},
     {"f.txt": None, "s.txt": BODY}),
    # both renamed to one name: merged there over the old file (add/add before)
    ("rename/rename to one name", {"f.txt": BODY}, {"f.txt": None, "s.txt": BODY},
     {"f.txt": None, "s.txt": b"A0\n" + BODY}),
    # a rename onto a file the other side added, which also edited the old file
    ("rename/add", {"f.txt": BODY},
     {"f.txt": None, "r.txt": BODY, "both.txt": b"a30\n"},
     {"f.txt": BODY.replace(b"b0\n", b"B0\n"), "r.txt": b"x20\n"}),
    ("rename/add, theirs renames", {"f.txt": BODY},
     {"f.txt": BODY.replace(b"b0\n", b"B0\n"), "r.txt": b"x10\n"},
     {"f.txt": None, "r.txt": BODY + b"A0\n"}),
    # ours renames f.txt onto both.txt, which theirs adds the same: git matched the
    # two sides first and keeps the rename's merge (theirs' mode bit and all)
    ("rename onto the same addition", {"f.txt": b"\0"},
     {"f.txt": None, "both.txt": b"\0"}, {"f.txt": ("exec", b"\0"), "both.txt": b"\0"}),
    ("rename onto the same addition, theirs renames", {"f.txt": b"\0"},
     {"f.txt": ("exec", b"\0"), "both.txt": b"\0"}, {"f.txt": None, "both.txt": b"\0"}),
    # a binary file taken whole under a favor still conflicts on a mode clash
    ("binary side with a mode clash", {"f.txt": b"\0a0\n"},
     {"f.txt": None, "s.txt": b"\0a0\n"}, {"f.txt": ("exec", b"\0a0\n"), "s.txt": b"\0"}),
    # git never renames an empty file
    ("empty file", {"f.txt": b"", "g.txt": BODY}, {"f.txt": None, "g.txt": None},
     {"g.txt": ("exec", BODY), "f.txt": None, "r.txt": b""}),
    # a last line of a lone CR: -X theirs cut the conflict's last line there
    ("lone CR at the end", {"f.txt": CRLF_BODY}, {"f.txt": CRLF_BODY + b"\r\nsame0\r\n"},
     {"f.txt": CRLF_BODY + b"}0\r\n\r\nsame0\r"}),
    # from the 1,000-case run: theirs renames f.txt to s.txt with an edit near git's 50 %
    # threshold; git scores it below and conflicts at f.txt (modify/delete), libgit2's
    # similarity scored it above
    ("rename scored near git's threshold",
     {"f.txt": b"}0\r\nsame0\r\n\r\nx0\r\nx0\r\nb0\r\n    return 0\r\n\r\n",
      "g.txt": b"\na1\n    return 1\na1\nsame1\nx1\nb1\n    return 1\n    return 1\na1\nsame1\n"},
     {"f.txt": b"}0\r\nA0\r\n}0\r\n\r\n}0\r\n}0\r\nA0\r\nx0\r\nb0\r\n\r", "d/r.txt": b""},
     {"f.txt": None, "s.txt": b"}0\r\nsame0\r\n\r\nx0\r\nx0\r\nb0\r\nA0\r\n}0\r\n\r"}),
    # from the directory-move law: ours moves d/f.txt to e/f.txt and adds n.txt with the
    # same content; ort pairs d/f.txt with n.txt (it walks a directory's files before
    # its subdirectories), `git diff-tree -M` with e/f.txt: theirs' edit goes to n.txt
    ("one file, two exact rename targets", {"d/f.txt": ("exec", b"\0")},
     {"d/f.txt": None, "e/f.txt": ("exec", b"\0"), "n.txt": b"\0"},
     {"d/f.txt": ("exec", b"\0x0\n")}),
]


@pytest.mark.parametrize("strategy", ALL)
@pytest.mark.parametrize("case", FOUND, ids=[c[0] for c in FOUND])
def test_found_cases_merge_as_git_merge(strategy: str, case: tuple[str, Files, Files, Files]):
    assert_as_git(strategy, *case[1:])


