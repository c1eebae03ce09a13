"""Laws: merges with a favor give git's trees.

On generated three-way cases of text edits, the tree of Corral's merge with
strategy "union", "ours" or "theirs" equals the tree `git merge` makes (git's
default strategy, ort, diffing with histogram) with a `* merge=union`
attribute, or with `-X ours` / `-X theirs`. Here only edits are generated, so
git merges every case; `test_merge_laws.py` runs every strategy on cases with
deletions, renames and binary files too, where git can leave a conflict under
`-X` (modify/delete and the like) and Corral must leave the same.

A fixture of real-shaped cases that differed before (diff3 style kept the
shared lines at a conflict's edges in a union; Myers placed hunks where
histogram does not) is checked against git the same way. The helpers
(`merged`, `assert_as_git`) are the reference the other merge laws use.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from coordinator.store._merge import three_way
from coordinator.store._trace import Trace
from tests.conftest import GIT_ENV

STRATEGIES = ["union", "ours", "theirs"]
GIT_OPTION = {"fail": [], "union": [], "ours": ["-X", "ours"], "theirs": ["-X", "theirs"]}

Entry = bytes | tuple[str, bytes] | None
"""A file's content (mode 100644), ("link", target), ("exec", content),
("gitlink", commit id as 40 hex bytes), or None for no file."""
Files = dict[str, Entry]
_MODE = {"link": 0o120000, "exec": 0o100755, "gitlink": 0o160000}


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **GIT_ENV, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env=env)


def commit(repo: pygit2.Repository, files: Files, parents: list[pygit2.Oid]) -> pygit2.Oid:
    index = pygit2.Index()
    for name, data in sorted(files.items()):
        if data is None:
            continue
        if isinstance(data, bytes):
            index.add(pygit2.IndexEntry(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
        elif data[0] == "gitlink":
            index.add(pygit2.IndexEntry(name, pygit2.Oid(hex=data[1].decode()), 0o160000))
        else:
            index.add(pygit2.IndexEntry(name, repo.create_blob(data[1]), _MODE[data[0]]))
    sig = pygit2.Signature("t", "t@t", 0, 0)
    return repo.create_commit(None, sig, sig, "c", index.write_tree(repo), parents)


def _same_conflicts(corral: set[str], git_paths: set[str]) -> bool:
    """git moves one side of a file/symlink clash aside (`l~HEAD`, `l~theirs`)
    and lists both names; Corral reports the clash at the path itself."""
    return {p.split("~", 1)[0] if p.split("~", 1)[0] in corral else p for p in git_paths} \
        == corral


def merged(strategy: str, base: Files, ours: Files, theirs: Files,
           ) -> tuple[tuple[str | None, set[str]], tuple[str | None, set[str]]]:
    """((git's tree or None, git's conflicting paths), (Corral's, Corral's)).

    git runs `git merge` in a real repository with `ours` checked out (so the
    `.gitattributes` in play are ours', as for any `git merge`); "union" adds
    `* merge=union` to `.git/info/attributes`, "ours"/"theirs" pass `-X`.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r"
        repo = pygit2.init_repository(str(path))
        b = commit(repo, base, [])
        o = commit(repo, {**base, **ours}, [b])
        t = commit(repo, {**base, **theirs}, [b])
        repo.references.create("refs/heads/ours", o)
        repo.references.create("refs/heads/theirs", t)
        # Corral first: its trace has no index or work tree (git's merge leaves
        # theirs' .gitattributes in both, which libgit2 would read)
        trace = Trace(path / ".git")
        try:
            result = three_way(trace, str(b), str(o), str(t), strategy,  # type: ignore[arg-type]
                               provenance=False)
        finally:
            trace.close()
        got = (result.tree, {c.path for c in result.conflicts})
        if strategy == "union":
            (path / ".git" / "info").mkdir(exist_ok=True)
            (path / ".git" / "info" / "attributes").write_text("* merge=union\n")
        assert git(path, "checkout", "-q", "-f", "ours").returncode == 0
        done = git(path, "merge", "-q", "--no-edit", *GIT_OPTION[strategy], "theirs")
        if done.returncode == 0:
            want = (git(path, "rev-parse", "HEAD^{tree}").stdout.strip(), set())
        else:
            unmerged = git(path, "diff", "--name-only", "-z", "--diff-filter=U").stdout
            want = (None, set(unmerged.split("\0")) - {""})
            # a directory rename git could not do (a path in the way, no majority)
            # conflicts with no unmerged path
            assert want[1] or "CONFLICT" in done.stdout, done.stdout + done.stderr
        return want, got


def assert_as_git(strategy: str, base: Files, ours: Files, theirs: Files) -> None:
    """Corral's merge gives git's verdict, git's tree when clean, and git's
    conflicting paths when not (where git leaves no unmerged path for its
    conflict, a directory rename it could not do, Corral has some conflict)."""
    (want_tree, want_paths), (got_tree, got_paths) = merged(strategy, base, ours, theirs)
    assert got_tree == want_tree, (want_paths, got_paths)
    assert (got_tree is None) == bool(got_paths), got_paths
    if want_paths or want_tree is not None:
        assert _same_conflicts(got_paths, want_paths), (want_paths, got_paths)


def both_ways(strategy: str, base: Files, ours: Files, theirs: Files) -> tuple[str | None, str]:
    """(git's merged tree or None when git leaves a conflict, Corral's tree)."""
    (want, _), (got, conflicts) = merged(strategy, base, ours, theirs)
    assert got is not None and not conflicts
    return want, got


# Few distinct lines, so that the diffs have many equally good alignments:
# where Myers and histogram choose differently.
line = st.sampled_from(["a\n", "b\n", "}\n", "\n", "x\n", "    return\n", "same\n"])
text = st.lists(line, max_size=14).map(lambda ls: "".join(ls).encode())


@st.composite
def edited(draw: st.DrawFn, base: bytes) -> bytes:
    lines = base.decode().splitlines(keepends=True)
    for _ in range(draw(st.integers(0, 4)) or 1):
        at = draw(st.integers(0, len(lines)))
        kind = draw(st.sampled_from(["insert", "delete", "replace"]))
        new = draw(st.lists(st.sampled_from(["A\n", "B\n", "same\n", "}\n", "\n"]),
                            min_size=1, max_size=3))
        if kind == "insert" or at == len(lines):
            lines[at:at] = new
        elif kind == "delete":
            del lines[at]
        else:
            lines[at:at + 1] = new
    out = "".join(lines)
    if draw(st.booleans()) and out.endswith("\n") and draw(st.integers(0, 3)) == 0:
        out = out[:-1]  # a last line without its newline
    return out.encode()


@st.composite
def cases(draw: st.DrawFn) -> tuple[Files, Files, Files]:
    base: Files = {"f.txt": draw(text)}
    if draw(st.booleans()):
        base["g.txt"] = draw(text)
    ours: Files = {n: draw(edited(v)) for n, v in base.items() if v is not None}
    theirs: Files = {n: draw(edited(v)) for n, v in base.items() if v is not None}
    if draw(st.integers(0, 4)) == 0:  # both add the same new path
        ours["new.txt"], theirs["new.txt"] = draw(text), draw(text)
    return base, ours, theirs


LAW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("strategy", STRATEGIES)
@LAW
@given(case=cases())
@example(case=({"f.txt": b"x\n"}, {"f.txt": b"x\nA\nsame\n"}, {"f.txt": b"x\nB\nsame\n"}))
# found by a search: Myers (libgit2) and histogram (git) align these differently
@example(case=({"f.txt": b"x\nsame\nsame\n}\nb\n\n{\n"}, {"f.txt": b"x\nsame\n}\nb\n\n{\n"},
               {"f.txt": b"x\n}\nsame\n\nsame\nb\n\n{\n"}))
@example(case=({"f.txt": b"    return\n{\nx\nx\n}\n    return\n}\n"},
               {"f.txt": b"    return\nsame\n\n{\n}\n    return\n}\n"},
               {"f.txt": b"    return\nA\nA\n\nx\nx\n}\n}\n{\nsame\n}\n"}))
@pytest.mark.slow
def test_favored_merge_equals_git_merge(strategy, case):
    """union/ours/theirs give the tree git merge gives with the union attribute / -X."""
    want, got = both_ways(strategy, *case)
    if want is not None:
        assert got == want


# (name, base, ours, theirs): files of real shape that merged unlike git before.
FIXTURE = [
    # the smallest case: shared lines at the conflict's edge
    ("shared edge lines", b"x\n", b"x\nA\nsame\n", b"x\nB\nsame\n"),
    # two features appending to the same list, both ending with the same closer
    ("appended entries", b"items = [\n    'a',\n]\n",
     b"items = [\n    'a',\n    'b',\n]\n\ndef b():\n    pass\n",
     b"items = [\n    'a',\n    'c',\n]\n\ndef c():\n    pass\n"),
    # blank-line trailers after new functions (where Myers and histogram differ)
    ("blank-line trailers", b"def f():\n    return 1\n\n\ndef g():\n    return 2\n",
     b"def f():\n    return 1\n\n\ndef h():\n    return 3\n\n\ndef g():\n    return 2\n",
     b"def f():\n    return 1\n\n\ndef k():\n    return 4\n\n\ndef g():\n    return 2\n"),
    ("repeated braces",
     b"function a() {\n}\n\nfunction b() {\n}\n",
     b"function a() {\n  one();\n}\n\nfunction x() {\n}\n\nfunction b() {\n}\n",
     b"function a() {\n}\n\nfunction y() {\n  two();\n}\n\nfunction b() {\n  three();\n}\n"),
    # a method moved down while the other side edits around it (Myers vs histogram)
    ("moved block",
     b"class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        return 2\n"
     b"\n    def h(self):\n        return 3\n",
     b"class A:\n    def g(self):\n        return 2\n\n    def f(self):\n        return 1\n"
     b"\n    def h(self):\n        return 3\n",
     b"class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        return 22\n"
     b"\n    def h(self):\n        return 3\n\n    def i(self):\n        return 4\n"),
    ("no newline at the end", b"a\nb", b"a\nb\nours", b"a\nb\ntheirs"),
    ("crlf lines", b"a\r\nb\r\n", b"a\r\nO\r\nb\r\n", b"a\r\nT\r\nb\r\n"),
    # a marker-like run inside a line, not at its start (tiktoken's tests): the
    # marker size search crashed on it under ours/theirs
    ("marker run mid-line", b"x\n", b"x\nassert a == '=======' # A\n",
     b"x\nassert a == '>>>>>>>' # B\n"),
]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", FIXTURE, ids=[c[0] for c in FIXTURE])
def test_real_shaped_cases_merge_as_git(strategy, case):
    """Each fixture case merges as git does, for every favor."""
    _, base, ours, theirs = case
    want, got = both_ways(strategy, {"f.txt": base}, {"f.txt": ours}, {"f.txt": theirs})
    assert want is not None
    assert got == want


def test_binary_files_take_a_side(tmp_path):
    """A binary file both sides changed is taken whole from the favored side
    (union keeps ours, as git's union driver does for binary files)."""
    base, ours, theirs = b"\0base", b"\0ours", b"\0theirs"
    for strategy in ("ours", "theirs"):
        want, got = both_ways(strategy, {"b.bin": base}, {"b.bin": ours}, {"b.bin": theirs})
        assert got == want


def test_merge_tree_runs_one_process_per_merge_without_stdbuf(monkeypatch):
    """Without coreutils' stdbuf (git 2.39 does not flush answers to a pipe),
    each merge runs its own git merge-tree, with the same result."""
    from pygit2.enums import ObjectType

    from coordinator.store import _gitdir as _scratch

    monkeypatch.setattr(_scratch, "_STDBUF", None)
    server = _scratch.MergeTree("* merge=union\n")
    try:
        with server.session() as git:
            blob = git.blob(b"x\n")
            base_tree = _scratch.tree_bytes({"f": (blob, 0o100644)})
            base = git.commit(git.write(ObjectType.TREE, base_tree))
            sides = []
            for line in (b"A\n", b"B\n"):
                tree = _scratch.tree_bytes({"f": (git.blob(b"x\n" + line + b"same\n"), 0o100644)})
                sides.append(git.commit(git.write(ObjectType.TREE, tree), [base]))
            merged, conflicted = server.merge(*sides)
            assert server._proc is None and not conflicted
            _, raw = git.read(merged)
            oid = raw.split(b"\0", 1)[1][:20].hex()
            assert git.read(oid)[1] == b"x\nA\nB\nsame\n"  # the smallest case
    finally:
        server.close()


def test_fail_verdict_where_myers_and_histogram_disagree():
    """Found by the attribute law (hypothesis): an `A` inserted above three equal
    lines on one side and between the first two on the other. `git merge`
    (histogram) conflicts; `git merge-file` and libgit2 (Myers) merge clean, as
    Corral's `fail` merge did while it merged text with libgit2."""
    assert_as_git("fail", {"g.txt": b"a\na\na\n"}, {"g.txt": b"A\na\na\na\n"},
                  {"g.txt": b"a\nA\na\na\n"})
