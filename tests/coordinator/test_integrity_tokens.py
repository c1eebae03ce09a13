"""Scope tokens cannot be forged from anything readable, die with their scope
incarnation, survive a restart; streams close with their scope (issue 9,
findings 3 and 13)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json

import pytest

from coordinator import AuthError

from .server_fixtures import serve


def _fixed_clock() -> float:
    return 1_700_000_000.0  # every commit in the same second: equal fork commits


async def test_a_recreated_scope_does_not_take_the_old_token(tmp_path, sample_repo):
    """Discard, then fork the same name from the same parent at the same commit
    in the same second: the old token is refused, the new one works."""
    async with serve(tmp_path / "state", sample_repo, clock=_fixed_clock) as srv:
        c = srv.client
        first = await c.fork("root", "a")
        await c.discard("a")
        second = await c.fork("root", "a")
        assert first.scope.fork_point == second.scope.fork_point  # the same commit
        assert first.token != second.token
        with pytest.raises(AuthError):
            await c.with_token(first.token).write("a", "x.txt", b"x")
        assert (await c.with_token(second.token).write("a", "x.txt", b"x")).ok


async def test_tokens_cannot_be_forged_from_the_state_or_health(tmp_path, sample_repo):
    """With everything a command could read in the state directory (any key,
    the tokens file, the trace) and the snapshot `/v1/health` gives, no root
    or scope token can be made."""
    state = tmp_path / "state"
    async with serve(state, sample_repo) as srv:
        c = srv.client
        real = await c.fork("root", "a")
        snapshot = (await c.health())["snapshot"]
        fork_point = real.scope.fork_point
        keys = [p.read_bytes() for p in state.iterdir() if p.name.endswith(".key")]
        records = [json.loads(line) for line in (state / "tokens").read_text().splitlines()]
        assert [r["scope"] for r in records] == ["a"]
        assert real.token.split(".")[-1] not in (state / "tokens").read_text()
        forged = [f"s.a.{records[0]['digest']}", f"s.a.{records[0]['digest'][:40]}"]
        for key in keys or [b""]:
            for name, point in (("root", snapshot), ("a", fork_point)):
                mac = hmac.new(key, f"{name}\0{point}".encode(), hashlib.sha256).hexdigest()
                forged += [f"s.{name}.{mac[:40]}", f"s.{name}.{mac}"]
        for token in forged:
            with pytest.raises(AuthError):
                await c.with_token(token).read("a", "README.md")
            with pytest.raises(AuthError):
                await c.with_token(token).read("root", "README.md")
        assert await c.with_token(real.token).read("a", "README.md")
        assert (state / "tokens").stat().st_mode & 0o077 == 0


@pytest.mark.slow
async def test_tokens_survive_a_restart_and_discards_stay_revoked(tmp_path, sample_repo):
    """A token works after a restart; a discarded scope's token stays dead after
    a restart even when the name was forked again (here through the Python API,
    at the same commit)."""
    state = tmp_path / "state"
    async with serve(state, sample_repo, clock=_fixed_clock) as srv:
        keep = await srv.client.fork("root", "keep")
        gone = await srv.client.fork("root", "gone")
        await srv.client.discard("gone")
        again = await srv.hub.coordinator.root.fork("gone")  # no token issued for it
        assert again.fork_point == gone.scope.fork_point
    async with serve(state, None, clock=_fixed_clock) as srv:
        assert (await srv.client.with_token(keep.token).write("keep", "x", b"x")).ok
        with pytest.raises(AuthError):
            await srv.client.with_token(gone.token).read("gone", "README.md")


async def test_an_event_stream_closes_when_its_scope_is_discarded(tmp_path, sample_repo):
    """A stream opened with a scope token ends when that scope is discarded and
    never sees the events of a scope re-created under the same name."""
    async with serve(tmp_path / "state", sample_repo) as srv:
        c = srv.client
        a = c.with_token((await c.fork("root", "a")).token)
        await c.fork("root", "b")
        seen: list[dict] = []
        async with a.subscribe(scopes=["a"], types=["effect"]) as stream:

            async def read_all() -> None:
                async for event in stream:
                    seen.append(event)

            reader = asyncio.create_task(read_all())
            await a.write("a", "x.txt", b"x")
            await c.discard("a")
            await asyncio.wait_for(reader, 5)  # the server closed the stream
            await c.fork("b", "a")
            await c.write("a", "y.txt", b"y")
        kinds = [e["effect"]["intent"]["kind"] for e in seen]
        assert kinds[-1] == "scope.discard" and "fs.write" in kinds
        assert all(e["effect"]["intent"].get("path") != "y.txt" for e in seen)


async def test_a_recreated_parent_does_not_inherit_the_old_ones_children(tmp_path, sample_repo):
    """P forks C; P is discarded and forked again under the same name: the new
    P's token does not act on C (C was forked from the old P), C's own does."""
    async with serve(tmp_path / "state", sample_repo) as srv:
        c = srv.client
        p_old = c.with_token((await c.fork("root", "p")).token)
        child = await p_old.fork("p", "c")
        assert (await p_old.write("c", "x.txt", b"x")).ok
        await c.discard("p")
        await c.write("root", "moved.txt", b"root moved on")  # a different fork commit
        p_new = c.with_token((await c.fork("root", "p")).token)
        from coordinator import Forbidden
        with pytest.raises(Forbidden):
            await p_new.write("c", "y.txt", b"y")
        assert "c" not in [s.name for s in await p_new.scopes()]
        assert (await c.with_token(child.token).write("c", "y.txt", b"y")).ok
        assert (await p_new.fork("p", "c2")).token  # its own children it covers
        assert (await p_new.write("c2", "z.txt", b"z")).ok


async def test_a_recreated_scope_cannot_read_its_predecessors_commits(tmp_path, sample_repo):
    """/v1/trace/{commit} with the token of a re-created scope refuses the
    commits of the earlier scope of that name, and shows its own."""
    async with serve(tmp_path / "state", sample_repo) as srv:
        c = srv.client
        old = c.with_token((await c.fork("root", "a")).token)
        secret = (await old.write("a", "secret.txt", b"old incarnation's")).commit
        assert (await old.show(secret)).effect is not None
        await c.discard("a")
        await c.write("root", "moved.txt", b"x")
        new = c.with_token((await c.fork("root", "a")).token)
        mine = (await new.write("a", "mine.txt", b"new")).commit
        from coordinator import Forbidden
        with pytest.raises(Forbidden):
            await new.show(secret)
        assert (await new.show(mine)).effect is not None
        assert (await c.show(secret)).effect is not None  # the admin sees everything
