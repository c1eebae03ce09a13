"""Guarded oracles in a team of N (`_oracle_team`): a blocked oracle hands every
feature it holds to the agent whose lines its hunk would conflict with, is rewound to
its fork point, and the receiver applies what it holds in agent order. Real
coordinators over the mini suite's base repositories, the real conflict guard; no
test suites run."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cooperbench import load_tasks, mini_suite
from bench.cooperbench._dataset import Task
from bench.cooperbench._oracle_team import OracleWorker, receiver
from bench.cooperbench._records import Setting
from bench.cooperbench._repos import base_repo
from bench.cooperbench._team import work
from bench.cooperbench._team_rules import TeamConfig, pair_policies
from coordinator import Coordinator


def _task(lib: str) -> Task:
    return load_tasks(mini_suite() / "dataset")[f"mini_{lib}_task/task1"]


async def _team(tmp_path: Path, lib: str, group: tuple[int, ...], path: str,
                setting: Setting = "supervised") -> tuple[list[bytes], list[str]]:
    """The oracles of `group` in `setting` worked to the end: each agent's `path` (b""
    when it is the base file), the report's notes."""
    task = _task(lib)
    repo = base_repo(task, mini_suite() / "repos", tmp_path / "cache")
    cfg = TeamConfig()
    chain, rules = pair_policies(cfg, setting)
    async with Coordinator.open(tmp_path / f"state-{setting}", repo=repo,
                                policies=chain) as coord:
        n = 1 if setting == "solo" else len(group)
        scopes = [await coord.root.fork(f"u.agent{k}") for k in range(1, n + 1)]
        report = await work(cfg, coord, scopes, tuple(task.features[f] for f in group),
                            setting, _oracle_choice(), rules)
        files = [await s.read(path) for s in scopes]
        base = await coord.root.read(path)
        assert report.handoffs >= (setting == "supervised")
        return [f if f != base else b"" for f in files], report.notes


def _oracle_choice():  # type: ignore[no-untyped-def]
    from bench.cooperbench import AgentOptions, load_agent

    return load_agent("oracle", AgentOptions())


async def test_the_blocked_oracle_hands_its_features_to_the_owner_of_the_lines(
        tmp_path: Path) -> None:
    """textkit 1-3-4: features 3 and 4 extend one import block. Agent 3's import is
    blocked by agent 2's (not agent 1's, which is the first other agent): agent 3 hands
    feature 4 to agent 2 and is rewound to nothing; agent 2 applies 3 then 4, as solo
    does (which loses 4's import hunk too: its 3-way merge conflicts)."""
    files, notes = await _team(tmp_path, "textkit", (1, 3, 4), "textkit/core.py")
    one, two, three = files
    assert b"separator" in one and b"import unicodedata" not in one
    assert b"import unicodedata" in two and b'marker="..."' in two
    assert three == b""
    assert not [n for n in notes if "starting over" in n]
    (solo,), _ = await _team(tmp_path, "textkit", (3, 4), "textkit/core.py", "solo")
    assert two == solo


async def test_a_handoff_against_agent_order_starts_over_in_it(tmp_path: Path) -> None:
    """invoice 4-5: agent 2 (minimum charge) rewrote total's last line before agent 1
    appended after it; agent 1 hands feature 4 to agent 2, whose hunk of it then no
    longer applies after its own: agent 2 starts over, 4 then 5 (solo's order), and
    both features' code is there."""
    files, notes = await _team(tmp_path, "invoice", (4, 5), "invoice/calc.py")
    assert files[0] == b""
    assert b'CURRENCY = "EUR"' in files[1] and b"def line(" in files[1]
    assert b"max(round(net + tax(net), 2), 1.0)" in files[1]
    assert [n for n in notes if "starting over in agent order" in n]
    (solo,), _ = await _team(tmp_path, "invoice", (4, 5), "invoice/calc.py", "solo")
    assert files[1] == solo


async def test_a_handoff_in_the_order_that_composes_is_kept(tmp_path: Path) -> None:
    """invoice 1-3: agent 1's rewrite of total is blocked by agent 2's append after it;
    agent 2 applies feature 1 after its own, which composes (solo's order, 1 then 3,
    does not): no start over."""
    files, notes = await _team(tmp_path, "invoice", (1, 3), "invoice/calc.py")
    assert files[0] == b""
    assert b"SHIPPING_FEE" in files[1] and b"def format_money" in files[1]
    assert b"shipping" in files[1]
    assert not [n for n in notes if "starting over" in n]


async def test_the_receiver_follows_handoffs_to_a_live_agent(tmp_path: Path) -> None:
    """The owner named in the guard's reason takes the work; when it has handed its own
    work on, whoever holds it now; with no owner named, the first agent still working;
    with nobody working, nobody."""
    task = _task("kvstore")
    repo = base_repo(task, mini_suite() / "repos", tmp_path / "cache")
    async with Coordinator.open(tmp_path / "state", repo=repo) as coord:
        ws = [OracleWorker(await coord.root.fork(f"u.agent{k}"), task.features[k], k - 1)
              for k in (1, 2, 3, 4)]
        a1, a2, a3, a4 = ws
        why = "lines 3-4 of kvstore/store.py conflict with changes by scope u.agent3 (effect x)"
        assert receiver(a1, ws, why) is a3
        a3.stopped, a3.handed_to = "handed off", a4.name
        assert receiver(a1, ws, why) is a4
        assert receiver(a1, ws, "something else") is a2
        a2.stopped = a4.stopped = "done"
        assert receiver(a1, ws, why) is None
        named10 = "changes by scope u.agent10"
        assert receiver(a2, ws, named10) is a1  # agent1 is not agent10


async def test_taking_features_keeps_agent_order_or_marks_it_broken(tmp_path: Path) -> None:
    """A receiver queues given features after those it has begun; a given feature
    earlier in agent order than a begun one marks it `reordered` (a hunk that then does
    not apply makes it start over), a later one does not."""
    task = _task("kvstore")
    repo = base_repo(task, mini_suite() / "repos", tmp_path / "cache")
    async with Coordinator.open(tmp_path / "state", repo=repo) as coord:
        f = task.features
        w = OracleWorker(await coord.root.fork("u.agent2"), f[2], 1)
        w.begun.add(2)
        w.queue.popleft()
        w.take([(3, f[4]), (2, f[3])])
        assert _order(w) == [3, 4] and not w.reordered
        w.take([(0, f[1])])
        assert _order(w) == [1, 3, 4] and w.reordered
        assert [r for r, _ in w.held] == [0, 1, 2, 3]
        assert (await w.scope.write("x.txt", b"begun\n")).ok
        await w.rebuild()
        assert _order(w) == [1, 2, 3, 4] and not w.reordered and not w.begun
        with pytest.raises(FileNotFoundError):
            await w.scope.read("x.txt")


def _order(w: OracleWorker) -> list[int]:
    """The features of `w`'s queue, in the order it takes them."""
    out: list[int] = []
    for step in w.queue:
        if not out or out[-1] != step.feature:
            out.append(step.feature)
    return out
