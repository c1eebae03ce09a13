"""A team's shared state as values: its tasks, its scratchpad's files, its requests.

These are what the team's operations (`team.task`, `team.write` and typed `message`
effects on the members' branches) add up to; `scopes._team_board` folds them. Plain
frozen dataclasses: the HTTP API's wire records carry them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ._effects import Effect, Intent

__all__ = ["PadFile", "Request", "Response", "Task", "TaskStatus", "TeamInfo", "carried_out"]

TaskStatus = Literal["open", "in_progress", "blocked", "done"]
"""open: nobody has it (it may be assigned to someone, who alone may claim it).
in_progress: its owner works on it. blocked: its owner is stuck (see its note).
done: its owner completed it."""


@dataclass(frozen=True, slots=True)
class Task:
    """One task of a team's task list."""

    id: str
    title: str
    detail: str
    status: TaskStatus
    owner: str | None
    """The member who claimed it (None while open)."""
    assignee: str | None
    """The member the task was added for: only they may claim it while it is open."""
    created_by: str
    note: str
    """The last note its owner left (on complete, release or block)."""
    effect: str
    """The id of the effect that last changed it."""


@dataclass(frozen=True, slots=True)
class PadFile:
    """One file of a team's scratchpad, as its last write left it."""

    path: str
    blob: str
    """The trace blob holding its content."""
    member: str
    """The member whose write it is."""
    effect: str


@dataclass(frozen=True, slots=True)
class Response:
    """The answer to a typed request."""

    request: str
    sender: str
    """The member who answered (the request's recipient)."""
    body: str
    effect: str


@dataclass(frozen=True, slots=True)
class Request:
    """A typed request from one member to another, and its response once there is one."""

    id: str
    sender: str
    to: str
    kind: str
    body: str
    effect: str
    response: Response | None = None


@dataclass(frozen=True, slots=True)
class TeamInfo:
    """A team: its name, its lead and its members (member name -> scope name)."""

    name: str
    lead: str
    members: dict[str, str]
    origin: str | None = None
    """The team this one was forked from (`Coordinator.fork_team`): its operations before
    the cut are this team's too."""


def carried_out(effect: Effect) -> Intent:
    """The intent an effect carried out: the policy chain's rewrite of it, if any."""
    d = effect.decision
    if d is not None and d.verdict == "rewrite" and d.rewritten is not None:
        return d.rewritten
    return effect.intent
