"""A team over HTTP: `CorralClient.create_team`, `teams`, and `CorralClient.team(scope,
team)`, a `TeamClient` acting as the member whose scope it names (the token must act on
that scope), with the same operations as `TeamMember` in process::

    async with CorralClient(url, token=admin) as corral:
        await corral.create_team("dev", ["lead", "ui"], lead="lead")
        ui = corral.with_token(ui_token).team("ui", "dev")
        t = (await ui.add("build the form")).task
        if (await ui.claim(t.id)).won: ...

A blocked operation is a `TeamResultOut` with `ok` False and the reason; one the team's
rules refuse raises `TeamError`, as in process.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

from .records._team import PadFile, Request, Response, Task
from .records._team_wire import (
    PadFilesOut,
    PadReadOut,
    RequestsOut,
    TasksOut,
    TeamOut,
    TeamResultOut,
    WaitOut,
)
from .records._wire import NamesOut, b64

__all__ = ["TeamCalls", "TeamClient"]

M = TypeVar("M", bound=BaseModel)


class _Caller(Protocol):
    async def _call(self, model: type[M], method: str, path: str, body: Any = None,
                    params: Any = None) -> M: ...


class TeamCalls:
    """The team calls of `CorralClient` (a mixin over its `_call`)."""

    async def _call(self, model: type[M], method: str, path: str, body: Any = None,
                    params: Any = None) -> M:
        raise NotImplementedError

    async def create_team(self, name: str, members: list[str], *, lead: str | None = None
                          ) -> TeamOut:
        """Make team `name` of scopes `members` led by `lead` (default the first). Admin."""
        return await self._call(TeamOut, "POST", "/v1/teams",
                                {"name": name, "members": members, "lead": lead})

    async def teams(self) -> list[str]:
        """The teams' names (admin)."""
        return (await self._call(NamesOut, "GET", "/v1/teams")).names

    def team(self, scope: str, team: str) -> TeamClient:
        """Team `team` as the member whose scope is `scope`."""
        return TeamClient(self, scope, team)


class TeamClient:
    """Team `team` over HTTP as the member whose scope is `scope`."""

    def __init__(self, client: _Caller, scope: str, team: str) -> None:
        self.client, self.scope, self.team = client, scope, team
        self._base = f"/v1/scopes/{quote(scope, safe='')}/teams/{quote(team, safe='')}"

    async def _do(self, path: str, body: dict[str, Any]) -> TeamResultOut:
        return await self.client._call(TeamResultOut, "POST", self._base + path, body)

    async def info(self) -> TeamOut:
        return await self.client._call(TeamOut, "GET", self._base)

    # -- the task list --------------------------------------------------------------

    async def tasks(self) -> list[Task]:
        return (await self.client._call(TasksOut, "GET", self._base + "/tasks")).tasks

    async def add(self, title: str, *, detail: str = "", assignee: str | None = None,
                  cause: str | None = None) -> TeamResultOut:
        return await self._do("/tasks", {"title": title, "detail": detail,
                                         "assignee": assignee, "cause": cause})

    async def _task(self, task: str, op: str, note: str, cause: str | None) -> TeamResultOut:
        return await self._do(f"/tasks/{quote(task, safe='')}/{op}",
                              {"note": note, "cause": cause})

    async def claim(self, task: str, *, cause: str | None = None) -> TeamResultOut:
        return await self._task(task, "claim", "", cause)

    async def complete(self, task: str, note: str = "", *, cause: str | None = None
                       ) -> TeamResultOut:
        return await self._task(task, "complete", note, cause)

    async def release(self, task: str, note: str = "", *, cause: str | None = None
                      ) -> TeamResultOut:
        return await self._task(task, "release", note, cause)

    async def block(self, task: str, note: str, *, cause: str | None = None) -> TeamResultOut:
        return await self._task(task, "block", note, cause)

    # -- the scratchpad ---------------------------------------------------------------

    async def files(self) -> list[PadFile]:
        return (await self.client._call(PadFilesOut, "GET", self._base + "/pad")).files

    async def read(self, path: str) -> bytes:
        got = await self.client._call(PadReadOut, "GET", self._base + "/pad/file",
                                      params={"path": path})
        return got.content_b64

    async def write(self, path: str, data: bytes, *, force: bool = False,
                    cause: str | None = None) -> TeamResultOut:
        return await self._do("/pad/write", {"path": path, "force": force, "cause": cause,
                                             "content_b64": b64(data).decode("ascii")})

    async def delete(self, path: str, *, force: bool = False, cause: str | None = None
                     ) -> TeamResultOut:
        return await self._do("/pad/delete", {"path": path, "force": force, "cause": cause})

    # -- typed requests ---------------------------------------------------------------

    async def requests(self, *, mine: bool = False) -> list[Request]:
        """The team's requests (`mine`: the unanswered ones addressed to this member)."""
        return (await self.client._call(RequestsOut, "GET", self._base + "/requests",
                                        params={"mine": "true"} if mine else None)).requests

    async def request(self, to: str, kind: str, body: str, *, cause: str | None = None
                      ) -> TeamResultOut:
        return await self._do("/requests", {"to": to, "kind": kind, "body": body,
                                            "cause": cause})

    async def respond(self, request: str, body: str, *, cause: str | None = None
                      ) -> TeamResultOut:
        return await self._do(f"/requests/{quote(request, safe='')}/respond",
                              {"body": body, "cause": cause})

    async def wait(self, request: str, timeout: float = 30.0) -> Response | None:
        """The response to `request`, waiting up to `timeout` seconds (at most 600)."""
        got = await self.client._call(WaitOut, "POST",
                                      f"{self._base}/requests/{quote(request, safe='')}/wait",
                                      {"timeout": timeout})
        return got.response
