"""What a pair's agents came to, bench-side: the counts of each `agents.AgentResult`
summed over the team, and what only the bench records (notes, handoffs, the team's
fields of the `PairResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from agents import AgentResult

__all__ = ["AgentReport", "TeamRecord"]


class TeamRecord(TypedDict, total=False):
    """Fields of the pair's `PairResult` the team sets (its budget, messaging, the
    supervisor's and the resolver's share)."""

    max_steps: int
    max_tokens: int | None
    messaging: bool
    supervisor: str
    supervisor_tokens: int
    supervisor_actions: tuple[str, ...]
    resolved: tuple[str, ...]
    resolver_tokens: int
    team_tasks: tuple[str, ...]
    team_notes: dict[str, str]


@dataclass
class AgentReport:
    status: str = "finished"
    steps: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    blocked: int = 0
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    handoffs: int = 0
    handed_off: list[str] = field(default_factory=list)
    """The agents (scope names) that handed their work to another: a giver ends
    with nothing of its own, on purpose."""
    record: TeamRecord = field(default_factory=lambda: TeamRecord())
    """Fields of the pair's result set by the team (budget, messaging, supervisor)."""

    @classmethod
    def of(cls, result: AgentResult) -> AgentReport:
        """The counts of one agent's run."""
        return cls(status=result.status, steps=result.steps,
                   prompt_tokens=result.prompt_tokens, cached_tokens=result.cached_tokens,
                   completion_tokens=result.completion_tokens, blocked=result.blocked,
                   error=result.error)

    def add(self, other: AgentReport) -> None:
        """Count `other` (a teammate's report) into this one."""
        self.steps += other.steps
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        self.completion_tokens += other.completion_tokens
        self.blocked += other.blocked
        self.handoffs += other.handoffs
        self.handed_off.extend(other.handed_off)
        self.notes.extend(other.notes)
        if other.error:
            self.error = (self.error + "; " if self.error else "") + other.error
        if other.status != "finished" and self.status == "finished":
            self.status = other.status
