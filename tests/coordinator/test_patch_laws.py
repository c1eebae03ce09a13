"""Law: `scope.patch(diff)` is `git apply`.

On generated cases (files A patched towards B by `git diff`, the patch then
applied to C, which is A or a perturbation of it, and sometimes damaged),
Corral accepts exactly the patches `git apply` accepts in a real worktree,
and its committed tree equals the tree git leaves. `three_way=True` is the
same against `git apply --3way` (the trace, like git's repository, holds A).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator import Coordinator, PatchError, Scope
from tests.conftest import GIT_ENV, make_repo

pytestmark = pytest.mark.slow  # property laws against git apply, many examples

SNAPSHOT = {"README.md": "# law\n"}
Files = dict[str, tuple[bytes, int]]


def git(repo: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, **GIT_ENV, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=env,
                          input=input)


def put(repo: Path, files: Files) -> None:
    """Make the worktree hold SNAPSHOT + `files` exactly, and commit it."""
    for p in repo.iterdir():
        if p.name not in (".git", "README.md"):
            subprocess.run(["rm", "-rf", str(p)], check=True)
    for name, (data, mode) in files.items():
        f = repo / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
        f.chmod(0o755 if mode == 0o100755 else 0o644)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "state")


def make_patch(a: Files, b: Files) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp) / "g", SNAPSHOT)
        put(repo, a)
        put(repo, b)
        return git(repo, "diff", "--binary", "HEAD~1", "HEAD").stdout


def git_apply(a: Files, c: Files, patch: bytes, three_way: bool) -> str | None:
    """The tree `git apply` leaves on a worktree at C (A in its history), or None."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp) / "g", SNAPSHOT)
        put(repo, a)
        put(repo, c)
        done = git(repo, "apply", *(["--3way"] if three_way else []), input=patch)
        if done.returncode != 0:
            return None
        git(repo, "add", "-A")
        return git(repo, "write-tree").stdout.decode().strip()


class Env:
    """One coordinator for all the examples of a test (opening one per example
    would dominate): each example forks a fresh scope from root."""

    def __init__(self, tmp: Path) -> None:
        self.loop = asyncio.new_event_loop()
        repo = make_repo(tmp / "repo", SNAPSHOT)
        self.cm = Coordinator.open(tmp / "state", repo, backend="copy")
        self.coord = self.loop.run_until_complete(self.cm.__aenter__())
        self.n = 0

    def corral_apply(self, a: Files, c: Files, patch: bytes, three_way: bool) -> str | None:
        async def go() -> str | None:
            self.n += 1
            scope: Scope = await self.coord.root.fork(f"p{self.n}")
            try:
                for state in (a, c):
                    for name in list(state) + [n for n in a if n not in c]:
                        if name in state:
                            data, mode = state[name]
                            assert (await scope.write(name, data, mode=mode)).ok
                        elif state is c:
                            assert (await scope.delete(name)).ok
                try:
                    r = await scope.patch(patch, three_way=three_way)
                except PatchError:
                    return None
                assert r.ok
                return str(self.coord.trace.commit(scope.head).tree_id)
            finally:
                await scope.discard()

        return self.loop.run_until_complete(go())

    def close(self) -> None:
        self.loop.run_until_complete(self.cm.__aexit__(None, None, None))
        self.loop.close()


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    with tempfile.TemporaryDirectory() as tmp:
        e = Env(Path(tmp))
        try:
            yield e
        finally:
            e.close()


LINES = ["a\n", "b\n", "c\n", "\n", "}\n", "def f():\n", "    return 1\n"]
NAMES = ["f.txt", "g.txt", "d/h.txt", "d/e/i.txt"]
text = st.lists(st.sampled_from(LINES), min_size=1, max_size=10).map(
    lambda ls: "".join(ls).encode())
mode = st.sampled_from([0o100644, 0o100644, 0o100755])
files = st.dictionaries(st.sampled_from(NAMES), st.tuples(text, mode), min_size=1, max_size=3)


@st.composite
def edit(draw: st.DrawFn, data: bytes) -> bytes:
    lines = data.decode().splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(lines)))
        new = draw(st.sampled_from(["X\n", "Y\n", "\n", "}\n"]))
        if draw(st.booleans()) or at == len(lines):
            lines.insert(at, new)
        else:
            lines[at] = new
    out = "".join(lines)
    if draw(st.integers(0, 5)) == 0:
        out = out.rstrip("\n")
    return out.encode()


@st.composite
def cases(draw: st.DrawFn) -> tuple[Files, Files, bytes, str]:
    a: Files = draw(files)
    b: Files = {}
    for name, (data, m) in a.items():
        what = draw(st.sampled_from(["keep", "edit", "edit", "delete", "rename", "mode"]))
        if what == "keep":
            b[name] = (data, m)
        elif what == "edit":
            b[name] = (draw(edit(data)), m)
        elif what == "rename":
            b[name.replace(".txt", ".md")] = (draw(edit(data)) if draw(st.booleans()) else data, m)
        elif what == "mode":
            b[name] = (data, 0o100755 if m == 0o100644 else 0o100644)
    if draw(st.booleans()):
        b["new/n.txt"] = (draw(text), draw(mode))
    if draw(st.integers(0, 4)) == 0:
        b["bin.dat"] = (b"\0\1\2" + draw(text), 0o100644)
    patch = make_patch(a, b)
    # C: A itself, or A with lines added on top (the patch applies at an
    # offset), or a line changed (a hunk may no longer apply)
    c: Files = dict(a)
    how = draw(st.sampled_from(["same", "same", "shifted", "changed", "gone"]))
    name = draw(st.sampled_from(sorted(a)))
    data, m = a[name]
    if how == "shifted":
        c[name] = (b"top\ntop\n" + data, m)
    elif how == "changed":
        c[name] = (draw(edit(data)), m)
    elif how == "gone":
        del c[name]
    # and sometimes damage the patch the way hand-edited patches are damaged
    damage = draw(st.sampled_from(["none", "none", "none", "blank trailer", "count", "cut"]))
    if damage == "blank trailer":
        patch += b"\n"
    elif damage == "count":
        patch = patch.replace(b" @@", b"1 @@", 1)
    elif damage == "cut" and patch.count(b"\n") > 3:
        patch = patch[: patch.rindex(b"\n", 0, len(patch) - 1) + 1]
    return a, c, patch, f"{how}/{damage}"


LAW = settings(max_examples=30, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@LAW
@given(case=cases())
def test_patch_equals_git_apply(env, case):
    """scope.patch(diff) accepts what git apply accepts, with git's tree."""
    a, c, patch, how = case
    want = git_apply(a, c, patch, False)
    event(f"{how}: {'applies' if want else 'refused'}")
    assert env.corral_apply(a, c, patch, False) == want


@LAW
@given(case=cases())
def test_three_way_patch_equals_git_apply_3way(env, case):
    """scope.patch(diff, three_way=True) accepts what git apply --3way accepts
    (without a conflict), with git's tree."""
    a, c, patch, how = case
    want = git_apply(a, c, patch, True)
    event(f"{how}: {'applies' if want else 'refused'}")
    assert env.corral_apply(a, c, patch, True) == want


def test_a_three_way_patch_already_applied_is_a_no_op_as_in_git(env):
    """Found by the law above: git apply --3way accepts a patch whose change the file
    already has (and changes nothing); scope.patch refused it as a change of nothing."""
    patch = (b"diff --git a/f.txt b/f.txt\nindex 7898192..500c070 100644\n--- a/f.txt\n"
             b"+++ b/f.txt\n@@ -1 +1 @@\n-a\n+X\n\\ No newline at end of file\n")
    a, c = {"f.txt": (b"a\n", 0o100644)}, {"f.txt": (b"X", 0o100644)}
    want = git_apply(a, c, patch, True)
    assert want is not None
    assert env.corral_apply(a, c, patch, True) == want
