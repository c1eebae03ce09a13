"""Corral's coordinator: scopes, effects, the git trace, the supervisor and merges.

What a user of the library needs is here (every name in `__all__`, sorted):

- the core: `Coordinator` (open a state directory), `Scope` (fork, read,
  write, patch, delete, exec, send, rewind, merge, discard; `perform` and
  `record` for effects of your own, with `Act`, `ActInput`, `Refused`,
  `TreeChanges`), `Result`, `MergeResult` (`Conflict`, `Hunk`, `Resolver`),
  `TeamMerge` (what `Coordinator.merge_team` did: N branches in sequence, in a
  `MergeOrder`),
  `Trace` and `TraceEntry`, `JournalBounds` (how much the journal may hold
  between checkpoints), the event bus (`Event`, `EventBus`, `Subscription`);
- the effect records (`Effect`, its intents and outcomes, `Decision`);
- the project's environment: `Environment` (what `Coordinator.prepare` sets
  up), `PreparedEnvironment` (what it did), `SetupFailed`;
- the errors (`CorralError` and its tree; `AuthError`, `Forbidden` from the
  HTTP client);
- writing a policy: `Policy`, `View`, `ScopeInfo`, `allow`, `block`,
  `defer`, `rewrite`, `allow_all`, `load_policy`, `ABSTAINED` (the chain's
  decision when every policy abstained), and the built-in `ConflictGuard`
  (with `Claim`);
- a team's shared state (`Coordinator.create_team`, `Team`, `TeamMember`,
  `TeamResult`; `Task`, `PadFile`, `Request`, `Response`, `TeamInfo`; the intents
  `TeamTask`, `TeamWrite` and `TeamOutcome`);
- `Settings`: what a state directory enforces (policies, gate rules, exec
  limits, timeouts, toolchain), recorded in its trace.

Named submodules hold the rest: `coordinator.policies` (every built-in
policy: the conflict guard, the human gate, external reviewers),
`coordinator.control` (the supervisor's control actions),
`coordinator.server` (the HTTP server: `make_app`, `run_server`,
`ServerConfig`, routes) and `coordinator.client` (the HTTP client).

The layers, each a subpackage importing only those before it: `records` (effects,
errors, events, the wire forms), `store` (the git trace, journal, merges and
patches), `policies` (the supervisor's rules and the recorded settings), `scopes`
(a scope and the one effect path), `control` (the `Coordinator` and the control
actions), `server` (HTTP). See docs/architecture.md.
"""

from .control._coordinator import Coordinator
from .control._cut import Cut, MemberCut
from .control._ship import Shipment, receive_state
from .control._team_merge import MergeOrder
from .policies._chain import (
    ABSTAINED,
    Policy,
    PolicyChain,
    ScopeInfo,
    View,
    allow,
    allow_all,
    block,
    defer,
    rewrite,
)
from .policies._guard import Claim, ConflictGuard
from .policies._settings import Settings, load_policy
from .records._effects import (
    FORMAT_VERSION,
    ControlAction,
    Decision,
    Effect,
    Exec,
    ExecOutcome,
    FileChange,
    FsDelete,
    FsOp,
    FsOpKind,
    FsOutcome,
    FsPatch,
    FsWrite,
    Intent,
    MergeOutcome,
    MergeStrategy,
    Message,
    ModelCall,
    ModelOutcome,
    NoOutcome,
    Outcome,
    ScopeDiscard,
    ScopeFork,
    ScopeMerge,
    ScopeRewind,
    Status,
    SupervisorAction,
    TaskOp,
    TeamOutcome,
    TeamTask,
    TeamWrite,
    ToolCall,
    ToolOutcome,
    Usage,
    Verdict,
)
from .records._errors import (
    AuthError,
    CorralError,
    DiskFull,
    ExecError,
    Forbidden,
    MergeError,
    NotFound,
    PatchError,
    PathError,
    RewindError,
    SandboxFailure,
    ScopeDiscarded,
    ScopeExists,
    StateError,
    TeamError,
    UnknownScope,
)
from .records._events import Event, EventBus, Subscription
from .records._merges import TeamMerge
from .records._team import PadFile, Request, Response, Task, TaskStatus, TeamInfo
from .scopes._effect_path import Act, ActInput, Refused, Result
from .scopes._environment import Environment, PreparedEnvironment, SetupFailed
from .scopes._scope import Scope
from .scopes._team import Team, TeamMember
from .scopes._team_state import TeamResult
from .store._journal import JournalBounds
from .store._merge import Conflict, Hunk, MergeResult, Resolver
from .store._trace import Trace, TraceEntry, TreeChanges

__all__ = [
    "ABSTAINED",
    "Act",
    "ActInput",
    "AuthError",
    "Claim",
    "Conflict",
    "ConflictGuard",
    "ControlAction",
    "Coordinator",
    "CorralError",
    "Cut",
    "Shipment",
    "receive_state",
    "Decision",
    "DiskFull",
    "Effect",
    "Environment",
    "Event",
    "EventBus",
    "Exec",
    "ExecError",
    "ExecOutcome",
    "FORMAT_VERSION",
    "FileChange",
    "Forbidden",
    "FsDelete",
    "FsOp",
    "FsOpKind",
    "FsOutcome",
    "FsPatch",
    "FsWrite",
    "Hunk",
    "Intent",
    "JournalBounds",
    "MemberCut",
    "MergeError",
    "MergeOrder",
    "MergeOutcome",
    "MergeResult",
    "MergeStrategy",
    "Message",
    "ModelCall",
    "ModelOutcome",
    "NoOutcome",
    "NotFound",
    "Outcome",
    "PadFile",
    "PatchError",
    "PathError",
    "Policy",
    "PolicyChain",
    "PreparedEnvironment",
    "Refused",
    "Request",
    "Resolver",
    "Response",
    "Result",
    "RewindError",
    "SandboxFailure",
    "Scope",
    "ScopeDiscard",
    "ScopeDiscarded",
    "ScopeExists",
    "ScopeFork",
    "ScopeInfo",
    "ScopeMerge",
    "ScopeRewind",
    "Settings",
    "SetupFailed",
    "StateError",
    "Status",
    "Subscription",
    "SupervisorAction",
    "Task",
    "TaskOp",
    "TaskStatus",
    "Team",
    "TeamError",
    "TeamInfo",
    "TeamMember",
    "TeamMerge",
    "TeamOutcome",
    "TeamResult",
    "TeamTask",
    "TeamWrite",
    "ToolCall",
    "ToolOutcome",
    "Trace",
    "TraceEntry",
    "TreeChanges",
    "UnknownScope",
    "Usage",
    "Verdict",
    "View",
    "allow",
    "allow_all",
    "block",
    "defer",
    "load_policy",
    "rewrite",
]
