"""Laws: a merge honours the repository's own `.gitattributes`, and settles
symlinks, file/symlink clashes and submodules, as `git merge` does.

git reads the attributes of the tree checked out when it merges, so ours':
a `.gitattributes` only theirs adds or changes does not apply to this merge
(measured with git 2.39: theirs adding `f.txt merge=union` still conflicts;
ours adding it merges clean). With strategy "union" the reference is
`* merge=union` in `.git/info/attributes`, which outranks every in-tree line
(git's precedence), so in-tree `merge` attributes change nothing there; with
"fail", "ours" and "theirs" they pick the driver: `merge=union` unions whatever
the favor, `-merge`/`binary`/`merge=binary` conflict under "fail" and take the
favored side under `-X ours|theirs`, `merge=text`/`merge`/an undefined driver
name merge as text; `-text` changes nothing (no renormalization).

Each case is merged with `git merge` in a real repository and with Corral
(`three_way`), and the verdict, the clean tree and the conflicting paths
compared (`test_merge_favors.assert_as_git`).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.coordinator.test_merge_favors import Entry, Files, assert_as_git, edited, text

ALL = ["fail", "union", "ours", "theirs"]
BASE, OURS, THEIRS = {"f.txt": b"x\n"}, {"f.txt": b"x\nA\n"}, {"f.txt": b"x\nB\n"}


def attrs(base: bytes | None, ours: bytes | None = ..., theirs: bytes | None = ...,  # type: ignore[assignment]
          name: str = ".gitattributes") -> tuple[Files, Files, Files]:
    """The conflicting edit of f.txt with `.gitattributes` texts per side
    (`...`: as in the base)."""
    o = {} if ours is ... else {name: ours}
    t = {} if theirs is ... else {name: theirs}
    return {**BASE, name: base}, {**OURS, **o}, {**THEIRS, **t}


# (name, base, ours, theirs): real-shaped cases Corral merged unlike git before.
ATTRIBUTES = [
    ("merge=union", *attrs(b"f.txt merge=union\n")),
    ("-merge", *attrs(b"f.txt -merge\n")),
    # edits git's text merge takes cleanly: -merge makes them a conflict
    ("-merge, separate edits", {"f.txt": b"a\nb\nc\nd\n", ".gitattributes": b"*.txt -merge\n"},
     {"f.txt": b"A\nb\nc\nd\n"}, {"f.txt": b"a\nb\nc\nD\n"}),
    ("binary macro", *attrs(b"*.txt binary\n")),
    ("merge=binary", *attrs(b"f.txt merge=binary\n")),
    ("merge=text", *attrs(b"f.txt merge=text\n")),
    ("merge set", *attrs(b"f.txt merge\n")),
    ("undefined driver", *attrs(b"f.txt merge=ours\n")),
    ("-text", *attrs(b"f.txt -text\n")),
    ("later line wins", *attrs(b"* -merge\nf.txt merge=union\n")),
    ("ours adds union", *attrs(None, b"f.txt merge=union\n")),
    ("theirs adds union", *attrs(None, ..., b"f.txt merge=union\n")),
    ("ours drops union", *attrs(b"f.txt merge=union\n", None)),
    ("theirs drops union", *attrs(b"f.txt merge=union\n", ..., None)),
    ("changelog union, lock -merge",
     {"CHANGES.md": b"# log\n", "pkg.lock": b"a 1\n",
      ".gitattributes": b"CHANGES.md merge=union\n*.lock -merge\n"},
     {"CHANGES.md": b"# log\n- ours\n", "pkg.lock": b"a 1\nb 2\n"},
     {"CHANGES.md": b"# log\n- theirs\n", "pkg.lock": b"a 1\nc 3\n"}),
    ("nested .gitattributes",
     {"docs/f.txt": b"x\n", "f.txt": b"x\n", "docs/.gitattributes": b"*.txt merge=union\n"},
     {"docs/f.txt": b"x\nA\n", "f.txt": b"x\nA\n"},
     {"docs/f.txt": b"x\nB\n", "f.txt": b"x\nB\n"}),
    ("nested overrides root",
     {"docs/f.txt": b"x\n", ".gitattributes": b"*.txt merge=union\n",
      "docs/.gitattributes": b"*.txt -merge\n"},
     {"docs/f.txt": b"x\nA\n"}, {"docs/f.txt": b"x\nB\n"}),
    ("binary content, union", {"b.bin": b"\0base"}, {"b.bin": b"\0ours"}, {"b.bin": b"\0theirs"}),
]


def link(target: bytes) -> tuple[str, bytes]:
    return ("link", target)


SUB = ("gitlink", b"1" * 40)
SUB2, SUB3 = ("gitlink", b"2" * 40), ("gitlink", b"3" * 40)

LINKS = [
    ("link vs link", {"l": link(b"a")}, {"l": link(b"b")}, {"l": link(b"c")}),
    ("link vs same link", {"l": link(b"a")}, {"l": link(b"b")}, {"l": link(b"b")}),
    ("file to link vs edit", {"l": b"x\n"}, {"l": link(b"b")}, {"l": b"y\n"}),
    ("edit vs file to link", {"l": b"x\n"}, {"l": b"y\n"}, {"l": link(b"b")}),
    ("link to file vs relink", {"l": link(b"a")}, {"l": b"y\n"}, {"l": link(b"c")}),
    ("add/add file vs link", {}, {"l": b"y\n"}, {"l": link(b"c")}),
    ("add/add link vs link", {}, {"l": link(b"b")}, {"l": link(b"c")}),
    ("both file to other links", {"l": b"x\n"}, {"l": link(b"b")}, {"l": link(b"c")}),
    ("both link to files", {"l": link(b"a")}, {"l": b"y\n"}, {"l": b"z\n"}),
    ("link to exec vs link to file", {"l": link(b"a")}, {"l": ("exec", b"y\n")}, {"l": b"z\n"}),
    ("gitlink vs gitlink", {"s": SUB}, {"s": SUB2}, {"s": SUB3}),
    ("gitlink vs file", {"s": SUB}, {"s": SUB2}, {"s": b"y\n"}),
    ("add/add gitlinks", {}, {"s": SUB2}, {"s": SUB3}),
]


@pytest.mark.parametrize("strategy", ALL)
@pytest.mark.parametrize("case", ATTRIBUTES, ids=[c[0] for c in ATTRIBUTES])
def test_attributes_merge_as_git(strategy, case):
    assert_as_git(strategy, *case[1:])


@pytest.mark.parametrize("strategy", ALL)
@pytest.mark.parametrize("case", LINKS, ids=[c[0] for c in LINKS])
def test_links_and_submodules_merge_as_git(strategy, case):
    assert_as_git(strategy, *case[1:])


# union and -merge drawn most: they change what a merge gives under every favor
ATTRIBUTE = st.sampled_from(["merge=union", "merge=union", "-merge", "-merge", "binary",
                             "merge=text", "merge", "-text", "merge=ours", "!merge",
                             "merge=binary"])
PATTERN = st.sampled_from(["*", "*.txt", "f.txt", "g.txt", "sub/*", "sub/", "*.bin"])
attributes_file = st.lists(st.tuples(PATTERN, ATTRIBUTE), min_size=1, max_size=3).map(
    lambda lines: "".join(f"{p} {a}\n" for p, a in lines).encode())


@st.composite
def changed(draw: st.DrawFn, base: bytes) -> Entry:
    """One side's version of a text file: mostly an edit, sometimes an
    executable, a symlink, or binary content."""
    kind = draw(st.sampled_from(["edit"] * 6 + ["exec", "link", "binary"]))
    if kind == "link":
        return ("link", draw(st.sampled_from([b"a", b"b", b"f.txt"])))
    data = draw(edited(base))
    if kind == "binary":
        return b"\0" + data
    return ("exec", data) if kind == "exec" else data


@st.composite
def attribute_cases(draw: st.DrawFn) -> tuple[Files, Files, Files]:
    names = ["f.txt", "sub/g.txt", "h.bin"][: draw(st.integers(1, 3))]
    base: Files = {n: draw(text) for n in names}
    for where in draw(st.sets(st.sampled_from([".gitattributes", "sub/.gitattributes"]),
                              min_size=1)):
        base[where] = draw(attributes_file)
    sides: list[Files] = []
    for _ in "ot":
        side: Files = {}
        for n in names:
            if draw(st.booleans()) or not side:
                side[n] = draw(changed(base[n]))  # type: ignore[arg-type]
        if draw(st.integers(0, 3)) == 0:  # a side changes (or adds) attributes
            side[draw(st.sampled_from([".gitattributes", "sub/.gitattributes"]))] = \
                draw(attributes_file)
        sides.append(side)
    return base, sides[0], sides[1]


@pytest.mark.slow  # 4 x 40 cases, each against a real git merge: ~13 s
@pytest.mark.parametrize("strategy", ALL)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=attribute_cases())
def test_merges_under_attributes_equal_git_merge(strategy, case):
    """On generated in-tree attributes (root and nested, changed by either
    side) and files both sides changed (text edits, modes, symlinks, binary),
    Corral's verdict, tree and conflicting paths are git's."""
    assert_as_git(strategy, *case)


async def test_scope_merge_follows_a_union_attribute_written_in_scope(tmp_path, sample_repo):
    """End to end: a `.gitattributes` committed on the merging scope's side
    makes `merge` (strategy fail) union a file both scopes changed; without
    it the same edits conflict."""
    from coordinator import Coordinator

    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        await coord.root.write("notes.txt", b"x\n")
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        await a.write("notes.txt", b"x\nA\n")
        await b.write("notes.txt", b"x\nB\n")
        assert not (await a.merge(b, dry_run=True)).clean
        await a.write(".gitattributes", b"notes.txt merge=union\n")
        merged = await a.merge(b)
        assert merged.clean and merged.commit is not None
        assert await a.read("notes.txt") == b"x\nA\nB\n"
