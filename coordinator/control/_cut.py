"""A consistent cut of a team: every scope's head, inbox and pending intents at one
moment, recorded, and the team forked or rewound from it as a whole.

Rewinding agents one by one does not give a state that ever existed: a message
A sent stays in B's inbox after A is rewound past sending it. A cut is taken with
the coordinator quiesced (`Runtime.quiesced`): no message is between its delivery
and its sender's commit, so each message is on both sides of the cut or neither.
Commands and writes go on meanwhile; each is on one side of the cut by its head.

A cut is recorded as the ref `refs/corral/cuts/<name>`: a commit whose parents are
the members' heads (so stock git reaches them: `git log refs/corral/cuts/<name>`)
and whose tree holds `cut.json` (`git show refs/corral/cuts/<name>:cut.json`).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..records._effects import Message, NoOutcome, ScopeRewind, SupervisorAction
from ..records._errors import CorralError, NotFound, ScopeExists, StateError
from ..records._paths import check_scope_name
from ..scopes import _history as history
from ..scopes._effect_path import ActInput
from ..scopes._runtime import Runtime
from ..scopes._scope import Scope, fork_scopes
from ..store._trace import Trace

__all__ = [
    "CUT_PREFIX", "REWINDING_PREFIX", "Cut", "MemberCut", "cut_names", "finish_team_rewinds",
    "fork_team", "new_cut_name", "read_cut", "rewind_team", "take_cut",
]

CUT_PREFIX = "refs/corral/cuts/"
REWINDING_PREFIX = "refs/corral/rewinding/"
"""A team rewind under way: its cut, until every member has moved."""
CUT_FILE = "cut.json"
LOCK_TIMEOUT_S = 30.0
"""How long `rewind_team` waits for a member's current effect to finish."""


@dataclass(frozen=True, slots=True)
class MemberCut:
    """One scope as the cut found it."""

    scope: str
    head: str
    inbox: tuple[Message, ...]
    """Messages delivered and not yet taken by its agent, oldest first."""
    pending: tuple[str, ...]
    """Ids of its effects proposed and not yet done (waiting for a decision)."""


@dataclass(frozen=True, slots=True)
class Cut:
    name: str
    commit: str
    """The commit `refs/corral/cuts/<name>` points at."""
    time: float
    members: tuple[MemberCut, ...]

    def member(self, scope: str) -> MemberCut:
        for m in self.members:
            if m.scope == scope:
                return m
        raise NotFound(f"scope {scope!r} is not in cut {self.name!r}")


def new_cut_name() -> str:
    """A fresh cut name: the local time and four hex digits."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _check_name(name: str) -> str:
    try:
        return check_scope_name(name)
    except CorralError as e:
        raise type(e)(str(e).replace("scope name", "cut name")) from e


async def take_cut(rt: Runtime[Scope], scopes: Sequence[Scope], name: str) -> Cut:
    """Cut `scopes` (live ones) at one moment and record the cut as `name`. Raises
    ScopeExists when a cut of that name exists, PathError for a bad name."""
    _check_name(name)
    async with rt.quiesced():  # no await below: one state of the whole coordinator
        members = tuple(
            MemberCut(s.name, s.head, tuple(s.inbox),
                      tuple(e.id for e in rt.pending.values() if e.scope == s.name))
            for s in sorted(scopes, key=lambda s: s.name) if not s.discarded)
        taken = time.time()
    commit = await rt.io(_record, rt.trace, name, taken, members)
    return Cut(name, commit, taken, members)


def _record(trace: Trace, name: str, taken: float, members: tuple[MemberCut, ...]) -> str:
    ref = CUT_PREFIX + name
    if trace.ref(ref) is not None:  # checked here, in the one thread hop of the cut
        raise ScopeExists(f"a cut named {name!r} exists ({ref})")
    body = {"name": name, "time": taken, "members": [
        {"scope": m.scope, "head": m.head, "pending": list(m.pending),
         "inbox": [msg.model_dump(mode="json") for msg in m.inbox]} for m in members]}
    blob = trace.write_blob(json.dumps(body, indent=1, sort_keys=True).encode() + b"\n")
    tree = trace.build_tree(None, {CUT_FILE: (blob, 0o100644)})
    parents = list(dict.fromkeys(m.head for m in members))
    summary = ", ".join(f"{m.scope}@{m.head[:12]}" for m in members)
    commit = trace.write_commit(tree, parents, f"corral cut {name}: {summary}\n")
    trace.set_ref(ref, commit)
    return commit


def read_cut(trace: Trace, name: str) -> Cut:
    """The cut recorded as `name`. Raises NotFound, StateError (unreadable)."""
    commit = trace.ref(CUT_PREFIX + _check_name(name))
    if commit is None:
        raise NotFound(f"no cut named {name!r}")
    try:
        body = json.loads(trace.read(commit, CUT_FILE))
        members = tuple(
            MemberCut(m["scope"], m["head"],
                      tuple(Message.model_validate(x) for x in m["inbox"]), tuple(m["pending"]))
            for m in body["members"])
        return Cut(body["name"], commit, float(body["time"]), members)
    except (KeyError, TypeError, ValueError) as e:
        raise StateError(f"cut {name!r} ({commit[:12]}) cannot be read: {e}", cause=e) from e


def cut_names(trace: Trace) -> list[str]:
    return sorted(r[len(CUT_PREFIX):] for r in trace.refs(CUT_PREFIX))


async def fork_team(scopes: dict[str, Scope], cut: Cut, prefix: str) -> list[Scope]:
    """A new scope `<prefix><member>` for each member of `cut`, forked at the member's
    cut head, its inbox as the cut found it: the team as it was, to try again. All the
    members are forked in one go (`fork_scopes`): all or nothing."""
    for m in cut.members:
        if m.scope not in scopes or scopes[m.scope].discarded:
            raise NotFound(f"scope {m.scope!r} of cut {cut.name!r} is not live")
    children = await fork_scopes([(scopes[m.scope], prefix + m.scope, m.head)
                                  for m in cut.members])
    for child, m in zip(children, cut.members, strict=True):
        child.inbox = list(m.inbox)
    return children


async def rewind_team(scopes: dict[str, Scope], cut: Cut, *, reason: str = "",
                      lock_timeout: float = LOCK_TIMEOUT_S) -> list[str]:
    """Rewind every member of `cut` to its cut head and give it back its cut inbox, as
    one step of the team: each member's lock is held until all are done, so no member
    acts (or messages another) in between. Each rewind is recorded as a supervisor
    decision on its member with the cause `cut:<name>`. Returns the decisions' ids.

    All or nothing: every member's decision is taken before any member moves (one
    blocked decision moves none), and `refs/corral/rewinding/<name>` marks the moves
    while they run, so a coordinator killed among them finishes them when its state is
    reopened (`finish_team_rewinds`).

    Raises NotFound for a member that is not live, CorralError when a member's
    current effect (one waiting at the gate, say) does not finish within
    `lock_timeout` or its decision is blocked, RewindError when a member's cut head is
    no longer on its branch."""
    members = [scopes.get(m.scope) for m in cut.members]
    for m, s in zip(cut.members, members, strict=True):
        if s is None or s.discarded:
            raise NotFound(f"scope {m.scope!r} of cut {cut.name!r} is not live")
    live = [s for s in members if s is not None]
    held = []
    try:
        for s in live:  # the cut's order: by name, the same for every team operation
            try:
                await asyncio.wait_for(s.effect_path.lock.acquire(), lock_timeout)
            except TimeoutError:
                raise CorralError(f"scope {s.name!r} is still busy after {lock_timeout:g}s "
                                  "(an intent waiting for a decision?): the team was not "
                                  "rewound") from None
            held.append(s)
        decisions = [await _decide(s, cut, reason) for s in live]
        rt = live[0].runtime if live else None
        if rt is not None:
            await rt.io(rt.trace.set_ref, REWINDING_PREFIX + cut.name, cut.commit)
        for s, decision in zip(live, decisions, strict=True):
            await _move(s, cut, decision)
        if rt is not None:
            await rt.io(rt.trace.delete_ref, REWINDING_PREFIX + cut.name)
        return decisions
    finally:
        for s in held:
            s.effect_path.lock.release()


async def finish_team_rewinds(rt: Runtime[Scope], scopes: dict[str, Scope]) -> list[str]:
    """Finish the team rewinds a killed coordinator left half done (at open, before
    anything else runs): each member of a marked cut not yet rewound to it gets its
    decision and its rewind now. Returns the cuts finished."""
    finished = []
    for ref in await rt.io(rt.trace.refs, REWINDING_PREFIX):
        name = ref[len(REWINDING_PREFIX):]
        cut = await rt.io(read_cut, rt.trace, name)
        for m in cut.members:
            scope = scopes.get(m.scope)
            if scope is None or scope.discarded or await rt.io(_rewound_to, rt.trace,
                                                                 scope.head, m.head):
                continue
            async with scope.effect_path.lock:
                decision = await _decide(scope, cut, "finishing the team rewind a restart "
                                         "interrupted")
                await _move(scope, cut, decision)
        await rt.io(rt.trace.delete_ref, ref)
        finished.append(name)
    return finished


def _rewound_to(trace: Trace, head: str, target: str) -> bool:
    effect = trace.show(head).effect
    return (effect is not None and isinstance(effect.intent, ScopeRewind)
            and effect.intent.to == target)


async def _decide(scope: Scope, cut: Cut, reason: str) -> str:
    """The supervisor decision to rewind one member (its lock held); its effect id."""
    m = cut.member(scope.name)
    intent = SupervisorAction(action="rewind", target=scope.name,
                              detail={"to": m.head, "cut": cut.name, "reason": reason})

    async def decided(_: ActInput) -> tuple[NoOutcome, dict[str, tuple[str, int] | None]]:
        return NoOutcome(), {}

    decision = await scope.effect_path.run(intent, decided, cause=f"cut:{cut.name}")
    if not decision.ok:
        raise CorralError(f"the rewind of {scope.name!r} to cut {cut.name!r} was blocked: "
                          f"{decision.reason}; no member of the team was rewound")
    assert decision.effect is not None
    return decision.effect.id


async def _move(scope: Scope, cut: Cut, decision: str) -> None:
    """Rewind one member (its lock held) past its decision and restore its inbox."""
    m = cut.member(scope.name)
    await history.rewind(scope.effect_path, scope.workspace.backing, scope.fork_point, m.head,
                         None, decision)
    scope.inbox = list(m.inbox)
