"""Oracles in a team: each a queue of gold hunks in its own scope, taking turns (`_team`
runs the turns), and the conflict guard's handoff among N of them.

**Agent order.** A unit's features have an order (agent k has the k-th); solo applies
them in it, feature after feature. An oracle holds features (its own, and those handed
to it) and applies them in that order too: what one agent holds ends up as solo would
have made it from those features, so a handoff never makes worse what one agent could
do. (Applying two features' hunks in the other order can fail where solo's order works:
a hunk whose context another feature's hunk changed no longer applies, and its 3-way
merge conflicts; the mini suite's invoice 4-5 is such a pair.)

**The guard's handoff.** When the guard blocks a hunk of oracle `w`, `w` hands every
feature it holds to the agent whose work the hunk would conflict with (`receiver`):
`w`'s scope is rewound to its fork point (its work is gone from its branch, so nothing
of it can conflict or be merged twice), `w` tells the receiver (a `message` effect) and
stops. The receiver queues the features' hunks after those of the features it has
begun (the blocked hunk then lands after the hunk it conflicted with, which is how the
two compose best when the one written first is the later feature's: invoice 1-3). When
that puts a feature after a later one in agent order and a hunk then does not apply,
the receiver starts over in agent order: its scope rewound to its fork point, every
feature it holds applied from its first hunk, as solo applies them (invoice 4-5).
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from coordinator import Coordinator, Result, Scope

from ._agent_report import AgentReport
from ._dataset import Feature
from ._oracle import Step, oracle_steps, run_oracle_step
from ._team_rules import PairBudget

if TYPE_CHECKING:
    from agents.team_tools import TeamAccess

__all__ = ["OracleWorker", "guard_handoff", "oracle_turn", "receiver"]


class OracleWorker:
    """An oracle in a team. It has what `LLMSupervisor` steers (`name`, `task`, `steps`,
    `stopped`, `lock`, `scope`, `restart`), so a model can supervise oracles: a handoff
    moves its remaining hunks to the receiver, a restart discards its scope and starts
    its feature over, a note is read and kept (the oracle follows its gold patch
    whatever it is told)."""

    def __init__(self, scope: Scope, feature: Feature, rank: int) -> None:
        self.scope = scope
        self.feature = feature
        self.task = feature.description.strip().splitlines()[0] if feature.description else ""
        self.held: list[tuple[int, Feature]] = [(rank, feature)]
        """The features this oracle is to apply, with their place in agent order."""
        self.queue: deque[Step] = deque(oracle_steps(feature))
        self.begun: set[int] = set()
        """Ids of the features it took a step of since its scope last held nothing."""
        self.reordered = False
        """It applies a feature after one that comes later in agent order (a handoff
        put it there): a hunk that then does not apply makes it `rebuild`."""
        self.lost: list[Step] = []
        """Blocked steps: gone unless a handoff gives them to another agent."""
        self.lock = asyncio.Lock()
        self.stopped: str | None = None
        self.handed_to: str | None = None
        """The agent this one handed its features to (the conflict guard's handoff)."""
        self.steps = 0
        self.team: TeamAccess | None = None
        """Its team, in the team settings (the lead adds the tasks, members claim them)."""
        self.tasks: list[str] = []
        """The team's tasks it owns (its claim, and those handed to it)."""
        self.base: str | None = None
        """Where a rewind of its scope goes (None: the fork point). In the team settings
        the head after its team setup, so a rewind keeps the task list and its claim."""

    @property
    def name(self) -> str:
        return self.scope.name

    def restart(self, scope: Scope) -> None:
        self.scope = scope
        self.base = None
        self.queue = deque(oracle_steps(self.feature))
        self.held = self.held[:1]
        self.begun = set()
        self.reordered = False
        self.lost = []

    @property
    def busy(self) -> bool:
        return self.stopped is None and bool(self.queue)

    def take(self, given: Sequence[tuple[int, Feature]]) -> None:
        """Hold `given` too: their hunks after those of the features it has begun, the
        features it has not begun in agent order (module doc). When a given feature
        comes before one it has begun, its order is no longer agent order
        (`reordered`)."""
        begun = [rank for rank, f in self.held if f.id in self.begun]
        self.held = sorted([*self.held, *given], key=lambda rf: rf[0])
        if begun and min(rank for rank, _ in given) < max(begun):
            self.reordered = True
        started = [s for s in self.queue if s.feature in self.begun]
        fresh = [s for _, f in self.held if f.id not in self.begun for s in oracle_steps(f)]
        self.queue = deque([*started, *fresh])

    async def rebuild(self) -> None:
        """Start over in agent order: the scope rewound to its fork point, every held
        feature queued from its first hunk."""
        await _clear(self)
        self.begun = set()
        self.reordered = False
        self.queue = deque(s for _, f in self.held for s in oracle_steps(f))


async def _clear(w: OracleWorker) -> None:
    """Rewind `w`'s scope to its fork point, or in a team to the head after its team
    setup (`base`): its branch holds none of its files' work then."""
    to = w.base or w.scope.fork_point
    if w.scope.head != to:
        await w.scope.rewind(to=to, cause=None)


async def oracle_turn(w: OracleWorker, budget: PairBudget, report: AgentReport,
                      coord: Coordinator) -> Result | None:
    """`w`'s next hunk, if it has one and budget for it; a blocked hunk goes to
    `w.lost`; a hunk that does not apply while `w` is `reordered` makes it start over
    in agent order. The step's result (None: no step, or a hunk that did not apply)."""
    async with w.lock:
        if not w.busy:
            return None
        reason = budget.spent(w.name)
        if reason:
            w.stopped = reason
            report.notes.append(reason)
            return None
        step = w.queue.popleft()
        budget.charge(w.name)
        w.steps += 1
        w.begun.add(step.feature)
        for m in w.scope.take_messages():
            report.notes.append(f"{w.name} got a note from {m.sender}: {m.text}")
        result = await run_oracle_step(w.scope, step, report, coord)
        if result is None and w.reordered:
            report.notes.append(f"{w.name}: {step.describe()} did not apply after a "
                                "handoff; starting over in agent order")
            await w.rebuild()
    if result is not None and result.blocked:
        w.lost.append(step)
    return result


def receiver(w: OracleWorker, workers: Sequence[OracleWorker], reason: str
             ) -> OracleWorker | None:
    """Who takes `w`'s features when the guard blocked its hunk for `reason`: the agent
    the reason names as the owner of the conflicting lines, or, when that one has
    handed its own on, the agent holding them now (`handed_to`, followed); else the
    first other agent still working. None when nobody is."""
    by_name = {o.name: o for o in workers}
    # The longest name first: agent1 is a prefix of agent10.
    owner = next((o for o in sorted(workers, key=lambda o: -len(o.name))
                  if o is not w and re.search(re.escape(o.name) + r"(?![\w.-])", reason)),
                 None)
    seen: set[str] = set()
    while owner is not None and owner.stopped is not None and owner.name not in seen:
        seen.add(owner.name)
        owner = by_name.get(owner.handed_to or "")
    if owner is not None and owner is not w and owner.stopped is None:
        return owner
    return next((o for o in workers if o is not w and o.stopped is None), None)


async def guard_handoff(w: OracleWorker, other: OracleWorker, budget: PairBudget,
                        report: AgentReport) -> None:
    """The conflict-guard oracle's own handoff (module doc): `w` rewound and stopped,
    its features and the unspent part of its share of the budget to `other`, told by a
    message. (The steps a rewind undid stay spent: a rebuild's repeated hunks are
    steps too.)"""
    given = list(w.held)
    w.held = []
    w.queue.clear()
    w.lost.clear()
    w.stopped = "handed off"
    w.handed_to = other.name
    await _clear(w)
    ids = ", ".join(str(f.id) for _, f in given)
    await w.scope.send(other.name, f"handoff: feature(s) {ids} are yours")
    other.take(given)
    budget.transfer(w.name, other.name)
    report.handoffs += 1
    report.handed_off.append(w.name)
