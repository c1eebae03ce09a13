"""The HTTP API's wire records for a team's shared state: making a team, its task list,
its scratchpad and its typed requests. The state's values (`Task`, `PadFile`,
`Request`, `Response`) travel as they are; file contents as base64, as elsewhere."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, field_validator

from ._team import PadFile, Request, Response, Task
from ._wire import (
    Base64,
    Cause,
    RelPath,
    ResultOut,
    ScopeName,
    _components_fit,
    _Request,
    _Response,
)

__all__ = [
    "PadDeleteRequest",
    "PadFilesOut",
    "PadReadOut",
    "PadWriteRequest",
    "RequestsOut",
    "RespondRequest",
    "TaskAddRequest",
    "TaskNoteRequest",
    "TasksOut",
    "TeamCreateRequest",
    "TeamOut",
    "TeamRequestRequest",
    "TeamResultOut",
    "WaitOut",
    "WaitRequest",
]

Text = Annotated[str, StringConstraints(max_length=100_000)]
Line = Annotated[str, StringConstraints(max_length=2_000)]
WAIT_MAX_S = 600.0
"""The longest one wait request may hold its connection."""


class TeamCreateRequest(_Request):
    name: ScopeName
    members: Annotated[list[ScopeName], Field(min_length=1, max_length=1024)]
    """The member scopes (live ones); their member names are their scope names."""
    lead: ScopeName | None = None
    """The lead, one of the members (default: the first)."""


class TaskAddRequest(_Request):
    title: Line
    detail: Text = ""
    assignee: ScopeName | None = None
    """The member expected to claim it (only they may, until it is released)."""
    cause: Cause = None


class TaskNoteRequest(_Request):
    """claim, complete, release, block: a note (block needs one), and the cause."""

    note: Text = ""
    cause: Cause = None


class _PadPath(_Request):
    path: RelPath
    """A path in the scratchpad (relative; no `..`)."""
    force: bool = False
    """Write over whatever is there (default: only on the version this member last saw)."""
    cause: Cause = None

    @field_validator("path")
    @classmethod
    def _fits(cls, v: str) -> str:
        return _components_fit(v)


class PadWriteRequest(_PadPath):
    content_b64: Base64


class PadDeleteRequest(_PadPath):
    pass


class TeamRequestRequest(_Request):
    to: ScopeName
    """The member asked (its member name or its scope's)."""
    kind: Line
    """What it asks: a word the team agrees on (review, plan, ...)."""
    body: Text
    cause: Cause = None


class RespondRequest(_Request):
    body: Text
    cause: Cause = None


class WaitRequest(_Request):
    timeout: Annotated[float, Field(ge=0, le=WAIT_MAX_S)] = 30.0
    """Seconds to wait for the response (at most 600)."""


class TeamOut(_Response):
    name: str
    lead: str
    members: dict[str, str]
    """Member name -> scope name."""
    origin: str | None = None
    """The team it was forked from, if any."""


class TasksOut(_Response):
    tasks: list[Task]


class PadFilesOut(_Response):
    files: list[PadFile]


class PadReadOut(_Response):
    file: PadFile
    content_b64: Base64


class RequestsOut(_Response):
    requests: list[Request]


class WaitOut(_Response):
    response: Response | None
    """None: no response within the timeout."""


class TeamResultOut(ResultOut):
    """What became of one team operation: the effect, and what it changed."""

    task: Task | None = None
    won: bool | None = None
    """A claim: whether this member got the task."""
    file: PadFile | None = None
    request: Request | None = None

    @property
    def blocked(self) -> bool:
        """The policy chain blocked the operation (`reason` says why)."""
        return self.status == "blocked"
