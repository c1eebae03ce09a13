"""A team, and one member of it acting on the team's state: the operations, each an
effect on the member's own branch (see `_team_state`), and its reads of the scratchpad.

    me = team.member("ui")                        # or scope.team()
    t = (await me.add("build the form")).task      # every member may add tasks
    if (await me.claim(t.id)).won: ...             # exactly one claimer wins
    await me.complete(t.id, note="done, see form.py")
    await me.write("notes/ui.md", b"the form posts to /api/form\\n")
    r = (await me.request("lead", "review", "is form.py right?")).request
    answer = await me.wait(r.id, timeout=60)       # the lead's `respond(r.id, ...)`

A blocked operation is a result (`TeamResult.blocked`, `.reason`); an operation the
team's rules refuse raises `TeamError` (after recording it as a failed effect).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..records._effects import Message, TaskOp, TeamTask, TeamWrite
from ..records._errors import NotFound, TeamError
from ..records._events import Event
from ..records._paths import check_path
from ..records._team import PadFile, Request, Response
from ._effect_path import INLINE_BYTES
from ._team_state import MemberScope, TeamResult, TeamState

__all__ = ["Team", "TeamMember", "Teams"]


class Team(TeamState):
    """A named team of member scopes with a lead, and its shared state (`tasks`,
    `files`, `read`, `requests`). Get one from `Coordinator.create_team` or
    `Coordinator.team`; act as a member with `member(name)` (or `Scope.team()`)."""

    def member(self, name: str) -> TeamMember:
        """Act as member `name` (a member's name, or its scope's). Raises NotFound."""
        return TeamMember(self, self.member_name(name))


class Teams(dict[str, Team]):
    """The coordinator's teams by name; `moved` (an event listener) keeps each team's
    state derived from its members' branches as they move."""

    def moved(self, event: Event) -> None:
        """Called with every event, synchronously (`EventBus.listen`)."""
        e = event.effect
        if event.type != "effect" or e.kind not in ("scope.rewind", "scope.fork",
                                                   "scope.discard"):
            return
        for team in self.values():
            team.moved(e)

    def of(self, scope: str) -> Iterator[Team]:
        """The teams scope `scope` is a member of."""
        return (t for t in self.values() if scope in t.info.members.values())


class TeamMember:
    """Team `team` as member `name` sees and changes it."""

    def __init__(self, team: Team, name: str) -> None:
        self.team = team
        self.name = name

    def __repr__(self) -> str:
        return f"<TeamMember {self.name} of {self.team.name}>"

    @property
    def scope(self) -> MemberScope:
        """The member's live scope, a `Scope` (its branch records its operations)."""
        return self.team.scope(self.name)

    @property
    def lead(self) -> bool:
        return self.name == self.team.lead

    # -- the task list --------------------------------------------------------------

    async def add(self, title: str, *, detail: str = "", assignee: str | None = None,
                  cause: str | None = None) -> TeamResult:
        """Add an open task (`assignee`, a member, is the one expected to claim it: only
        they may while it is open). Returns the result; `.task` is the new task."""
        await self.team.fresh()  # the next id is past every one the branches hold
        who = self._known(assignee) if assignee is not None else None
        intent = TeamTask(team=self.team.name, op="add", task=self.team.next_id("t"),
                          title=title, detail=detail, assignee=who)
        return await self._task(intent, cause)

    async def claim(self, task: str, *, cause: str | None = None) -> TeamResult:
        """Claim task `task`: `.won` says whether you got it (of members claiming it at
        once, exactly one does); `.task.owner` is who has it. Raises TeamError for a
        task that does not exist."""
        return await self._task(self._op("claim", task), cause)

    async def complete(self, task: str, note: str = "", *, cause: str | None = None
                       ) -> TeamResult:
        """Mark your task done. Raises TeamError unless you own it."""
        return await self._task(self._op("complete", task, note), cause)

    async def release(self, task: str, note: str = "", *, cause: str | None = None
                      ) -> TeamResult:
        """Give a task back (open, owned by and assigned to nobody): its owner or the lead
        may. Raises TeamError otherwise."""
        return await self._task(self._op("release", task, note), cause)

    async def block(self, task: str, note: str, *, cause: str | None = None) -> TeamResult:
        """Mark your task blocked, saying by what (`note`); claiming it again resumes it.
        Raises TeamError unless you own it."""
        return await self._task(self._op("block", task, note), cause)

    def _known(self, name: str) -> str:
        """The member `name` names, or `name` itself (refused then by the team's rules,
        as a failed effect)."""
        try:
            return self.team.member_name(name)
        except NotFound:
            return name

    def _op(self, op: TaskOp, task: str, note: str = "") -> TeamTask:
        return TeamTask(team=self.team.name, op=op, task=task, detail=note)

    async def _task(self, intent: TeamTask, cause: str | None) -> TeamResult:
        result, op = await self.team.perform(self.name, intent, cause=cause)
        if op is None:
            return TeamResult(result)
        assert isinstance(op.intent, TeamTask)
        return TeamResult(result, task=self.team.board.tasks.get(op.intent.task),
                          won=op.outcome.won)

    # -- the scratchpad ---------------------------------------------------------------

    async def read(self, path: str) -> bytes:
        """Scratchpad file `path` (remembered as the version you saw: your next write of
        it is made on it). Raises FileNotFoundError, PathError."""
        path = check_path(path)
        await self.team.fresh()
        found = self.team.file(path)
        self.team.saw(self.name, path, found.blob if found is not None else None)
        if found is None:
            raise FileNotFoundError(f"no file {path!r} in team {self.team.name!r}'s "
                                    "scratchpad")
        return await self.team.rt.io(self.team.rt.trace.blob, found.blob)

    async def write(self, path: str, data: bytes, *, force: bool = False,
                    cause: str | None = None) -> TeamResult:
        """Write scratchpad file `path`, on the version you last saw (read or wrote):
        when another member wrote it since, the conflict guard merges your change into
        theirs (or blocks it) and without the guard the write raises TeamError. `force`
        writes over whatever is there. Returns the result; `.file` is the file now."""
        path = check_path(path)
        trace = self.team.rt.trace
        data = bytes(data)
        blob = (trace.write_blob(data) if len(data) <= INLINE_BYTES
                else await self.team.rt.io(trace.write_blob, data))
        return await self._write(path, blob, force, cause)

    async def delete(self, path: str, *, force: bool = False, cause: str | None = None
                     ) -> TeamResult:
        """Delete scratchpad file `path` (as `write`, on the version you saw)."""
        return await self._write(check_path(path), None, force, cause)

    async def _write(self, path: str, blob: str | None, force: bool, cause: str | None
                     ) -> TeamResult:
        await self.team.fresh()
        current = self.team.file(path)
        base = (current.blob if current is not None else None) if force else \
            self.team.seen(self.name, path)
        intent = TeamWrite(team=self.team.name, path=path, blob=blob, base=base)
        result, op = await self.team.perform(self.name, intent, cause=cause)
        if op is None:
            return TeamResult(result)
        assert isinstance(op.intent, TeamWrite)
        self.team.saw(self.name, path, op.intent.blob)
        now: PadFile | None = self.team.file(path)
        return TeamResult(result, file=now)

    # -- typed requests ---------------------------------------------------------------

    async def request(self, to: str, kind: str, body: str, *, cause: str | None = None
                      ) -> TeamResult:
        """Ask member `to` something typed (`kind`: review, plan, ...): a message into its
        inbox carrying a request id. Returns the result; `.request` is the request (its
        `.id` is what `wait` and the recipient's `respond` take)."""
        await self.team.fresh()
        member = self._known(to)
        intent = Message(to=self.team.members.get(member, member), text=body,
                         sender=self.scope.name, team=self.team.name,
                         request=self.team.next_id("r"), request_kind=kind)
        return await self._message(intent, cause)

    async def respond(self, request: str, body: str, *, cause: str | None = None
                      ) -> TeamResult:
        """Answer request `request` (addressed to you): a message into the requester's
        inbox. Raises TeamError for a request not yours, or answered already."""
        await self.team.fresh()
        found = self.team.board.requests.get(request)
        if found is None:
            raise TeamError(f"no request {request} in team {self.team.name!r}")
        intent = Message(to=self.team.members[found.sender], text=body,
                         sender=self.scope.name, team=self.team.name, reply_to=request)
        return await self._message(intent, cause)

    async def _message(self, intent: Message, cause: str | None) -> TeamResult:
        result, op = await self.team.perform(self.name, intent, cause=cause)
        if op is None:
            return TeamResult(result)
        assert isinstance(op.intent, Message)
        rid = op.intent.request or op.intent.reply_to
        return TeamResult(result, request=self.team.board.requests.get(rid or ""))

    async def requests(self) -> list[Request]:
        """The requests addressed to you that are not answered yet, oldest first."""
        return await self.team.requests(to=self.name, open_only=True)

    async def wait(self, request: str, timeout: float | None = None) -> Response | None:
        """The response to your request `request`, waiting up to `timeout` seconds (None:
        no limit) for it; None when none came. The response's message is taken out of
        your inbox (you have it here). Raises NotFound for an unknown request."""
        response = await self.team.wait(request, timeout)
        if response is not None:
            scope = self.scope
            scope.inbox[:] = [m for m in scope.inbox if m.reply_to != request
                              or m.team != self.team.name]
        return response
