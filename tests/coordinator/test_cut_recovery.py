"""A team rewind is all or nothing: a blocked decision moves no member, and a
coordinator killed (SIGKILL) between two members' rewinds finishes the rest when its
state is reopened."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coordinator import Coordinator, CorralError, Decision, Intent, SupervisorAction, View
from coordinator.control._cut import REWINDING_PREFIX
from tests.conftest import make_repo

pytestmark = pytest.mark.asyncio

KILLER = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from coordinator import Coordinator

    async def kill_at_bs_rewind(intent, view):
        # SIGKILL the coordinator as member b's rewind is proposed: every decision is
        # recorded and member a has moved; b has not
        if intent.kind == "scope.rewind" and view.scope == "b":
            os.kill(os.getpid(), signal.SIGKILL)
        return None

    async def main(state, repo):
        async with Coordinator.open(state, repo, backend="copy",
                                    policies=[kill_at_bs_rewind]) as coord:
            a, b = await coord.root.fork("a"), await coord.root.fork("b")
            await a.write("a.txt", b"one\\n")
            await b.write("b.txt", b"one\\n")
            await coord.cut([a, b], name="k")
            await a.write("a.txt", b"two\\n")
            await b.write("b.txt", b"two\\n")
            print("rewinding", flush=True)
            await coord.rewind_team("k", reason="back")
            print("not killed", flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def _repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": "# team\n"})


@pytest.mark.slow  # a SIGKILLed child
async def test_a_team_rewind_killed_between_members_is_finished_at_reopen(tmp_path: Path):
    state, repo = tmp_path / "state", _repo(tmp_path)
    proc = subprocess.run([sys.executable, "-c", KILLER, str(state), str(repo)],
                          capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[2])
    assert proc.returncode == -9, proc.stderr
    assert proc.stdout.splitlines() == ["rewinding"]

    async with Coordinator.open(state, backend="copy") as coord:
        cut = await coord.read_cut("k")
        for name in ("a", "b"):
            scope = coord.scope(name)
            assert await scope.read(f"{name}.txt") == b"one\n", name
            assert coord.trace.commit_tree(scope.head) == coord.trace.commit_tree(
                cut.member(name).head)
            rewound = coord.log(scope)[-1]
            assert rewound.kind == "scope.rewind" and rewound.intent.to == cut.member(name).head
            decision = coord.trace.show(rewound.intent.head).effect
            assert decision is not None and decision.cause == "cut:k"
        # b's decision from before the kill is kept under the finishing one (both
        # archived by the rewind, as what comes after a cut is)
        b_rewind = coord.log(coord.scope("b"))[-1]
        finishing = coord.trace.show(b_rewind.intent.head)
        before = coord.trace.show(finishing.parents[0])
        assert [e.effect.intent.detail["reason"] for e in (finishing, before)] == [
            "finishing the team rewind a restart interrupted", "back"]
        assert coord.trace.refs(REWINDING_PREFIX) == []
        a_head = coord.scope("a").head
    async with Coordinator.open(state, backend="copy") as coord:  # nothing left to finish
        assert coord.scope("a").head == a_head


class BlockB:
    async def __call__(self, intent: Intent, view: View) -> Decision | None:
        if isinstance(intent, SupervisorAction) and intent.target == "b":
            return Decision(verdict="block", reason="b keeps its work")
        return None


async def test_a_blocked_member_decision_rewinds_no_member(tmp_path: Path):
    async with Coordinator.open(tmp_path / "s", _repo(tmp_path), backend="copy",
                                policies=[BlockB()]) as coord:
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        await a.write("a.txt", b"one\n")
        await coord.cut([a, b], name="k")
        await a.write("a.txt", b"two\n")
        with pytest.raises(CorralError, match="b keeps its work; no member of the team"):
            await coord.rewind_team("k")
        assert await a.read("a.txt") == b"two\n"  # a was decided on, never moved
        assert coord.log(a)[-1].kind == "decision"
        assert coord.trace.refs(REWINDING_PREFIX) == []
