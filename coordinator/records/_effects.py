"""Effects: every interaction of an agent with the world, as a typed record.

An effect pairs an *intent* (what was asked, a tagged union on `kind`) with the
supervisor's *decision* and the *outcome* (what happened). Records are frozen
pydantic models written into trace commits as JSON; `FORMAT_VERSION` is bumped
when the on-disk shape changes. Large payloads (file contents, command output,
model requests) are git blobs referenced by their hex id, so commits stay small.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "FORMAT_VERSION",
    "ControlAction",
    "Decision",
    "Effect",
    "Exec",
    "ExecOutcome",
    "FileChange",
    "FsDelete",
    "FsOp",
    "FsOpKind",
    "FsOutcome",
    "FsPatch",
    "FsWrite",
    "Intent",
    "MergeOutcome",
    "Message",
    "ModelCall",
    "ModelOutcome",
    "NoOutcome",
    "Outcome",
    "ScopeDiscard",
    "ScopeFork",
    "ScopeMerge",
    "ScopeRewind",
    "Status",
    "SupervisorAction",
    "TaskOp",
    "TeamOutcome",
    "TeamTask",
    "TeamWrite",
    "ToolCall",
    "ToolOutcome",
    "Usage",
    "Verdict",
]

FORMAT_VERSION = 1

Status = Literal["pending", "allowed", "blocked", "rewritten", "materialized", "failed"]
"""pending: proposed, not decided. allowed/rewritten: decided, not yet durable.
materialized: committed. blocked: refused by the policy chain (nothing touched
the workspace). failed: allowed but could not be carried out."""

Verdict = Literal["allow", "block", "rewrite", "defer", "rewind", "handoff", "inject", "discard"]

MergeStrategy = Literal["fail", "ours", "theirs", "union"]


class _Record(BaseModel):
    # cache_strings="keys": pydantic's default also keeps up to 16k decoded
    # values (ids, paths) in a process-wide cache; scattered through the
    # interpreter's arenas, they kept a whole-log read's memory resident
    # (65 arenas after reading 10k records and dropping them, 32 with keys only).
    model_config = ConfigDict(frozen=True, extra="forbid", cache_strings="keys")


# -- intents ------------------------------------------------------------------


class FileChange(_Record):
    """One path's new state: a blob with a git mode, or deleted (blob None)."""

    path: str
    blob: str | None
    mode: int = 0o100644


class FsWrite(_Record):
    kind: Literal["fs.write"] = "fs.write"
    path: str
    blob: str
    """Hex id of the blob holding the new content."""
    mode: int = 0o100644


class FsPatch(_Record):
    """A patch (`git diff` / `git format-patch` form) of one or many files: one
    intent, one commit. What it changes is computed at proposal, so a policy
    reviews every file (`changes`)."""

    kind: Literal["fs.patch"] = "fs.patch"
    path: str
    """The first path of `changes` (the patched file, for a one-file patch)."""
    diff: str
    """Blob id of the patch as given."""
    blob: str | None
    """Blob id of `path` after the patch (None when the patch deletes it)."""
    mode: int = 0o100644
    changes: tuple[FileChange, ...] = ()
    """Every file the patch changes, in path order (a rename is a deletion and
    a new file). Empty in records from before multi-file patches: then
    `path`/`blob`/`mode` are the one change."""
    three_way: bool = False
    """Applied as `git apply --3way` (falling back to a merge with the blob the
    patch was made against)."""


class FsDelete(_Record):
    kind: Literal["fs.delete"] = "fs.delete"
    path: str


FsOpKind = Literal[
    "open_write", "create", "truncate", "unlink", "rename", "mkdir", "rmdir", "symlink", "link",
    "chmod", "chown",
]


class FsOp(_Record):
    """A mutating filesystem call by a process in a fuse workspace, asked before it happens.

    Allowed, a write open becomes `fs.write` effects when the file is closed; any
    other call is recorded as this intent with the files it changed as outcome.
    """

    kind: Literal["fs.op"] = "fs.op"
    op: FsOpKind
    path: str
    """Workspace-relative path the call changes (rename: the source)."""
    target: str | None = None
    """rename: the destination; link: the existing file; symlink: the link's
    content; chown: `uid:gid` (-1 leaves one unchanged)."""


class Exec(_Record):
    kind: Literal["exec"] = "exec"
    argv: tuple[str, ...]
    timeout: float
    network: bool = False
    env: dict[str, str] | None = None
    """The command's whole environment, set inside its sandbox only; None: the
    default (PATH from the toolchain and the system, HOME=/tmp, LANG, TMPDIR)."""
    changes: tuple[FileChange, ...] | None = None
    """None when the command is asked to run; the files it changed when its
    outcome is asked to be applied (the second review of a transactional exec)."""


class ModelCall(_Record):
    kind: Literal["model.call"] = "model.call"
    provider: str
    model: str
    request: str
    """Blob id of the exact provider-neutral request (canonical JSON)."""
    attempt: int = 1


class ToolCall(_Record):
    kind: Literal["tool.call"] = "tool.call"
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = None


def _unset(value: object) -> bool:
    return value is None


class Message(_Record):
    kind: Literal["message"] = "message"
    to: str
    text: str
    sender: str | None = None
    # Left out of the record when unset: a plain message's record is as before teams.
    team: str | None = Field(default=None, exclude_if=_unset)
    """The team this message belongs to: set on typed requests and their responses."""
    request: str | None = Field(default=None, exclude_if=_unset)
    """A typed request: its id (`r<n>`, unique in the team); `text` is its body."""
    request_kind: str | None = Field(default=None, exclude_if=_unset)
    """A typed request: what it asks (a word the team agrees on: "review", "plan")."""
    reply_to: str | None = Field(default=None, exclude_if=_unset)
    """A response: the id of the request it answers; `text` is its body."""


class ScopeFork(_Record):
    kind: Literal["scope.fork"] = "scope.fork"
    child: str
    parent: str
    at: str
    """The parent's head commit: the child's fork point."""
    backend: str = ""


class ScopeRewind(_Record):
    kind: Literal["scope.rewind"] = "scope.rewind"
    to: str
    head: str
    """The head that was rewound away from (kept under an archive ref)."""


class ScopeMerge(_Record):
    kind: Literal["scope.merge"] = "scope.merge"
    other: str
    other_head: str
    strategy: MergeStrategy = "fail"


class ScopeDiscard(_Record):
    kind: Literal["scope.discard"] = "scope.discard"
    archive: str
    """The archive ref the scope's branch moves to."""


TaskOp = Literal["add", "claim", "complete", "release", "block"]


class TeamTask(_Record):
    """A change to a team's task list by the member whose branch records it."""

    kind: Literal["team.task"] = "team.task"
    team: str
    op: TaskOp
    task: str
    """The task's id (`t<n>`; for add, the id the new task gets)."""
    title: str = ""
    """add: the task's one-line title."""
    detail: str = ""
    """add: what the task is; complete, release, block: the member's note."""
    assignee: str | None = None
    """add: the member expected to claim it (only they may, until it is released)."""


class TeamWrite(_Record):
    """A write (blob None: a delete) to a file of a team's scratchpad."""

    kind: Literal["team.write"] = "team.write"
    team: str
    path: str
    blob: str | None
    base: str | None = None
    """The file's blob as the writer last saw it (None: no file). The write lands only
    if the file is still that; the conflict guard merges a stale write instead."""


ControlAction = Literal["rewind", "handoff", "inject", "discard", "noop"]


class SupervisorAction(_Record):
    """A control decision taken by a supervisor (rewind, handoff, inject, discard)."""

    kind: Literal["decision"] = "decision"
    action: ControlAction
    target: str
    """The scope acted on."""
    detail: dict[str, Any] = Field(default_factory=dict)
    about: str | None = None
    """Id of the effect this decision answers, if any."""


Intent = Annotated[
    FsWrite
    | FsPatch
    | FsDelete
    | FsOp
    | Exec
    | ModelCall
    | ToolCall
    | Message
    | ScopeFork
    | ScopeRewind
    | ScopeMerge
    | ScopeDiscard
    | SupervisorAction
    | TeamTask
    | TeamWrite,
    Field(discriminator="kind"),
]


# -- decisions ----------------------------------------------------------------


class Decision(_Record):
    """What the policy chain said about an intent."""

    verdict: Verdict
    reason: str = ""
    """Shown to the agent when the intent is blocked or deferred."""
    policy: str = "default"
    """Name of the policy that decided; "default" when every policy abstained."""
    rewritten: Intent | None = None
    until: str | None = None
    """For defer: the scope whose merge the intent waits for."""

    @property
    def allowed(self) -> bool:
        return self.verdict in ("allow", "rewrite")


# -- outcomes -----------------------------------------------------------------


class FsOutcome(_Record):
    kind: Literal["fs"] = "fs"
    changes: tuple[FileChange, ...] = ()
    ignored: tuple[str, ...] = ()
    """Paths written to the workspace but not in the commit's tree (matched by .gitignore)."""
    ignored_files: str | None = None
    """Blob id of those paths' new content, a JSON list of FileChange (blob
    None: deleted): kept beside the tree, so a restart restores them (see
    `Trace.ignored_files`). A blob, as a command may leave thousands."""


class ExecOutcome(_Record):
    kind: Literal["exec"] = "exec"
    returncode: int
    stdout: str
    """Blob id of the command's standard output."""
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0
    changes: tuple[FileChange, ...] = ()
    ignored: tuple[str, ...] = ()
    truncated: bool = False
    """stdout or stderr passed the output limit: only its first bytes were kept."""
    ignored_files: str | None = None
    """The ignored paths' new content, as in FsOutcome."""
    review: Decision | None = None
    """The policy chain's decision on the files the command changed (its second
    review; None when it changed nothing). The first, on running it, is the
    effect's `decision`."""


class Usage(_Record):
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0


class ModelOutcome(_Record):
    kind: Literal["model"] = "model"
    response: str
    """Blob id of the provider-neutral response (canonical JSON)."""
    usage: Usage = Usage()
    replayed: bool = False
    tokens: str | None = None
    """Blob id of the call's token ids and logprobs as the server returned them
    (canonical JSON: `prompt_ids`, `completion_ids`, `logprobs`); None when it
    returned none. Nothing is re-tokenised to fill it."""


class ToolOutcome(_Record):
    kind: Literal["tool"] = "tool"
    result: str
    """Blob id of the tool's result text."""
    is_error: bool = False


class MergeOutcome(_Record):
    kind: Literal["merge"] = "merge"
    base: str
    conflicts: tuple[str, ...] = ()
    """Conflicting paths (resolved by the strategy, or the reason the merge failed)."""
    changes: tuple[FileChange, ...] = ()


class NoOutcome(_Record):
    kind: Literal["none"] = "none"


class TeamOutcome(_Record):
    """What a team operation (a task change, a scratchpad write, a request or a response)
    did: its place in the team's order, and for a claim whether it won."""

    kind: Literal["team"] = "team"
    seq: int
    """The team-wide order of the operation: the team's state is the operations on its
    members' branches applied in this order."""
    won: bool | None = None
    """claim: whether this member got the task."""
    owner: str | None = None
    """claim: who owns the task now (this member, or the one who had it)."""


Outcome = Annotated[
    FsOutcome | ExecOutcome | ModelOutcome | ToolOutcome | MergeOutcome | NoOutcome
    | TeamOutcome,
    Field(discriminator="kind"),
]


# -- the effect ---------------------------------------------------------------


class Effect(_Record):
    """One recorded interaction: intent, decision, outcome, and where it sits."""

    v: Literal[1] = 1
    """Record format version (FORMAT_VERSION)."""
    id: str
    """`<scope>#<seq>`: deterministic, so replayed runs produce identical records."""
    scope: str
    seq: int
    parent: str | None
    """The scope's head commit when the intent was proposed."""
    cause: str | None = None
    """Id of the effect (or supervisor decision) that led to this one."""
    status: Status
    intent: Intent
    decision: Decision | None = None
    outcome: Outcome | None = None
    error: str | None = None

    @property
    def kind(self) -> str:
        return self.intent.kind

    def summary(self, *, status: bool = True) -> str:
        """One line for commit subjects and logs; `status` marks an effect that
        was not materialized ("[blocked]", "[pending]")."""
        i = self.intent
        detail: str
        match i:
            case FsPatch() if len(i.changes) > 1:
                detail = f"{i.path} (+{len(i.changes) - 1} more)"
            case FsWrite() | FsPatch() | FsDelete():
                detail = i.path
            case FsOp():
                detail = f"{i.op} {i.path}" + (f" -> {i.target}" if i.target else "")
            case Exec():
                detail = _clip(" ".join(i.argv), 80)
            case ModelCall():
                detail = f"{i.provider}/{i.model}"
            case ToolCall():
                detail = i.tool
            case Message() if i.request is not None:
                detail = f"to {i.to} (request {i.request}: {i.request_kind})"
            case Message() if i.reply_to is not None:
                detail = f"to {i.to} (response to {i.reply_to})"
            case Message():
                detail = f"to {i.to}"
            case TeamTask():
                title = f" {_clip(i.title, 60)!r}" if i.op == "add" else ""
                detail = f"{i.op} {i.task}{title} [{i.team}]"
            case TeamWrite():
                detail = f"{i.path}{' (delete)' if i.blob is None else ''} [{i.team}]"
            case ScopeFork():
                detail = f"{i.child} from {i.parent}"
            case ScopeRewind():
                detail = f"to {i.to[:12]}"
            case ScopeMerge():
                detail = i.other if i.strategy == "fail" else f"{i.other} ({i.strategy})"
            case ScopeDiscard():
                detail = i.archive
            case SupervisorAction():
                detail = f"{i.action} {i.target}"
        mark = "" if self.status == "materialized" or not status else f" [{self.status}]"
        # One line whatever a path or argv holds: the subject ends at the first newline.
        return _CONTROL.sub(_escape, f"{i.kind} {detail}{mark}")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _escape(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def _clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters at a word boundary, marked with "…"."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip() + "…"
