"""Consistent cuts of a team: taken under concurrent writers and messages, recorded,
and the team forked or rewound from one as a whole."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from coordinator import (
    Coordinator,
    CorralError,
    Decision,
    Forbidden,
    Intent,
    NotFound,
    PathError,
    RewindError,
    ScopeExists,
    View,
)
from coordinator.control._cut import rewind_team
from coordinator.scopes._scope import fork_scopes
from tests.conftest import git, make_repo

pytestmark = pytest.mark.asyncio

TEAM = ("a", "b", "c", "d")


def _repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": "# team\n"})


def _sent(coord: Coordinator, head: str) -> list[str]:
    """The texts of the messages the branch ending at `head` delivered, oldest first."""
    return [e.effect.intent.text for e in coord.trace.log(head)
            if e.effect is not None and e.effect.kind == "message"
            and e.effect.status == "materialized"]


async def _chatter(coord: Coordinator, name: str, rounds: int, seed: int) -> None:
    """Writes a file and messages a random teammate, `rounds` times."""
    rng = random.Random(seed)
    me = coord.scope(name)
    for i in range(rounds):
        if rng.random() < 0.5:
            await me.write(f"{name}.txt", f"{name} {i}\n".encode())
        to = rng.choice([t for t in TEAM if t != name])
        await me.send(to, f"{name}->{to} #{i}")


async def test_every_cut_has_each_message_on_both_sides_or_neither(tmp_path: Path):
    """Four scopes write and message each other while cuts are taken: in every cut,
    a scope's inbox holds exactly the messages whose sending commit is within the
    senders' cut heads (no message received but not sent, none sent but lost)."""
    async with Coordinator.open(tmp_path / "s", _repo(tmp_path), backend="copy") as coord:
        for name in TEAM:
            await coord.root.fork(name)
        work = [asyncio.create_task(_chatter(coord, n, 25, seed)) for seed, n in
                enumerate(TEAM)]
        cuts = []
        while not all(t.done() for t in work):
            cuts.append(await coord.cut(TEAM, name=f"c{len(cuts)}"))
            await asyncio.sleep(0)
        await asyncio.gather(*work)
        cuts.append(await coord.cut(TEAM, name="last"))
        assert len(cuts) > 3
        for cut in cuts:
            sent = {m.scope: _sent(coord, m.head) for m in cut.members}
            for m in cut.members:
                expected = sorted(t for s in sent.values() for t in s if t.split("->")[1]
                                  .split(" ")[0] == m.scope)
                assert sorted(msg.text for msg in m.inbox) == expected, (cut.name, m.scope)
        assert sum(len(m.inbox) for m in cuts[-1].members) == 4 * 25


async def test_a_cut_is_recorded_for_stock_git_and_read_back(tmp_path: Path):
    repo = _repo(tmp_path)
    async with Coordinator.open(tmp_path / "s", repo, backend="copy") as coord:
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        await a.write("x.txt", b"x\n")
        await a.send("b", "hello b")
        cut = await coord.cut([a, b], name="first")
        assert [m.scope for m in cut.members] == ["a", "b"]
        assert await coord.read_cut("first") == cut
        assert coord.cuts() == ["first"]
        with pytest.raises(ScopeExists, match="first"):
            await coord.cut([a], name="first")
        with pytest.raises(PathError, match="cut name"):
            await coord.cut([a], name="bad..name")
        with pytest.raises(NotFound, match="no cut"):
            await coord.read_cut("nope")
    state = tmp_path / "s" / "trace.git"
    body = json.loads(git(state, "show", "refs/corral/cuts/first:cut.json"))
    assert [(m["scope"], m["head"]) for m in body["members"]] == [
        ("a", cut.members[0].head), ("b", cut.members[1].head)]
    assert [m["text"] for m in body["members"][1]["inbox"]] == ["hello b"]
    parents = git(state, "log", "-1", "--format=%P", "refs/corral/cuts/first").split()
    assert parents == [cut.members[0].head, cut.members[1].head]


async def test_fork_team_starts_every_member_from_the_cut(tmp_path: Path):
    async with Coordinator.open(tmp_path / "s", _repo(tmp_path), backend="copy") as coord:
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        await a.write("a.txt", b"one\n")
        await a.send("b", "take a.txt")
        cut = await coord.cut([a, b], name="k")
        await a.write("a.txt", b"two\n")
        await b.write("b.txt", b"later\n")
        await a.send("b", "after the cut")
        again = await coord.fork_team("k", "retry-")
        assert [s.name for s in again] == ["retry-a", "retry-b"]
        ra, rb = again
        assert await ra.read("a.txt") == b"one\n"
        with pytest.raises(FileNotFoundError):
            await rb.read("b.txt")
        assert [m.text for m in rb.take_messages()] == ["take a.txt"]
        assert ra.fork_point != cut.member("a").head  # a fork of its own, at the cut head
        assert coord.trace.commit_tree(ra.head) == coord.trace.commit_tree(cut.member("a").head)
        with pytest.raises(ScopeExists):
            await coord.fork_team(cut, "retry-")


async def test_fork_team_forks_no_member_when_one_name_is_taken(tmp_path: Path):
    """The members are forked all or nothing: a name taken for the second member
    leaves no fork of the first, in the registry or in the trace."""
    async with Coordinator.open(tmp_path / "s", _repo(tmp_path), backend="copy") as coord:
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        await a.write("a.txt", b"one\n")
        cut = await coord.cut([a, b], name="k")
        await coord.root.fork("retry-b")
        with pytest.raises(ScopeExists):
            await coord.fork_team(cut, "retry-")
        again = await coord.fork_team(cut, "again-")  # the cut still forks
        assert await again[0].read("a.txt") == b"one\n"
        assert "retry-a" not in coord.scopes  # (a fork already under way would be by now)
        assert coord.trace.head("retry-a") is None


async def test_forks_made_together_check_every_fork_point_before_forking(tmp_path: Path):
    """`fork_scopes` of two siblings of one scope and a third at a commit outside its
    parent's history: RewindError, and none of the three exists; without the bad one,
    both siblings see the parent's file and not each other's writes."""
    async with Coordinator.open(tmp_path / "s", _repo(tmp_path), backend="copy") as coord:
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        await a.write("a.txt", b"one\n")
        await b.write("b.txt", b"b\n")
        with pytest.raises(RewindError):
            await fork_scopes([(a, "x", None), (a, "y", None), (b, "z", a.head)])
        assert not {"x", "y", "z"} & set(coord.scopes)
        assert [coord.trace.head(n) for n in "xyz"] == [None] * 3
        x, y = await fork_scopes([(a, "x", None), (a, "y", None)])
        await x.write("a.txt", b"x\n")
        assert (await x.read("a.txt"), await y.read("a.txt")) == (b"x\n", b"one\n")
        assert x.parent == y.parent == "a"


async def test_rewind_team_brings_every_member_back_together(tmp_path: Path):
    async with Coordinator.open(tmp_path / "s", _repo(tmp_path), backend="copy") as coord:
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        await a.write("a.txt", b"one\n")
        await b.send("a", "before")
        cut = await coord.cut([a, b], name="k")
        await a.write("a.txt", b"two\n")
        await b.write("b.txt", b"b\n")
        await b.send("a", "after")
        await a.send("b", "to b, after")
        ids = await coord.rewind_team("k", reason="try again")
        assert await a.read("a.txt") == b"one\n"
        with pytest.raises(FileNotFoundError):
            await b.read("b.txt")
        assert [m.text for m in a.take_messages()] == ["before"]
        assert b.take_messages() == []
        for scope, decision_id in zip((a, b), ids, strict=True):
            assert coord.trace.commit_tree(scope.head) == coord.trace.commit_tree(
                cut.member(scope.name).head)
            # The rewind is the branch's last effect, caused by the decision it rewound
            # past (kept, with what came after the cut, in the archive ref).
            rewound = coord.log(scope)[-1]
            assert rewound.kind == "scope.rewind" and rewound.cause == decision_id
            decision = coord.trace.show(rewound.intent.head).effect
            assert decision is not None and decision.id == decision_id
            assert decision.cause == "cut:k" and decision.intent.detail["reason"] == "try again"


class Hold:
    """A policy that keeps writes of `held.txt` waiting until `release` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()

    async def __call__(self, intent: Intent, view: View) -> Decision | None:
        if getattr(intent, "path", None) == "held.txt":
            self.waiting.set()
            await self.release.wait()
        return None


async def test_a_cut_lists_pending_intents_and_does_not_wait_for_them(tmp_path: Path):
    hold = Hold()
    async with Coordinator.open(tmp_path / "s", _repo(tmp_path), backend="copy",
                                policies=[hold]) as coord:
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        stuck = asyncio.create_task(a.write("held.txt", b"x"))
        await hold.waiting.wait()
        cut = await asyncio.wait_for(coord.cut([a, b], name="k"), 5)
        assert cut.member("a").pending == (f"a#{a.effect_path.seq - 1}",)
        assert cut.member("b").pending == ()
        # The team cannot be rewound while a member's intent waits: nothing moves.
        await b.write("b.txt", b"b\n")
        head_b = b.head
        with pytest.raises(CorralError, match="'a' is still busy"):
            await rewind_team(coord.scopes, cut, lock_timeout=0.2)
        assert b.head == head_b
        hold.release.set()
        assert (await stuck).ok


async def test_the_team_routes_cut_fork_and_rewind_over_http(tmp_path: Path):
    """The same through the API and the client; only the admin token may, and bad
    input is an HTTP error, not a half-done team."""
    from coordinator.client import ClientError, CorralClient

    from .server_fixtures import serve

    async with serve(tmp_path / "state", _repo(tmp_path)) as srv:
        c = srv.client
        token = (await c.fork("root", "a")).token
        await c.fork("root", "b")
        await c.write("a", "a.txt", b"one\n")
        await c.send("a", "b", "hi b")
        cut = await c.cut(["a", "b"], name="k")
        assert [(m.scope, [x.text for x in m.inbox]) for m in cut.members] == [
            ("a", []), ("b", ["hi b"])]
        assert await c.cuts() == ["k"] and (await c.read_cut("k")) == cut
        await c.write("a", "a.txt", b"two\n")
        decisions = await c.rewind_team("k", reason="again")
        assert len(decisions) == 2
        assert await c.read("a", "a.txt") == b"one\n"
        forked = await c.fork_team("k", "x-")
        assert [s.name for s in forked] == ["x-a", "x-b"]
        async with CorralClient(srv.url, token) as scoped:
            with pytest.raises(Forbidden):
                await scoped.cut(["a"])
        with pytest.raises(ScopeExists, match="a cut named 'k' exists"):  # 409
            await c.cut(["a"], name="k")
        with pytest.raises(NotFound, match="no cut named 'nope'"):  # 404
            await c.read_cut("nope")
        with pytest.raises(ClientError) as e:
            await c.fork_team("k", "bad prefix")
        assert e.value.status == 422
        paths = (await c.request("GET", "/openapi.json"))["paths"]
        assert {"/v1/cuts", "/v1/cuts/{cut}", "/v1/cuts/{cut}/fork",
                "/v1/cuts/{cut}/rewind"} <= set(paths)


async def test_guard_sees_a_teammates_work_from_before_the_cut(tmp_path: Path):
    """A team forked from a cut: `a` changed a line before the cut, so `retry-a` carries
    that change from its fork point on. `retry-b` rewriting the same line conflicts
    with it when they merge, and the conflict guard blocks it, naming `retry-a`: a
    scope's touched paths are measured from where its line left root, not from its
    own fork point (which would leave `retry-a` with no paths and skip it). A fork of
    `retry-a` carries the change the same way."""
    from coordinator import ConflictGuard

    repo = make_repo(tmp_path / "repo", {"app.py": "x = 0\n\n\n\ny = 0\n"})
    async with Coordinator.open(tmp_path / "s", repo, backend="copy",
                                policies=[ConflictGuard()]) as coord:
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        assert (await a.write("app.py", b"x = 1\n\n\n\ny = 0\n")).ok
        await coord.cut([a, b], name="k")
        ra, rb = await coord.fork_team("k", "retry-")
        await a.discard()
        await b.discard()  # only the forked team is left
        r = await rb.write("app.py", b"x = 2\n\n\n\ny = 0\n")
        assert r.blocked and "retry-a" in r.reason, r.reason
        assert (await rb.write("app.py", b"x = 0\n\n\n\ny = 2\n")).ok  # a's line left alone
        await ra.fork("retry-a.child")
        await ra.discard()
        r = await rb.write("app.py", b"x = 3\n\n\n\ny = 2\n")
        assert r.blocked and "retry-a.child" in r.reason, r.reason
