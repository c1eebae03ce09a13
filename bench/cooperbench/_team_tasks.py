"""The team settings' shared state (`team`, `supervised-team`): a Corral team of the
unit's agents, its task list and its scratchpad, as CooperBench 0.0.2x's team setting
has them.

The unit's agents (`agent1`..`agentN`) are one team, `agent1` its lead
(`Coordinator.create_team`). Before anyone works, the lead adds one task per feature of
the unit, in agent order (its effects, on its branch: the harness does this as the lead,
the same for every agent, so the plan is not a model's choice). Then each member claims
a task (atomically: of members claiming one task, one wins; the loser takes the next
open one), works on it, writes what it did to the scratchpad (`notes/<member>.md`) and
completes it with a note. The oracle does that by hand (`oracle_setup`, `oracle_done`);
a model agent is given the team (`AgentContext.team`: the task list and scratchpad as
tools) and a task text that asks it to (`team_text`).

Everything here is effects on the members' branches, so a rewind takes a member's part
of the team state with it: an oracle's rewinds go back to its head after the setup
(`OracleWorker.base`), which keeps the task list and its claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from coordinator import Coordinator, Scope, Team

from ._agent_report import TeamRecord
from ._dataset import Feature

if TYPE_CHECKING:
    from ._oracle_team import OracleWorker

__all__ = ["NOTES", "claim_first", "make_team", "oracle_done", "oracle_handoff",
           "oracle_setup", "team_record", "team_text", "title"]

NOTES = "notes/{member}.md"
"""The scratchpad file a member writes its notes to."""


def title(feature: Feature) -> str:
    """The task's title for `feature`."""
    first = feature.description.strip().splitlines()[0] if feature.description else ""
    return f"feature {feature.id}: {first.lstrip('# ').strip()}"[:200]


def team_name(coord: Coordinator, scopes: Sequence[Scope]) -> str:
    """The unit's team name: its agents' common prefix + `.team` (`…-2` when taken)."""
    base = scopes[0].name.rpartition(".")[0] + ".team"
    taken = set(coord.teams())
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}-{k}"
    return name


async def make_team(coord: Coordinator, scopes: Sequence[Scope],
                    features: Sequence[Feature]) -> tuple[Team, list[str]]:
    """The unit's team (its lead: the first agent) and its task list, one task per
    feature in agent order, added by the lead; the tasks' ids."""
    team = await coord.create_team(team_name(coord, scopes), list(scopes), lead=scopes[0])
    lead = team.member(scopes[0].name)
    ids = []
    for f in features:
        done = await lead.add(title(f), detail=f.description.strip())
        if done.task is None:
            raise RuntimeError(f"the lead could not add the task of feature {f.id}: "
                               f"{done.reason}")
        ids.append(done.task.id)
    return team, ids


async def claim_first(team: Team, member: str, ids: Sequence[str]) -> str | None:
    """`member` claims the first of `ids` it wins; None when every one is taken."""
    me = team.member(member)
    for task in ids:
        done = await me.claim(task)
        if done.won:
            return task
    return None


async def oracle_setup(coord: Coordinator, scopes: Sequence[Scope],
                       features: Sequence[Feature]) -> list[OracleWorker]:
    """The oracles of a team unit: the team and its tasks made, each member (in agent
    order) claiming the first open task, whose feature it then applies."""
    from agents.team_tools import LocalTeam

    from ._oracle_team import OracleWorker

    team, ids = await make_team(coord, scopes, features)
    workers = []
    for s in scopes:
        task = await claim_first(team, s.name, ids)
        if task is None:
            raise RuntimeError(f"{s.name} found no open task")
        rank = ids.index(task)
        w = OracleWorker(s, features[rank], rank)
        w.team = LocalTeam(team.member(s.name))
        w.tasks = [task]
        w.base = s.head
        workers.append(w)
    return workers


async def oracle_handoff(w: OracleWorker, taker: OracleWorker, reason: str) -> None:
    """The team's side of a guard handoff (after `guard_handoff`): `w` releases its
    tasks with a note saying why (claiming each again first, as `oracle_done` does),
    `taker` claims them, and `w` notes it in the scratchpad."""
    if w.team is None or taker.team is None:
        return
    note = f"handed to {taker.name}: {reason}"[:500]
    for task in w.tasks:
        await w.team.claim(task)  # again: a rebuild's rewind took out a later claim
        await w.team.release(task, note)
        if (await taker.team.claim(task)).won:
            taker.tasks.append(task)
    await _note(w, f"Handed feature(s) to {taker.name}; the conflict guard said: {reason}")
    w.tasks = []


async def oracle_done(workers: Sequence[OracleWorker]) -> None:
    """Each oracle that still holds tasks writes its notes to the scratchpad and
    completes them (claiming each again first: a rebuild's rewind took out a claim it
    made after its setup)."""
    for w in workers:
        if w.team is None or not w.tasks:
            continue
        feats = ", ".join(str(f.id) for _, f in w.held) or "none"
        status = "lost steps" if w.lost else "every hunk applied"
        text = f"Applied the gold patch of feature(s) {feats}: {status}."
        await _note(w, text)
        for task in w.tasks:
            await w.team.claim(task)
            await w.team.complete(task, text)


async def _note(w: OracleWorker, text: str) -> None:
    assert w.team is not None
    await w.team.write(NOTES.format(member=w.team.member), (text + "\n").encode())


def team_text(features: Sequence[Feature], member: str, lead: str,
              ids: Sequence[str]) -> str:
    """A model agent's task text in a team unit: the task list (one task per feature,
    its description) and what a member does with it."""
    tasks = "\n\n".join(f"## Task {t}: {title(f)}\n\n{f.description.strip()}\n\n---"
                        for t, f in zip(ids, features, strict=True))
    return (f"Your team (led by {lead}) implements the features below in one repository, "
            "one member per feature, in parallel; the members' changes are merged. The "
            f"team's task list holds one task per feature:\n\n{tasks}\n\n"
            "Claim one open task (task_claim: only one member gets each; if you do not, "
            "claim another), implement that feature only, write what you changed and "
            f"anything a teammate must know to the scratchpad (pad_write "
            f"{NOTES.format(member=member)}; read the others' notes with pad_list and "
            "pad_read), complete the task with a note (task_complete), then finish.")


async def team_record(coord: Coordinator, scope: Scope) -> TeamRecord:
    """The `PairResult` fields of a team unit as it ended (its first agent's team):
    `team_tasks` (`id status owner: title` each) and `team_notes` (the scratchpad,
    path -> text)."""
    teams = coord.teams_of(scope)
    if not teams:
        return TeamRecord()
    team = teams[-1]
    tasks = tuple(f"{t.id} {t.status} {t.owner or '-'}: {t.title}" for t in await team.tasks())
    notes = {}
    for f in await team.files():
        data = await team.member(team.lead).read(f.path)
        notes[f.path] = data.decode(errors="replace")[:4000]
    return TeamRecord(team_tasks=tasks, team_notes=notes)
