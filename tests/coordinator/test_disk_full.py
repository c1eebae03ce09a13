"""A full disk is an answer (issue 22): on a real full filesystem (a small tmpfs
mounted as the state directory), writes over HTTP answer 507 DiskFull, nothing
acknowledged is lost, and the state reopens read-write while the disk is still
full, its checkpoint deferred until there is room. Needs root (to mount);
skips with the reason otherwise."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from coordinator import DiskFull

from .server_fixtures import ADMIN, serve

pytestmark = [pytest.mark.root, pytest.mark.slow]

_BIG = 64 * 1024  # larger than a page: its journal append needs new pages


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs mounted at a fresh directory: the state directory."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs as the state directory needs root")
    where = tmp_path / "state"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs",
                           str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-R", "-l", str(where)], check=False)


def _fill(where: Path) -> Path:
    """Fill the filesystem of `where` to the last byte; returns the filler file."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        chunk = 1 << 20
        while chunk:
            try:
                os.write(fd, b"\0" * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                chunk //= 2
    finally:
        os.close(fd)
    return filler


def _content(i: int) -> bytes:
    return f"file {i}\n".encode() * (_BIG // 8)


def _assert_no_torn_record(state: Path) -> None:
    """Every journal log parses to its last byte: a failed append left no torn
    record (replay stops at one, which would hide every later acknowledged effect)."""
    from coordinator.store._journal import _records

    logs = sorted((state / "trace.git" / "corral-journal").glob("*.log"))
    assert logs
    for log in logs:
        data = log.read_bytes()
        assert sum(9 + len(payload) for _, payload in _records(data)) == len(data), log


async def _post_write(url: str, scope: str, path: str) -> tuple[int, dict]:
    import base64
    import json

    body = json.dumps({"path": path,
                       "content_b64": base64.b64encode(_content(99)).decode()}).encode()
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{url}/v1/scopes/{scope}/write", data=body,
                          headers={"Authorization": f"Bearer {ADMIN}",
                                   "Content-Type": "application/json"}) as resp:
            return resp.status, await resp.json()


async def test_writes_on_a_full_disk_answer_507_and_lose_nothing(small_disk, sample_repo):
    """With the state's disk full, a write answers 507 DiskFull (the client raises
    DiskFull), the server stays up, and once space is freed writes work again and
    every write acknowledged before, during and after is in the trace."""
    acknowledged: dict[str, bytes] = {}
    async with serve(small_disk, sample_repo) as srv:
        c = srv.client
        await c.fork("root", "a")
        for i in range(3):
            r = await c.write("a", f"before-{i}.txt", _content(i))
            assert r.ok
            acknowledged[f"before-{i}.txt"] = _content(i)
        # No checkpoint first: the journal's last page has room for part of a
        # record, so an append can be cut short.
        filler = _fill(small_disk)
        for i in range(3):
            status, body = await _post_write(srv.url, "a", f"full-{i}.txt")
            assert status == 507, body
            assert body["error"] == "DiskFull" and "no space left" in body["detail"].lower()
        with pytest.raises(DiskFull):
            await c.write("a", "full-client.txt", _content(7))
        health = await c.request("GET", "/v1/health")
        assert health["ok"] is True
        filler.unlink()
        # a refused write left nothing in the workspace: it holds what its head holds
        for i in range(3):
            with pytest.raises(FileNotFoundError, match=f"no file 'full-{i}.txt' in scope 'a'"):
                await c.read("a", f"full-{i}.txt")
        with pytest.raises(FileNotFoundError):
            await c.read("a", "full-client.txt")
        r = await c.write("a", "after.txt", _content(5))
        assert r.ok
        acknowledged["after.txt"] = _content(5)
        _assert_no_torn_record(small_disk)
        for path, data in acknowledged.items():
            assert await c.read("a", path) == data
        logged = [e.effect.intent.path for e in (await c.log("a")).entries  # type: ignore[union-attr]
                  if e.effect is not None and e.effect.kind == "fs.write"]
        assert logged == list(acknowledged)
    # and after a restart, from the trace alone
    async with serve(small_disk, None) as srv:
        for path, data in acknowledged.items():
            assert await srv.client.read("a", path) == data


async def test_reopen_on_a_full_disk_defers_the_checkpoint(small_disk, sample_repo):
    """A state whose journal holds effects not yet checkpointed (the disk filled up
    before close) opens read-write while the disk is still full: /v1/health says
    the checkpoint is deferred, the effects are all readable; once space is
    freed the checkpoint happens (health "ok", plain git sees the commits)."""
    acknowledged: dict[str, bytes] = {}
    async with serve(small_disk, sample_repo) as srv:
        c = srv.client
        await c.fork("root", "a")
        await srv.hub.coordinator.checkpoint()
        for i in range(3):
            r = await c.write("a", f"f{i}.txt", _content(i))
            assert r.ok
            acknowledged[f"f{i}.txt"] = _content(i)
        # Full before the close: its checkpoint cannot be written, the journal keeps it.
        filler = _fill(small_disk)
    head = None
    async with serve(small_disk, None) as srv:
        c = srv.client
        health = await c.request("GET", "/v1/health")
        assert health["checkpoint"] == "deferred: no space left on device", health
        for path, data in acknowledged.items():
            assert await c.read("a", path) == data
        head = (await c.scope("a")).head
        status, body = await _post_write(srv.url, "a", "still-full.txt")
        assert status == 507, body
        filler.unlink()
        for _ in range(100):  # the background checkpoint retries every 2 s
            health = await c.request("GET", "/v1/health")
            if health["checkpoint"] == "ok":
                break
            await asyncio.sleep(0.2)
        assert health["checkpoint"] == "ok"
        git_log = subprocess.run(
            ["git", "--git-dir", str(small_disk / "trace.git"), "log", "--format=%H",
             "refs/corral/scopes/a"], capture_output=True, text=True, check=True)
        assert head in git_log.stdout.split()
        r = await c.write("a", "later.txt", _content(9))
        assert r.ok
