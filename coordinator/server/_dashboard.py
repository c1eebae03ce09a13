"""Read-only views of the trace for the dashboard (and any other observer):
the branch graph of every scope, the diff an effect made, a scope's overview.

They only read: nothing here records an effect or moves a ref. Each is one
`Route` in `VIEW_ROUTES`, appended to the API's table, so `/openapi.json`
documents them with the rest.
"""

from __future__ import annotations

import heapq
import weakref
from itertools import pairwise
from typing import Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from ..control._cut import cut_names, read_cut
from ..records._effects import Effect, ExecOutcome, Message, ModelOutcome, ToolOutcome
from ..records._errors import StateError
from ..records._wire import BadRequest, ScopeOut
from ..store._reads import diff_blobs, diff_commits, file_at
from ..store._trace import ARCHIVE_PREFIX, SCOPE_PREFIX, Trace, TraceEntry, is_object_id
from ._auth import Forbidden, Tokens
from ._http import json_response as _json
from ._hub import HUB
from ._openapi import Query, Route

__all__ = ["VIEW_ROUTES", "diff_of", "graph_of", "proposed_of", "tokens_of"]

CUT_MARKS = 20
"""Cuts drawn on the graph: the newest ones; the rest stay readable at /v1/cuts."""

_PATCH_LIMIT = 256 * 1024
"""Bytes of unified diff returned per file; beyond, the patch is cut and `truncated` set."""


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, cache_strings="keys")


class NodeOut(_Out):
    """One commit of the graph: an effect on a branch."""

    commit: str
    parents: list[str]
    """Parent commits (a merge has two; the first is on the same branch)."""
    lane: int
    """Index into `lanes` of the branch this commit is on."""
    subject: str
    id: str
    """The effect's id (`scope#seq`)."""
    seq: int
    kind: str
    status: str
    failed: bool = False
    """The effect ran but did not succeed: a command that exited non-zero or timed out,
    a tool call that returned an error (its status is still `materialized`)."""
    verdict: str | None
    cause: str | None
    paths: list[str]
    """Paths the effect names or changed (for search by path)."""
    time: int = 0
    """When the effect was recorded: the commit's time, epoch seconds."""


class LaneOut(_Out):
    """One branch: a live scope, a discarded scope's archive, or a rewound head."""

    ref: str
    name: str
    """The scope name (for an archive: the scope it came from)."""
    state: Literal["live", "discarded", "rewound"]
    head: str
    base: str | None
    """The commit this branch grew from (on another lane, or the snapshot)."""
    shown: int
    more: bool
    """True when older commits of this branch were left out (raise `limit`)."""


class CutMemberOut(_Out):
    scope: str
    head: str


class CutMarkOut(_Out):
    """A recorded consistent cut, drawn as a marker across its members' lanes."""

    name: str
    time: float
    members: list[CutMemberOut]


class GraphOut(_Out):
    snapshot: str
    lanes: list[LaneOut]
    nodes: list[NodeOut]
    """Oldest first: every parent before its children."""
    cuts: list[CutMarkOut] = []
    """The newest recorded cuts (at most `CUT_MARKS`), oldest first."""


class DiffFileOut(_Out):
    path: str
    status: str
    """added, deleted, modified, renamed, typechange."""
    old_blob: str | None
    new_blob: str | None
    binary: bool
    additions: int
    deletions: int
    patch: str
    """The file's unified diff (cut at 256 KiB, see `truncated`)."""
    truncated: bool


class DiffOut(_Out):
    commit: str
    against: str | None
    """The commit compared with (the first parent unless asked), None for a root commit."""
    files: list[DiffFileOut]


class TokensOut(_Out):
    calls: int = 0
    prompt: int = 0
    cached: int = 0
    completion: int = 0


class ScopeOverview(_Out):
    scope: ScopeOut
    effects: int
    """Effects on the branch since its fork."""
    blocked: int
    inbox: list[Message]
    """Messages waiting for the scope's agent (not taken)."""
    layer_bytes: int | None
    """Bytes held in the scope's own layer (None when it cannot be measured)."""
    tokens: TokensOut


def _paths(effect: Effect) -> list[str]:
    out: list[str] = []
    for name in ("path", "target"):
        value = getattr(effect.intent, name, None)
        if name == "target" and effect.kind == "decision":
            continue  # a control action's target is a scope, not a path
        if isinstance(value, str) and value:
            out.append(value)
    for holder in (effect.intent, effect.outcome):
        for change in getattr(holder, "changes", None) or ():
            if change.path not in out:
                out.append(change.path)
    return out


def _lanes(trace: Trace, archived: bool) -> list[tuple[str, str, str]]:
    """(ref, scope name, state) in drawing order: root, other live scopes, archives."""
    live = [(SCOPE_PREFIX + n, n, "live") for n in trace.scope_names()]
    live.sort(key=lambda lane: lane[1] != "root")
    if not archived:
        return live
    out = list(live)
    for ref in trace.refs(ARCHIVE_PREFIX):
        rest = ref[len(ARCHIVE_PREFIX):]
        if "/rewound-" in rest:
            out.append((ref, rest.split("/rewound-", 1)[0], "rewound"))
        else:
            out.append((ref, rest.rsplit("-", 1)[0], "discarded"))
    return out


_SEEN: weakref.WeakKeyDictionary[Trace, dict[str, TraceEntry]] = weakref.WeakKeyDictionary()
_SEEN_MAX = 50_000


def _show(trace: Trace, commit: str) -> TraceEntry:
    """trace.show, remembered: a commit never changes, and the page asks for the
    graph after every effect, so each record is decoded once, not once a refresh."""
    seen = _SEEN.setdefault(trace, {})
    entry = seen.get(commit)
    if entry is None:
        entry = trace.show(commit)
        if len(seen) >= _SEEN_MAX:
            seen.clear()
        seen[commit] = entry
    return entry


def graph_of(trace: Trace, *, archived: bool = False, limit: int = 500) -> GraphOut:
    """The branch graph: each lane's commits back to where it meets an earlier lane
    (its fork point) or the snapshot, newest `limit` per lane; nodes oldest first."""
    owner: dict[str, int] = {}
    entries: dict[str, TraceEntry] = {}
    lanes: list[LaneOut] = []
    for ref, name, state in _lanes(trace, archived):
        head = trace.ref(ref)
        if head is None:
            continue
        index = len(lanes)
        commit: str | None = head
        shown = 0
        more = False
        while commit is not None and commit not in owner:
            entry = _show(trace, commit)
            if entry.effect is None:
                break
            if shown == limit:
                more = True
                break
            owner[commit] = index
            entries[commit] = entry
            shown += 1
            commit = entry.parents[0] if entry.parents else None
        if shown == 0 and state != "live":
            continue  # an archive wholly contained in other lanes adds nothing
        lanes.append(LaneOut(ref=ref, name=name, state=state,  # type: ignore[arg-type]
                             head=head, base=commit, shown=shown, more=more))
    return GraphOut(snapshot=trace.snapshot() or "", lanes=lanes,
                    nodes=[_node(entries[c], owner[c]) for c in _oldest_first(entries, owner)],
                    cuts=_cut_marks(trace))


def _cut_marks(trace: Trace) -> list[CutMarkOut]:
    marks = []
    for name in cut_names(trace):
        try:
            cut = read_cut(trace, name)
        except StateError:
            continue  # an unreadable cut is not drawn; GET /v1/cuts/<name> says why
        marks.append(CutMarkOut(name=cut.name, time=cut.time, members=[
            CutMemberOut(scope=m.scope, head=m.head) for m in cut.members]))
    return sorted(marks, key=lambda m: m.time)[-CUT_MARKS:]


def _node(entry: TraceEntry, lane: int) -> NodeOut:
    e = entry.effect
    assert e is not None
    return NodeOut(commit=entry.commit, parents=list(entry.parents), lane=lane,
                   subject=entry.subject, id=e.id, seq=e.seq, kind=e.kind, status=e.status,
                   failed=failed(e), verdict=e.decision.verdict if e.decision else None,
                   cause=e.cause, paths=_paths(e), time=entry.time)


def failed(e: Effect) -> bool:
    """Whether `e` ran and did not succeed (see `NodeOut.failed`)."""
    o = e.outcome
    if isinstance(o, ExecOutcome):
        return o.returncode != 0 or o.timed_out
    return isinstance(o, ToolOutcome) and o.is_error


def _oldest_first(entries: dict[str, TraceEntry], owner: dict[str, int]) -> list[str]:
    """A topological order that reads as a timeline: parents first, and within a
    scope by seq (so a rewound branch's effects come before the rewind); among
    commits that are ready, the shallowest first, then by lane."""
    after: dict[str, list[str]] = {c: [] for c in entries}
    waiting: dict[str, int] = dict.fromkeys(entries, 0)

    def edge(first: str, then: str) -> None:
        after[first].append(then)
        waiting[then] += 1

    by_scope: dict[str, list[tuple[int, str]]] = {}
    for c, entry in entries.items():
        for p in entry.parents:
            if p in entries:
                edge(p, c)
        assert entry.effect is not None
        by_scope.setdefault(entry.effect.scope, []).append((entry.effect.seq, c))
    for line in by_scope.values():
        line.sort()
        for (_, a), (_, b) in pairwise(line):
            if b not in after[a]:
                edge(a, b)
    depth = dict.fromkeys(entries, 0)
    ready = [(0, owner[c], c) for c, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    out: list[str] = []
    while ready:
        d, _, c = heapq.heappop(ready)
        out.append(c)
        for child in after[c]:
            depth[child] = max(depth[child], d + 1)
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, (depth[child], owner[child], child))
    return out


def tokens_of(trace: Trace, head: str, scope: str) -> TokensOut:
    """Token use of the model calls `scope` made (replays cost none) on its branch."""
    calls = prompt = cached = completion = 0
    for entry in trace.walk(head):
        if entry.effect is None or entry.effect.scope != scope:
            continue
        out = entry.effect.outcome
        if isinstance(out, ModelOutcome) and not out.replayed:
            calls += 1
            prompt += out.usage.prompt_tokens
            cached += out.usage.cached_prompt_tokens
            completion += out.usage.completion_tokens
    return TokensOut(calls=calls, prompt=prompt, cached=cached, completion=completion)


def diff_of(trace: Trace, commit: str, against: str | None) -> DiffOut:
    """The files `commit` changed against `against` (default: its first parent)."""
    new = trace.commit(commit)
    old = trace.commit(against) if against else (new.parents[0] if new.parent_ids else None)
    files = [DiffFileOut(
        path=f.path, status=f.status, old_blob=f.old_blob, new_blob=f.new_blob,
        binary=f.binary, additions=f.additions, deletions=f.deletions,
        patch=f.text[:_PATCH_LIMIT], truncated=len(f.text) > _PATCH_LIMIT,
    ) for f in diff_commits(new, old)]
    return DiffOut(commit=str(new.id), against=str(old.id) if old is not None else None,
                   files=files)


def proposed_of(trace: Trace, commit: str, path: str, blob: str | None) -> DiffOut:
    """What writing `blob` at `path` (None: deleting it) would change on `commit`'s tree:
    the diff a supervisor reads before approving a write."""
    old = file_at(trace.commit(commit).tree, path)
    old_id = old[0] if old is not None else None
    old_data = trace.blob(old_id) if old_id is not None else None
    new_data = trace.blob(blob) if blob else None
    text, adds, dels, binary = diff_blobs(old_data, new_data, path)
    status = "added" if old_data is None else "deleted" if new_data is None else "modified"
    file = DiffFileOut(
        path=path, status=status, old_blob=old_id, new_blob=blob, binary=binary,
        additions=adds, deletions=dels, patch=text[:_PATCH_LIMIT],
        truncated=len(text) > _PATCH_LIMIT)
    return DiffOut(commit=str(trace.commit(commit).id), against=None,
                   files=[file] if old_data != new_data else [])


# -- handlers -----------------------------------------------------------------


async def graph(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    Tokens.require_admin(hub.who(request))
    archived = request.query.get("archived", "false").lower() in ("1", "true", "yes")
    try:
        limit = int(request.query.get("limit", "500"))
    except ValueError as e:
        raise BadRequest("limit must be an integer") from e
    if not 1 <= limit <= 100_000:
        raise BadRequest("limit must be between 1 and 100000")
    out = await hub.coordinator.io(graph_of, hub.coordinator.trace, archived=archived, limit=limit)
    return _json(out)


async def diff(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    who = hub.who(request)
    trace = hub.coordinator.trace
    commit = request.match_info["commit"]
    against = request.query.get("against") or None
    entry = await hub.coordinator.io(trace.show, commit)
    if not who.admin and (entry.effect is None
                          or not hub.live_tokens.covers(who, entry.effect.scope, hub.coordinator)):
        raise Forbidden("this commit is not on a scope this token acts on")
    return _json(await hub.coordinator.io(diff_of, trace, commit, against))


async def proposed(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    Tokens.require_admin(hub.who(request))
    path = request.query.get("path", "")
    blob = request.query.get("blob") or None
    if not path:
        raise BadRequest("give the path the intent writes")
    if "\x00" in path or path.startswith("/") or ".." in path.split("/"):
        raise BadRequest(f"{path!r} is not a relative path inside the workspace")
    if blob is not None and not is_object_id(blob):
        raise BadRequest(f"{blob!r} is not a full hex blob id")
    coord = hub.coordinator
    return _json(await coord.io(proposed_of, coord.trace, request.match_info["commit"], path,
                                blob))


async def overview(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    who = hub.who(request)
    scope = hub.scope(who, request.match_info["name"])
    trace = hub.coordinator.trace

    def read() -> tuple[list[TraceEntry], TokensOut]:
        line = list(trace.walk(scope.head))
        since = [e for e in line if e.effect is not None and e.effect.scope == scope.name]
        return since, tokens_of(trace, scope.head, scope.name)

    since, tokens = await hub.coordinator.io(read)
    try:
        layer: int | None = await hub.coordinator.io(lambda: scope.workspace.layer_bytes)
    except OSError:
        layer = None
    info = scope.info()
    return _json(ScopeOverview(
        scope=ScopeOut(name=info.name, head=info.head, parent=info.parent,
                       fork_point=info.fork_point, backend=info.backend),
        effects=len(since), blocked=sum(1 for e in since if e.effect and e.effect.status ==
                                        "blocked"),
        inbox=list(scope.inbox), layer_bytes=layer, tokens=tokens,
    ))


VIEW_ROUTES: tuple[Route, ...] = (
    Route("GET", "/v1/graph", graph,
          "The branch graph of every scope: lanes (live, and with archived=true the "
          "discarded and rewound branches) and their commits, oldest first",
          query=(Query("archived", "Also the archived branches (true/false)"),
                 Query("limit", "Newest commits per lane (default 500)", type="integer")),
          response=GraphOut, auth="admin", tag="trace"),
    Route("GET", "/v1/trace/{commit}/diff", diff,
          "The files a commit changed: unified diff per file against its first parent "
          "(or `against`)",
          query=(Query("against", "Another commit to compare with"),),
          response=DiffOut, tag="trace"),
    Route("GET", "/v1/trace/{commit}/proposed", proposed,
          "What an intent would change: the diff from `path` in the commit's tree to the "
          "blob `blob` (absent: a deletion), for reading a held write before approving it",
          query=(Query("path", "The path the intent writes", required=True),
                 Query("blob", "The intent's content blob (absent: the path is deleted)")),
          response=DiffOut, auth="admin", tag="trace"),
    Route("GET", "/v1/scopes/{name}/overview", overview,
          "A scope at a glance: effects since its fork, blocked intents, the inbox "
          "(not taken), its layer's size and its model tokens",
          response=ScopeOverview),
)
