"""Bad input gets a clear error and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import Coordinator, NotFound, PathError, RewindError, ScopeExists

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def scoped(tmp_path: Path, sample_repo: Path):
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        a = await coord.root.fork("a")
        r = await a.exec(["sh", "-c", "ln -s /etc etc-link && ln -s /etc/passwd pw-link"])
        assert r.ok
        yield coord, a


def count_commits(coord: Coordinator, head: str) -> int:
    return len(coord.trace.log(head))


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/etc/passwd", "relative"),
        ("../outside.txt", "'..'"),
        ("src/../../x", "'..'"),
        (".git/config", ".git"),
        ("src/.git/hooks/x", ".git"),
        ("", "non-empty"),
        ("etc-link/evil", "outside the workspace"),
    ],
)
@pytest.mark.slow
async def test_bad_write_paths_are_refused(scoped, path: str, message: str):
    """Absolute, `..`, `.git` and symlink-escaping paths raise PathError; no commit."""
    coord, a = scoped
    head = a.head
    with pytest.raises(PathError, match=message):
        await a.write(path, b"x")
    assert a.head == head and count_commits(coord, head) == count_commits(coord, a.head)
    assert not Path("/etc/evil").exists()


async def test_reads_through_escaping_symlinks_are_refused(scoped):
    _coord, a = scoped
    with pytest.raises(PathError, match="outside the workspace"):
        await a.read("pw-link")
    with pytest.raises(PathError, match="outside the workspace"):
        await a.read("etc-link/passwd")


async def test_delete_and_patch_of_missing_files(scoped):
    _coord, a = scoped
    head = a.head
    with pytest.raises(FileNotFoundError):
        await a.delete("nope.txt")
    with pytest.raises(FileNotFoundError):
        await a.patch("nope.txt", "@@ -1 +1 @@\n-a\n+b\n")
    assert a.head == head


async def test_unknown_commits_and_bad_rewinds(scoped):
    coord, a = scoped
    head = a.head
    with pytest.raises(NotFound):
        await a.rewind(to="0123456789abcdef0123456789abcdef01234567")
    with pytest.raises(NotFound):
        coord.trace.show("not-a-commit")
    with pytest.raises(RewindError, match="before the fork point"):
        await a.rewind(to=coord.trace.snapshot())
    with pytest.raises(RewindError):
        await a.rewind(to=head, steps=1)
    assert a.head == head


async def test_bad_scope_names(scoped):
    coord, _a = scoped
    with pytest.raises(ScopeExists):
        await coord.root.fork("a")
    for bad in ("", "../x", "a/b", "x.lock", "-x"):
        with pytest.raises(PathError):
            await coord.root.fork(bad)


async def test_symlinked_directories_inside_the_workspace(scoped):
    """Reads may follow a symlink that stays inside; writes never go through one
    (git records paths, not where a symlink would send them)."""
    _coord, a = scoped
    assert (await a.exec(["sh", "-c", "ln -s src src-link"])).ok
    assert await a.read("src-link/util.py") == await a.read("src/util.py")
    head = a.head
    with pytest.raises(PathError, match="symbolic link 'src-link'"):
        await a.write("src-link/new.py", b"x")
    assert a.head == head and not (a.path / "src" / "new.py").exists()
