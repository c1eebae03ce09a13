"""What an agent of a pair is given and what it reports: the seam between the unit
(`_units`, `_team`) and the agents (`_oracle`, `_agents`).

A pair agent has a `name` and an async `run(job) -> AgentReport`; `AgentOptions` is
what `--agent`, `--model` and `--base-url` say, handed to agent factories.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TypedDict, runtime_checkable

from coordinator import Coordinator, Scope

from ._dataset import Feature

__all__ = ["Agent", "AgentOptions", "AgentReport", "Job", "TeamRecord", "task_text"]


@dataclass(frozen=True, slots=True)
class Job:
    """One agent's work in a pair: what a plug-in agent receives."""

    coord: Coordinator
    scope: Scope
    role: str
    """agent1, agent2 or solo."""
    features: tuple[Feature, ...]
    text: str
    """The task as the agent reads it (the feature.md texts)."""
    teammates: tuple[str, ...] = ()
    messaging: bool = True
    max_steps: int = 30
    max_tokens: int | None = None




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
    record: TeamRecord = field(default_factory=lambda: TeamRecord())
    """Fields of the pair's result set by the team (budget, messaging, supervisor)."""

    def add(self, other: AgentReport) -> None:
        """Count `other` (a teammate's report) into this one."""
        self.steps += other.steps
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        self.completion_tokens += other.completion_tokens
        self.blocked += other.blocked
        self.handoffs += other.handoffs
        self.notes.extend(other.notes)
        if other.error:
            self.error = (self.error + "; " if self.error else "") + other.error
        if other.status != "finished" and self.status == "finished":
            self.status = other.status


@runtime_checkable
class Agent(Protocol):
    name: str

    async def run(self, job: Job) -> AgentReport: ...


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """What `--agent`, `--model` and `--base-url` say, handed to agent factories."""

    model: str | None = None
    base_url: str | None = None
    retries: int = 4


def task_text(features: tuple[Feature, ...], role: str, teammates: tuple[str, ...],
              messaging: bool) -> str:
    """The prompt text: one feature.md, or (solo) each as `## Feature i … ---`."""
    if len(features) == 1:
        text = features[0].description.strip()
    else:
        text = "\n\n".join(f"## Feature {i}\n\n{f.description.strip()}\n\n---"
                           for i, f in enumerate(features, 1))
    if teammates and messaging:
        text += ("\n\nAnother agent implements a different feature of the same repository in "
                 f"parallel ({', '.join(teammates)}); your changes are merged with theirs. "
                 "Use send_message to coordinate.")
    return text

