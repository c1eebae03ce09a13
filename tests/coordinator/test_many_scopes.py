"""Many live scopes: a checkpoint writes the pack and its index as git would
(plain git reads every object and every ref), moves each ref exactly, removes
the loose refs and reflogs that would shadow what it packed, and discards
among many scopes leave every other ref as it was, across a reopen."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.store._journal import object_id, write_packed_refs
from coordinator.store._packfile import write_pack
from coordinator.store._trace import ARCHIVE_PREFIX, FORK_PREFIX, SCOPE_PREFIX

pytestmark = pytest.mark.asyncio

SCOPES = 64


WHO = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}


def git(git_dir: Path, *args: str, input: str = "") -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], input=input,
                          capture_output=True, text=True, check=True,
                          env={**os.environ, **WHO}).stdout


def refs_on_disk(git_dir: Path) -> dict[str, str]:
    """Every ref as plain git reads it (loose and packed)."""
    out = git(git_dir, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in out.splitlines())


def test_a_pack_and_its_index_are_what_git_index_pack_makes(tmp_path):
    """For blobs of every size (empty, small, past the small-object window,
    incompressible), a tree and a commit, `write_pack` leaves a pack git
    verifies and an index byte for byte equal to `git index-pack`'s for it,
    named after the pack's checksum, both read-only."""
    repo = tmp_path / "r.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    rng = random.Random(7)
    objects: dict[str, tuple[int, bytes]] = {}
    for size in (0, 1, 100, 4095, 4096, 4097, 70_000):
        for data in (rng.randbytes(size), b"text line\n" * (size // 10)):
            objects[object_id(3, data)] = (3, data)
    blob = next(iter(objects))
    tree = b"100644 a.txt\0" + bytes.fromhex(blob)
    objects[object_id(2, tree)] = (2, tree)
    commit = (f"tree {object_id(2, tree)}\nauthor a <a@a> 0 +0000\n"
              "committer a <a@a> 0 +0000\n\nmsg\n").encode()
    objects[object_id(1, commit)] = (1, commit)
    write_pack(repo, objects)
    packs = sorted((repo / "objects" / "pack").iterdir())
    assert [p.suffix for p in packs] == [".idx", ".pack"]
    idx, pack = packs
    assert all(p.stat().st_mode & 0o777 == 0o444 for p in packs)
    git(repo, "verify-pack", str(idx))
    again = tmp_path / "again.idx"
    named = subprocess.run(["git", "index-pack", "-o", str(again), str(pack)],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert again.read_bytes() == idx.read_bytes()
    assert pack.name == f"pack-{named}.pack"
    listed = git(repo, "cat-file", "--batch-check=%(objectname)", "--batch-all-objects")
    assert sorted(listed.split()) == sorted(objects)
    for oid, (_, data) in objects.items():
        kind = {1: "commit", 2: "tree", 3: "blob"}[objects[oid][0]]
        shown = subprocess.run(["git", "--git-dir", str(repo), "cat-file", kind, oid],
                               capture_output=True, check=True).stdout
        assert shown == data


def test_packed_refs_drop_the_loose_refs_and_reflogs_that_would_shadow_them(tmp_path):
    """A ref git wrote loose (with its reflog) is moved into packed-refs: its
    loose file goes, so git reads the new value; a deleted one loses its reflog
    too; refs in directories that hold no loose file move all the same."""
    repo = tmp_path / "r.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    git(repo, "config", "core.logAllRefUpdates", "always")
    tree = git(repo, "mktree").strip()
    one = git(repo, "commit-tree", tree, "-m", "1").strip()
    two = git(repo, "commit-tree", tree, "-p", one, "-m", "2").strip()
    git(repo, "update-ref", SCOPE_PREFIX + "loose", one)
    git(repo, "update-ref", SCOPE_PREFIX + "gone", one)
    assert (repo / "refs/corral/scopes/loose").is_file()
    assert (repo / "logs/refs/corral/scopes/gone").is_file()
    moves: dict[str, str | None] = {SCOPE_PREFIX + "loose": two, SCOPE_PREFIX + "gone": None}
    moves |= {f"{ARCHIVE_PREFIX}s{i}-1": two for i in range(50)}
    assert write_packed_refs(repo, moves)
    assert not (repo / "refs/corral/scopes/loose").exists()
    assert not (repo / "logs/refs/corral/scopes/gone").exists()
    on_disk = refs_on_disk(repo)
    assert on_disk == {name: target for name, target in moves.items() if target is not None}


async def test_checkpoints_and_discards_among_many_scopes_keep_every_ref(tmp_path, sample_repo):
    """With many live scopes, each writing between checkpoints and some
    discarded in between, every ref plain git reads after each checkpoint is
    the trace's: live scopes at their heads with their fork refs, discarded
    ones only archived (at their discard commit); a reopen finds the same."""
    state = tmp_path / "state"
    git_dir = state / "trace.git"
    async with Coordinator.open(state, repo=sample_repo, backend="copy") as coord:
        scopes = [await coord.root.fork(f"s{i}") for i in range(SCOPES)]
        archived: dict[str, str] = {}
        for rnd in range(3):
            for s in scopes:
                await s.write(f"{s.name}.txt", f"{rnd}\n".encode())
            for s in scopes[rnd::7]:
                done = await s.discard()
                assert done is not None and done.commit is not None
                assert done.effect.intent.kind == "scope.discard"
                archived[done.effect.intent.archive] = done.commit  # type: ignore[union-attr]
            scopes = [s for s in scopes if not s.discarded]
            await coord.checkpoint()
            on_disk = refs_on_disk(git_dir)
            live = {s.name: s.head for s in scopes} | {"root": coord.root.head}
            assert {n[len(SCOPE_PREFIX):]: t for n, t in on_disk.items()
                    if n.startswith(SCOPE_PREFIX)} == live
            assert {n[len(FORK_PREFIX):] for n in on_disk if n.startswith(FORK_PREFIX)} \
                == {s.name for s in scopes}
            assert {n: t for n, t in on_disk.items() if n.startswith(ARCHIVE_PREFIX)} \
                == archived
            for s in scopes:
                assert coord.trace.head(s.name) == s.head
        heads = {s.name: s.head for s in scopes}
    git(git_dir, "fsck", "--no-dangling", "--connectivity-only")
    async with Coordinator.open(state, backend="copy") as coord:
        assert {n: s.head for n, s in coord.scopes.items() if n != "root"} == heads
        for name in heads:
            assert (coord.scope(name).path / f"{name}.txt").read_text() == "2\n"
