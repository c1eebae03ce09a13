"""scope.patch: whole `git diff` patches as one effect, and the one-file form.

Real-shaped cases that failed before: a patch of several files, a rename, a
new executable file, a binary file, a blank line after the last hunk, a diff
of another file than the one named, the `--3way` fallback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import Coordinator, FsPatch, PatchError, PathError, block
from tests.conftest import git, make_repo

FILES = {
    "README.md": "# r\n",
    "src/a.py": "".join(f"a{i}\n" for i in range(1, 11)),
    "src/b.py": "b1\nb2\nb3\n",
    "old.txt": "".join(f"old {i}\n" for i in range(1, 8)),
}


def patch_between(tmp: Path, before: dict[str, str | bytes], after: dict[str, str | bytes | None],
                  modes: dict[str, int] | None = None) -> bytes:
    """`git diff --binary` of a real repository from `before` to `after`."""
    repo = make_repo(tmp / "gen", before)
    for name, data in after.items():
        f = repo / name
        if data is None:
            f.unlink()
            continue
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data.encode() if isinstance(data, str) else data)
    for name, mode in (modes or {}).items():
        (repo / name).chmod(mode)
    git(repo, "add", "-A")
    return git(repo, "diff", "--cached", "--binary", "-M").encode()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


@pytest.mark.slow
async def test_a_patch_of_many_files_is_one_effect(tmp_path, repo):
    """Edit, rename, delete, new executable and binary files in one patch: one
    commit whose intent lists every file, and the files git apply makes."""
    diff = patch_between(tmp_path, FILES, {
        "src/a.py": FILES["src/a.py"].replace("a5\n", "A5\n"),
        "old.txt": None,
        "new.txt": FILES["old.txt"].replace("old 7", "new 7"),  # a rename
        "src/b.py": None,
        "bin/run.sh": "#!/bin/sh\necho hi\n",
        "img.bin": b"\0\x89PNG" + bytes(range(256)),
    }, modes={"bin/run.sh": 0o755})
    assert b"rename from old.txt" in diff and b"GIT binary patch" in diff
    async with Coordinator.open(tmp_path / "s", repo, backend="copy") as coord:
        a = await coord.root.fork("a")
        before = a.head
        r = await a.patch(diff)
        assert r.ok and str(coord.trace.commit(r.commit).parent_ids[0]) == before
        intent = r.effect.intent
        assert isinstance(intent, FsPatch)
        assert [(c.path, c.blob is not None) for c in intent.changes] == [
            ("bin/run.sh", True), ("img.bin", True), ("new.txt", True),
            ("old.txt", False), ("src/a.py", True), ("src/b.py", False),
        ]
        assert r.effect.summary().startswith("fs.patch bin/run.sh (+5 more)")
        assert (await a.read("src/a.py")).count(b"A5") == 1
        assert await a.read("img.bin") == b"\0\x89PNG" + bytes(range(256))
        assert (a.path / "bin/run.sh").stat().st_mode & 0o111
        assert coord.trace.tree_of(a.head)["bin/run.sh"].filemode == 0o100755
        for gone in ("old.txt", "src/b.py"):
            with pytest.raises(FileNotFoundError):
                await a.read(gone)


async def test_the_policy_chain_sees_every_file_of_a_patch(tmp_path, repo):
    """A policy blocking one file of a many-file patch blocks the whole patch;
    nothing is written."""
    seen: list[list[str]] = []

    async def no_readme(intent, view):
        if isinstance(intent, FsPatch):
            paths = [c.path for c in intent.changes]
            seen.append(paths)
            if "README.md" in paths:
                return block("README.md is frozen")
        return None

    diff = patch_between(tmp_path, FILES, {"src/b.py": "B\n", "README.md": "# R\n"})
    async with Coordinator.open(tmp_path / "s", repo, backend="copy",
                                policies=[no_readme]) as coord:
        a = await coord.root.fork("a")
        r = await a.patch(diff)
        assert r.blocked and "frozen" in r.reason
        assert seen == [["README.md", "src/b.py"]]
        assert await a.read("src/b.py") == b"b1\nb2\nb3\n"


@pytest.mark.slow
async def test_one_file_form_honours_counts_and_names(tmp_path, repo):
    """patch(path, hunks): a blank line after the hunk is not context (the @@
    counts say where it ends); a diff of another file is refused."""
    async with Coordinator.open(tmp_path / "s", repo, backend="copy") as coord:
        a = await coord.root.fork("a")
        # src/b.py has no blank line after b2: the old parser took the trailing
        # blank line as context and refused this valid hunk
        r = await a.patch("src/b.py", "@@ -1,2 +1,2 @@\n b1\n-b2\n+B2\n\n")
        assert r.ok and await a.read("src/b.py") == b"b1\nB2\nb3\n"
        head = a.head
        with pytest.raises(PatchError, match=r"not 'src/a\.py'"):
            await a.patch("src/a.py", "--- a/src/b.py\n+++ b/src/b.py\n@@ -1 +1 @@\n-b1\n+x\n")
        with pytest.raises(PatchError, match="does not apply"):
            await a.patch("src/b.py", "@@ -1,2 +1,2 @@\n nope\n-B2\n+x\n")
        with pytest.raises(FileNotFoundError):
            await a.patch("missing.py", "@@ -1 +1 @@\n-a\n+b\n")
        with pytest.raises(FileNotFoundError):  # a directory is no file to patch
            await a.patch("src", "@@ -1 +1 @@\n-a\n+b\n")
        assert a.head == head


@pytest.mark.slow
async def test_malformed_and_escaping_patches_are_refused(tmp_path, repo):
    """Garbage, a path out of the workspace and a write into .git raise; nothing lands."""
    async with Coordinator.open(tmp_path / "s", repo, backend="copy") as coord:
        a = await coord.root.fork("a")
        head = a.head
        with pytest.raises(PatchError):
            await a.patch("this is not a patch\n")
        with pytest.raises(PatchError):
            await a.patch("")
        for bad in ("../outside.txt", ".git/config"):
            diff = (f"diff --git a/{bad} b/{bad}\nnew file mode 100644\n--- /dev/null\n"
                    f"+++ b/{bad}\n@@ -0,0 +1 @@\n+x\n")
            with pytest.raises((PatchError, PathError)):
                await a.patch(diff)
        assert a.head == head
        assert not (tmp_path / "s" / "outside.txt").exists()


async def test_three_way_falls_back_to_a_merge(tmp_path, repo):
    """A patch whose context changed since it was made fails as it is, and
    applies with three_way=True (the trace holds the blob it was made against)."""
    diff = patch_between(tmp_path, FILES, {"src/a.py": FILES["src/a.py"].replace("a3\n", "A3\n")})
    async with Coordinator.open(tmp_path / "s", repo, backend="copy") as coord:
        a = await coord.root.fork("a")
        await a.write("src/a.py", FILES["src/a.py"].replace("a6\n", "ours 6\n").encode())
        with pytest.raises(PatchError):
            await a.patch(diff)
        r = await a.patch(diff, three_way=True)
        assert r.ok and isinstance(r.effect.intent, FsPatch) and r.effect.intent.three_way
        assert await a.read("src/a.py") == FILES["src/a.py"].replace("a3\n", "A3\n").replace(
            "a6\n", "ours 6\n").encode()
        # a real conflict is refused, not committed with markers
        await a.write("src/a.py", FILES["src/a.py"].replace("a3\n", "mine 3\n").encode())
        with pytest.raises(PatchError):
            await a.patch(diff, three_way=True)
