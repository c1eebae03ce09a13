"""Shipping a state to another process and adopting what it added (coordinator/store/
_ship.py, coordinator/control/_ship.py): the copy opens with every scope and every object
(blobs no ref reaches too), and its new scopes come back live with their files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator import Coordinator, ScopeExists, StateError, receive_state
from tests.conftest import make_repo


async def _roundtrip(tmp: Path) -> None:
    repo = make_repo(tmp / "repo", {"a.txt": "a\n"})
    async with Coordinator.open(tmp / "state", repo, backend="copy") as coord:
        scope = await coord.root.fork("agent-1")
        await scope.write("b.txt", b"b\n")
        loose = await coord.io(coord.trace.write_blob, b"named only by a record\n")
        shipped = await coord.ship()
        assert loose in shipped.objects
        receive_state(shipped, tmp / "copy")
        async with Coordinator.open(tmp / "copy", backend="copy") as far:
            assert far.scope("agent-1").head == scope.head
            assert await far.scope("agent-1").read("b.txt") == b"b\n"
            assert far.trace.blob(loose) == b"named only by a record\n"
            child = await far.scope("agent-1").fork("agent-1.x")
            await child.write("c.txt", b"c\n")
            back = await far.ship(without=shipped.objects)
            assert back.objects and not back.objects & shipped.objects
        adopted = await coord.adopt(back, ["agent-1.x"])
        assert [s.name for s in adopted] == ["agent-1.x"]
        x = coord.scope("agent-1.x")
        assert x.parent == "agent-1" and x.head == child.head
        assert await x.read("c.txt") == b"c\n" and await x.read("b.txt") == b"b\n"
        with pytest.raises(ScopeExists):
            await coord.adopt(back, ["agent-1.x"])
        with pytest.raises(StateError):
            await coord.adopt(back, ["nobody"])
        await x.write("d.txt", b"d\n")  # an adopted scope is an ordinary live scope
    async with Coordinator.open(tmp / "state", backend="copy") as again:
        assert await again.scope("agent-1.x").read("d.txt") == b"d\n"


def test_a_shipped_state_opens_elsewhere_and_its_new_scopes_come_back(tmp_path: Path) -> None:
    asyncio.run(_roundtrip(tmp_path))


def test_receiving_into_a_state_that_exists_is_refused(tmp_path: Path) -> None:
    async def go() -> None:
        repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
        async with Coordinator.open(tmp_path / "state", repo, backend="copy") as coord:
            shipped = await coord.ship()
        with pytest.raises(StateError):
            receive_state(shipped, tmp_path / "state")
    asyncio.run(go())
