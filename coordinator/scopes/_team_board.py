"""A team's board: its task list, scratchpad and requests, and the rules of changing them.

The board is a fold: the team's operations, taken from its members' branches in the
team's order (`TeamOutcome.seq`), each applied if the rules allow it in the state the
ones before left. At the moment an operation is carried out, `check` says whether the
rules allow it (a `TeamError` says why not) and, for a claim, whether it wins; replayed
from the branches, `apply` takes it again. When every operation is there (the live
team, a reopened state, a team rewound or forked at a cut) the fold gives back the
state as it was; when a member alone was rewound past some of its operations, the
state is as if they had never been, and a later operation that needed them (a
`complete` of a task whose claim was rewound) is skipped.

The rules, by operation (the acting member is "you"):

- add: a new id; an assignee must be a member.
- claim: you win an open task nobody owns that is assigned to nobody or to you; a task
  you own already is yours again (a blocked one goes back in progress). You lose one
  somebody else owns, one assigned to somebody else, or one that is done. Losing is an
  answer (`won` False), not an error.
- complete, block: only the owner; complete ends it (done), block marks it blocked.
- release: the owner or the lead; the task is open again, owned by and assigned to nobody.
- a scratchpad write lands only on the file as the writer saw it (`base`).
- a request goes to another member; a response answers an open request addressed to you.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from ..records._effects import Message, TeamOutcome, TeamTask, TeamWrite
from ..records._errors import TeamError
from ..records._team import PadFile, Request, Response, Task

__all__ = ["Board", "Op", "TeamIntent"]

TeamIntent = TeamTask | TeamWrite | Message


@dataclass(frozen=True, slots=True)
class Op:
    """One team operation as a branch records it."""

    seq: int
    """The team-wide order (`TeamOutcome.seq`)."""
    member: str
    """The member who did it."""
    to: str | None
    """For a request or a response: the member it went to."""
    scope: str
    """The scope whose branch recorded it (its effect's scope)."""
    scope_seq: int
    """Its effect's seq on that scope."""
    effect: str
    commit: str
    intent: TeamIntent
    """As carried out (a policy's rewrite of it, if any)."""
    outcome: TeamOutcome


def _number(ident: str, prefix: str) -> int:
    return int(ident[1:]) if ident.startswith(prefix) and ident[1:].isdigit() else 0


class Board:
    """The state of one team (see the module docstring)."""

    def __init__(self, lead: str, members: Collection[str]) -> None:
        self.lead = lead
        self.members = frozenset(members)
        self.tasks: dict[str, Task] = {}
        self.files: dict[str, PadFile] = {}
        self.requests: dict[str, Request] = {}

    # -- the rules ----------------------------------------------------------------

    def check(self, member: str, intent: TeamIntent, to: str | None = None) -> TeamOutcome:
        """Whether `member` may do `intent` now: the outcome it would have (seq 0: the
        caller numbers it). Raises TeamError with the reason when the rules refuse it."""
        match intent:
            case TeamTask():
                _, won, owner = self._task_change(member, intent)
                return TeamOutcome(seq=0, won=won, owner=owner)
            case TeamWrite():
                current = self.files.get(intent.path)
                now = current.blob if current is not None else None
                if now != intent.base:
                    who = f"by {current.member} (effect {current.effect})" if current else ""
                    state = "was deleted" if current is None else f"was written {who}"
                    raise TeamError(f"scratchpad file {intent.path!r} {state} since you "
                                    "last read it: read it again, then write")
                if current is None and intent.blob is None:
                    raise TeamError(f"no scratchpad file {intent.path!r}")
                return TeamOutcome(seq=0)
            case Message():
                self._message_check(member, intent, to)
                return TeamOutcome(seq=0)

    def _task_change(self, member: str, i: TeamTask) -> tuple[Task | None, bool | None,
                                                               str | None]:
        """The task as `i` leaves it (None: unchanged), and for a claim (won, owner)."""
        task = self.tasks.get(i.task)
        if i.op == "add":
            if task is not None:
                raise TeamError(f"task {i.task} exists already")
            if not i.title.strip():
                raise TeamError("a task needs a title")
            if i.assignee is not None and i.assignee not in self.members:
                raise TeamError(f"{i.assignee!r} is not a member of the team "
                                f"(members: {', '.join(sorted(self.members))})")
            return Task(i.task, i.title, i.detail, "open", None, i.assignee, member, "",
                        ""), None, None
        if task is None:
            raise TeamError(f"no task {i.task} in the team's task list")
        if i.op == "claim":
            return self._claim(member, task)
        if i.op == "release":
            if member not in (task.owner, self.lead):
                raise TeamError(f"task {task.id} is {self._whose(task)}: only its owner or "
                                f"the lead ({self.lead}) may release it")
            if task.status == "done":
                raise TeamError(f"task {task.id} is done: there is nothing to release")
            return replace(task, status="open", owner=None, assignee=None,
                           note=i.detail), None, None
        if task.owner != member:
            raise TeamError(f"task {task.id} is {self._whose(task)}: only its owner may "
                            f"{i.op} it" + (" (claim it first)" if task.owner is None else ""))
        if task.status == "done":
            raise TeamError(f"task {task.id} is done already")
        if i.op == "block":
            if not i.detail.strip():
                raise TeamError("say what blocks the task (a note)")
            return replace(task, status="blocked", note=i.detail), None, None
        return replace(task, status="done", note=i.detail), None, None

    def _claim(self, member: str, task: Task) -> tuple[Task | None, bool, str | None]:
        if task.owner == member and task.status != "done":
            resumed = replace(task, status="in_progress") if task.status == "blocked" else None
            return resumed, True, member
        if task.status == "done" or task.owner is not None:
            return None, False, task.owner
        if task.assignee not in (None, member):
            return None, False, task.assignee
        return replace(task, status="in_progress", owner=member), True, member

    @staticmethod
    def _whose(task: Task) -> str:
        return f"owned by {task.owner}" if task.owner is not None else "not claimed by anyone"

    def _message_check(self, member: str, m: Message, to: str | None) -> None:
        if m.request is not None:
            if to is None or to not in self.members:
                raise TeamError(f"{m.to!r} is not a member of the team")
            if to == member:
                raise TeamError("a request goes to another member, not to yourself")
            if not (m.request_kind or "").strip():
                raise TeamError("a request needs a kind (what it asks: review, plan, ...)")
            if m.request in self.requests:
                raise TeamError(f"request {m.request} exists already")
            return
        assert m.reply_to is not None
        req = self.requests.get(m.reply_to)
        if req is None:
            raise TeamError(f"no request {m.reply_to} in the team")
        if req.to != member:
            raise TeamError(f"request {req.id} is addressed to {req.to}, not to you")
        if req.response is not None:
            raise TeamError(f"request {req.id} was answered already ({req.response.effect})")

    # -- applying -----------------------------------------------------------------

    def apply(self, op: Op) -> bool:
        """Take `op` into the state if the rules allow it now (a claim: only one that won
        when it was made, and would win now). Returns whether it was taken."""
        i = op.intent
        try:
            match i:
                case TeamTask():
                    task, won, _ = self._task_change(op.member, i)
                    if i.op == "claim" and not (won and op.outcome.won):
                        return False
                    if task is not None:
                        self.tasks[task.id] = replace(task, effect=op.effect)
                case TeamWrite():
                    # As written: the write's content is what its writer meant, whatever
                    # a rewind took from under it since.
                    if i.blob is None:
                        self.files.pop(i.path, None)
                    else:
                        self.files[i.path] = PadFile(i.path, i.blob, op.member, op.effect)
                case Message():
                    self._message_check(op.member, i, op.to)
                    self._take_message(op)
        except TeamError:
            return False
        return True

    def _take_message(self, op: Op) -> None:
        m = op.intent
        assert isinstance(m, Message) and op.to is not None
        if m.request is not None:
            self.requests[m.request] = Request(m.request, op.member, op.to,
                                               m.request_kind or "", m.text, op.effect)
        else:
            assert m.reply_to is not None
            req = self.requests[m.reply_to]
            self.requests[req.id] = replace(
                req, response=Response(req.id, op.member, m.text, op.effect))

    def highest(self) -> tuple[int, int]:
        """The highest task and request numbers in use (`t<n>`, `r<n>`)."""
        tasks = max((_number(t, "t") for t in self.tasks), default=0)
        requests = max((_number(r, "r") for r in self.requests), default=0)
        return tasks, requests
