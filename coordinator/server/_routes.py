"""The HTTP handlers of the JSON API (prefix /v1) and the table that routes them.

Over 500 lines: one short handler per route of the API, beside the table that
maps them, so the whole API surface is read in one file.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .. import control
from ..policies._chain import ScopeInfo
from ..policies._gate import Held
from ..records._effects import Exec, ExecOutcome, Intent
from ..records._errors import NotFound
from ..records._wire import (
    BadRequest,
    BlobOut,
    DeleteRequest,
    DiscardRequest,
    ExecRequest,
    ExecResultOut,
    ForkRequest,
    ForkResponse,
    GateAnswer,
    GateItem,
    GatePending,
    HandoffRequest,
    Health,
    InjectRequest,
    LogResponse,
    MergeRequest,
    MergeResponse,
    MessagesOut,
    NamesOut,
    PatchRequest,
    ReadResponse,
    ResultOut,
    ReviewRequest,
    RewindRequest,
    ScopeOut,
    ScopesOut,
    SendRequest,
    TakeRequest,
    TeamMergeRequest,
    TeamMergeResponse,
    TraceEntryOut,
    WriteRequest,
    b64,
)
from ..scopes._effect_path import Result
from ..scopes._scope import Scope
from ..store._trace import TraceEntry, is_object_id
from ._auth import Forbidden, Principal, Tokens
from ._http import body as read_body
from ._http import caller, json_response
from ._hub import API_ROUTES, HUB, Hub
from ._openapi import Query, Route
from ._streams import events, reviewers

__all__ = ["ROUTES"]

def _scope(request: web.Request) -> tuple[Hub, Principal, Scope]:
    hub, who = caller(request)
    return hub, who, hub.scope(who, request.match_info["name"])


def _scope_out(info: ScopeInfo) -> ScopeOut:
    return ScopeOut(name=info.name, head=info.head, parent=info.parent,
                    fork_point=info.fork_point, backend=info.backend)


def _gate_item(held: Held) -> GateItem:
    intent = held.effect.intent
    changes = getattr(intent, "changes", None) if held.review == "changes" else None
    return GateItem(id=held.id, rule=str(held.rule), review=held.review, summary=held.summary(),
                    changes=list(changes) if changes is not None else None, effect=held.effect)


def _result(r: Result) -> ResultOut:
    d = r.effect.decision
    return ResultOut(ok=r.ok, status=r.effect.status, commit=r.commit, reason=r.reason,
                     verdict=d.verdict if d else None, effect=r.effect)


# -- service ------------------------------------------------------------------


async def health(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    return json_response(Health(snapshot=hub.coordinator.trace.snapshot() or "",
                        checkpoint=hub.coordinator.trace.journal.deferred or "ok"))


async def openapi_json(request: web.Request) -> web.Response:
    from ._openapi import openapi

    routes = request.app[API_ROUTES]  # the core's ROUTES and the extensions'
    return web.json_response(openapi(routes))


_DASHBOARD = Path(__file__).with_name("_static") / "dashboard.html"


async def dashboard(request: web.Request) -> web.Response:
    # The page holds no data: it asks for the admin token and calls the API.
    body = await asyncio.to_thread(_DASHBOARD.read_bytes)
    return web.Response(body=body, content_type="text/html", charset="utf-8",
                        headers={"Cache-Control": "no-cache",
                                 "Content-Security-Policy": "default-src 'self'; "
                                 "script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                 "connect-src 'self' ws: wss:"})


async def metrics(request: web.Request) -> web.Response:
    # Admin only: the samples name every scope (corral_layer_bytes{scope}).
    hub, who = caller(request)
    Tokens.require_admin(who)
    body = await asyncio.to_thread(generate_latest, hub.coordinator.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


# -- scopes -------------------------------------------------------------------


async def list_scopes(request: web.Request) -> web.Response:
    hub, who = caller(request)
    coord = hub.coordinator
    out = [_scope_out(s.info()) for s in coord.scopes.values()
           if not s.discarded and hub.live_tokens.covers(who, s.name, coord)]
    return json_response(ScopesOut(scopes=out))


async def get_scope(request: web.Request) -> web.Response:
    _, _, scope = _scope(request)
    return json_response(_scope_out(scope.info()))


async def fork(request: web.Request) -> web.Response:
    hub, _, scope = _scope(request)
    req = await read_body(request, ForkRequest)
    child = await scope.fork(req.name, at=req.at)
    return json_response(ForkResponse(scope=_scope_out(child.info()),
                              token=hub.live_tokens.issue(child)))


async def read_file(request: web.Request) -> web.Response:
    hub, _, scope = _scope(request)
    path = request.query.get("path", "")
    with hub.timed("read"):
        data = await scope.read(path)
    return json_response(ReadResponse(path=path, content_b64=b64(data), size=len(data)))


async def list_dir(request: web.Request) -> web.Response:
    _, _, scope = _scope(request)
    path = request.query.get("path", "")
    try:
        names = await scope.listdir(path)
    except NotADirectoryError as e:
        raise BadRequest(f"{path} is not a directory") from e
    return json_response(NamesOut(names=names))


async def write(request: web.Request) -> web.Response:
    hub, _, scope = _scope(request)
    req = await read_body(request, WriteRequest)
    with hub.timed("fs.write"):
        r = await scope.write(req.path, req.content, mode=req.mode, cause=req.cause)
    return json_response(_result(r))


async def patch(request: web.Request) -> web.Response:
    hub, _, scope = _scope(request)
    req = await read_body(request, PatchRequest)
    with hub.timed("fs.patch"):
        if req.path is None:
            r = await scope.patch(req.diff, three_way=req.three_way, cause=req.cause)
        else:
            r = await scope.patch(req.path, req.diff, three_way=req.three_way, cause=req.cause)
    return json_response(_result(r))


async def delete(request: web.Request) -> web.Response:
    hub, _, scope = _scope(request)
    req = await read_body(request, DeleteRequest)
    with hub.timed("fs.delete"):
        r = await scope.delete(req.path, cause=req.cause)
    return json_response(_result(r))


async def exec_(request: web.Request) -> web.Response:
    hub, _, scope = _scope(request)
    req = await read_body(request, ExecRequest)
    with hub.timed("exec"):
        r = await scope.exec(req.argv, timeout=req.timeout, network=req.network, env=req.env,
                             cause=req.cause)
    base = _result(r).model_dump()
    out = r.outcome
    if isinstance(out, ExecOutcome):
        trace = hub.coordinator.trace
        stdout, stderr = await hub.coordinator.io(
            lambda: (trace.blob(out.stdout), trace.blob(out.stderr)))
        base.update(returncode=out.returncode, stdout_b64=b64(stdout), stderr_b64=b64(stderr),
                    timed_out=out.timed_out, truncated=out.truncated)
    return json_response(ExecResultOut.model_validate(base))


async def review(request: web.Request) -> web.Response:
    """Review only: the decision the policy chain gives an intent, recorded, not carried
    out (see `EffectPath.review`)."""
    hub, _, scope = _scope(request)
    req = await read_body(request, ReviewRequest)
    intent: Intent
    cause: str | None
    if req.write is not None:
        w = req.write
        intent, cause = await scope.write_intent(w.path, w.content, mode=w.mode), w.cause
    elif req.patch is not None:
        p = req.patch
        if p.path is None:
            intent = await scope.patch_intent(p.diff, three_way=p.three_way)
        else:
            intent = await scope.patch_intent(p.path, p.diff, three_way=p.three_way)
        cause = p.cause
    elif req.delete is not None:
        intent, cause = scope.delete_intent(req.delete.path), req.delete.cause
    else:
        assert req.exec is not None
        e = req.exec
        intent = Exec(argv=tuple(e.argv), timeout=e.timeout, network=e.network)
        cause = e.cause
    with hub.timed("review"):
        r = await scope.review(intent, cause=cause)
    return json_response(_result(r))


async def rewind(request: web.Request) -> web.Response:
    hub, who, scope = _scope(request)
    req = await read_body(request, RewindRequest)
    with hub.timed("scope.rewind"):
        if who.admin and scope.name != "root":
            steered = await control.rewind(scope, req.to, steps=req.steps, cause=req.cause)
            r = steered.result or steered.decision
        else:
            r = await scope.rewind(req.to, steps=req.steps, cause=req.cause)
    return json_response(_result(r))


async def merge(request: web.Request) -> web.Response:
    hub, who, scope = _scope(request)
    req = await read_body(request, MergeRequest)
    other = hub.scope(who, req.other)
    with hub.timed("scope.merge"):
        m = await scope.merge(other, strategy=req.strategy, dry_run=req.dry_run, cause=req.cause)
    return json_response(MergeResponse.of(m))


async def merge_team(request: web.Request) -> web.Response:
    hub, who, scope = _scope(request)
    req = await read_body(request, TeamMergeRequest)
    members = [hub.scope(who, m) for m in req.members]  # each one the token may act on
    with hub.timed("scope.merge_team"):
        t = await hub.coordinator.merge_team(scope, members, order=req.order,
                                             strategy=req.strategy, dry_run=req.dry_run,
                                             cause=req.cause)
    return json_response(TeamMergeResponse.of(t))


async def discard(request: web.Request) -> web.Response:
    hub, who = caller(request)
    name = request.match_info["name"]
    gone = hub.coordinator.scopes.get(name)
    if gone is not None and gone.discarded:  # idempotent: the discard that was
        if not who.admin:
            hub.live_tokens.require(who, name, hub.coordinator)
        return await _discarded(hub, gone.head)
    if gone is None and who.admin:  # discarded and forgotten: its archived discard
        last = await hub.coordinator.io(hub.coordinator.last_discard, name)
        if last is not None:
            return await _discarded(hub, last)
    scope = hub.scope(who, name)
    req = await read_body(request, DiscardRequest)
    if scope.name == "root":
        raise BadRequest("the root scope cannot be discarded")
    with hub.timed("scope.discard"):
        if who.admin:
            steered = await control.discard(scope, cause=req.cause)
            if not steered.decision.ok:
                return json_response(_result(steered.decision))
            r = steered.result
        else:
            r = await scope.discard(cause=req.cause)
    if r is None:  # discarded meanwhile by another request
        return await _discarded(hub, scope.head)
    return json_response(_result(r))


async def _discarded(hub: Hub, commit: str) -> web.Response:
    """The answer to discarding a discarded scope: its discard, as first answered."""
    entry = await hub.coordinator.io(hub.coordinator.trace.show, commit)
    assert entry.effect is not None
    return json_response(_result(Result(entry.effect, entry.commit)))


async def send(request: web.Request) -> web.Response:
    hub, _, scope = _scope(request)
    req = await read_body(request, SendRequest)
    with hub.timed("message"):
        r = await scope.send(req.to, req.text)
    return json_response(_result(r))


async def take_messages(request: web.Request) -> web.Response:
    _, _, scope = _scope(request)
    await read_body(request, TakeRequest)  # a malformed body leaves the inbox as it was
    return json_response(MessagesOut(messages=scope.take_messages()))


async def inject(request: web.Request) -> web.Response:
    _, who, scope = _scope(request)
    Tokens.require_admin(who)
    req = await read_body(request, InjectRequest)
    return json_response(_result(await control.inject(scope, req.text, sender=req.sender)))


async def handoff(request: web.Request) -> web.Response:
    hub, who, scope = _scope(request)
    Tokens.require_admin(who)
    req = await read_body(request, HandoffRequest)
    source = hub.scope(who, req.source)
    done = await control.handoff(scope, source, strategy="theirs", note=req.note or "")
    if done.merge is None:
        raise BadRequest(f"the handoff was blocked: {done.decision.reason}")
    return json_response(MergeResponse.of(done.merge))


# -- trace --------------------------------------------------------------------


def _entry(e: TraceEntry) -> TraceEntryOut:
    return TraceEntryOut(commit=e.commit, parents=list(e.parents), tree=e.tree,
                         subject=e.subject, effect=e.effect, time=e.time)


LOG_PAGE_MAX = 1000
"""The most entries one page of `/log` holds."""


async def log(request: web.Request) -> web.StreamResponse:
    hub, _, scope = _scope(request)
    raw_limit, before = request.query.get("limit"), request.query.get("before")
    if raw_limit is None and before is None:  # the whole branch, oldest first
        return await _stream_log(request, hub, scope)
    try:
        limit = int(raw_limit) if raw_limit is not None else 50
    except ValueError as e:
        raise BadRequest(f"limit must be an integer, not {raw_limit!r}") from e
    if not 1 <= limit <= LOG_PAGE_MAX:
        raise BadRequest(f"limit must be between 1 and {LOG_PAGE_MAX}")
    below = _uncursor(hub, scope.name, before) if before is not None else None
    coord = hub.coordinator
    page = await coord.io(coord.trace.log_page, scope.head, limit=limit, before=below)
    after = _cursor(hub, scope.name, page.next) if page.next is not None else None
    return json_response(LogResponse(scope=scope.name, entries=[_entry(e) for e in page.entries],
                             next=after))


LOG_CHUNK = 256
"""Entries of a streamed whole-branch log read per thread hop."""


async def _stream_log(request: web.Request, hub: Hub, scope: Scope) -> web.StreamResponse:
    """The whole branch as `LogResponse` JSON (the same bytes), sent as it is
    read: a chunk of entries at a time, so a long branch is never held whole.
    The first chunk is read before the answer starts, so an error there still
    gets its status."""
    records = hub.coordinator.trace.stream(scope.head)

    def chunk() -> list[str]:
        return [_entry(e).model_dump_json() for e in itertools.islice(records, LOG_CHUNK)]

    part = await hub.coordinator.io(chunk)
    head, _, tail = LogResponse(scope=scope.name, entries=[]).model_dump_json().rpartition(
        '"entries":[]')
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    await resp.write(f'{head}"entries":['.encode())
    first = True
    while part:
        await resp.write((("" if first else ",") + ",".join(part)).encode())
        first = False
        part = await hub.coordinator.io(chunk)
    await resp.write(f"]{tail}".encode())
    await resp.write_eof()
    return resp


def _cursor_mac(hub: Hub, scope: str, commit: str) -> str:
    msg = f"{scope}\0{commit}".encode()
    return hmac.new(hub.coordinator.cursor_key, msg, hashlib.sha256).hexdigest()[:20]


def _cursor(hub: Hub, scope: str, commit: str) -> str:
    """A log cursor: the commit to continue below, signed for this scope, so a
    cursor needs no walk to check that it lies on the scope's branch."""
    return f"{commit}.{_cursor_mac(hub, scope, commit)}"


def _uncursor(hub: Hub, scope: str, cursor: str) -> str:
    commit, _, mac = cursor.partition(".")
    if not hmac.compare_digest(mac.encode(), _cursor_mac(hub, scope, commit).encode()):
        raise NotFound(f"{cursor!r} is not a cursor of scope {scope!r}'s log "
                       "(cursors last while the server runs)")
    return commit


async def show(request: web.Request) -> web.Response:
    hub, who = caller(request)
    coord = hub.coordinator
    entry = await coord.io(coord.trace.show, request.match_info["commit"])
    if not who.admin:
        owner = coord.scopes.get(entry.effect.scope) if entry.effect is not None else None
        # ... and of the incarnation it covers: a commit of an earlier scope of
        # the same name is not in the history that starts at this one's fork.
        if (owner is None or not hub.live_tokens.covers(who, owner.name, coord)
                or not await coord.io(coord.trace.is_ancestor, owner.fork_point, entry.commit)):
            raise Forbidden("this commit is not on a scope this token acts on")
    return json_response(_entry(entry))


async def blob(request: web.Request) -> web.Response:
    hub, who = caller(request)
    Tokens.require_admin(who)
    oid = request.match_info["id"]
    if not is_object_id(oid):
        raise BadRequest(f"{oid!r} is not a full hex blob id")
    data = await hub.coordinator.io(hub.coordinator.trace.blob, oid)
    return json_response(BlobOut(id=oid, content_b64=b64(data)))


# -- the human gate -----------------------------------------------------------


async def gate_pending(request: web.Request) -> web.Response:
    hub, who = caller(request)
    Tokens.require_admin(who)
    items = [_gate_item(h) for h in hub.gate.pending()]
    return json_response(GatePending(items=items))


async def _gate_answer(request: web.Request, approve: bool) -> web.Response:
    hub, who = caller(request)
    Tokens.require_admin(who)
    req = await read_body(request, GateAnswer)
    held = hub.gate.answer(request.match_info["id"], approve, req.reason)
    return json_response(_gate_item(held))


async def gate_approve(request: web.Request) -> web.Response:
    return await _gate_answer(request, True)


async def gate_reject(request: web.Request) -> web.Response:
    return await _gate_answer(request, False)


_S = "/v1/scopes/{name}"
_PATH = Query("path", "File path relative to the workspace root", required=True)

ROUTES: tuple[Route, ...] = (
    Route("GET", "/v1/health", health, "Liveness and the snapshot commit", response=Health,
          auth="none", tag="service"),
    Route("GET", "/", dashboard, "The dashboard: scopes, the human gate, live events (HTML)",
          auth="none", tag="service", content_type="text/html"),
    Route("GET", "/openapi.json", openapi_json, "This document", auth="none", tag="service"),
    Route("GET", "/metrics", metrics, "Prometheus metrics (they name every scope)",
          auth="admin", tag="service", content_type="text/plain"),
    Route("GET", "/v1/scopes", list_scopes, "Live scopes the token may act on",
          response=ScopesOut),
    Route("GET", _S, get_scope, "One scope", response=ScopeOut),
    Route("POST", _S + "/fork", fork, "Fork a child scope; returns its token",
          body=ForkRequest, response=ForkResponse),
    Route("GET", _S + "/file", read_file, "Read a file (content base64)", query=(_PATH,),
          response=ReadResponse),
    Route("GET", _S + "/dir", list_dir, "List a directory",
          query=(Query("path", "Directory ('' or absent: the root)"),), response=NamesOut),
    Route("POST", _S + "/write", write, "Write a file", body=WriteRequest, response=ResultOut),
    Route("POST", _S + "/patch", patch,
          "Apply a patch as git apply does: a whole multi-file patch, or hunks to `path`",
          body=PatchRequest,
          response=ResultOut),
    Route("POST", _S + "/delete", delete, "Delete a file", body=DeleteRequest,
          response=ResultOut),
    Route("POST", _S + "/exec", exec_, "Run a command transactionally", body=ExecRequest,
          response=ExecResultOut),
    Route("POST", _S + "/review", review,
          "Review only: the policy chain's decision on a write, patch, delete or exec, "
          "recorded (status allowed, rewritten or blocked) but not carried out",
          body=ReviewRequest, response=ResultOut),
    Route("POST", _S + "/rewind", rewind, "Rewind to a commit or by steps",
          body=RewindRequest, response=ResultOut),
    Route("POST", _S + "/merge", merge, "Merge another scope into this one (or dry-run)",
          body=MergeRequest, response=MergeResponse),
    Route("POST", _S + "/merge-team", merge_team,
          "Merge several scopes into this one in sequence, as git merges them one after "
          "another, in the order given or fewest conflicts first (or dry-run); a conflict "
          "stops the fold", body=TeamMergeRequest, response=TeamMergeResponse),
    Route("POST", _S + "/discard", discard, "Archive the scope and release its workspace",
          body=DiscardRequest, response=ResultOut),
    Route("POST", _S + "/send", send, "Send a message to another scope's inbox",
          body=SendRequest, response=ResultOut),
    Route("POST", _S + "/inbox/take", take_messages, "Take the messages received so far",
          body=TakeRequest, response=MessagesOut),
    Route("POST", _S + "/inject", inject, "Supervisor: deliver a note into the inbox",
          body=InjectRequest, response=ResultOut, auth="admin", tag="supervisor"),
    Route("POST", _S + "/handoff", handoff,
          "Supervisor: this scope takes over another's work (merge, strategy theirs)",
          body=HandoffRequest, response=MergeResponse, auth="admin", tag="supervisor"),
    Route("GET", _S + "/log", log,
          "Effects on the scope's branch: all, oldest first; or, with limit or before, "
          "one page, newest first, and the cursor to the next",
          query=(Query("limit", f"Entries per page (1-{LOG_PAGE_MAX}; default 50 when "
                                "`before` is given)", type="integer"),
                 Query("before", "A previous page's `next`: the page starts below it")),
          response=LogResponse, tag="trace"),
    Route("GET", "/v1/trace/{commit}", show, "One trace commit with its effect",
          response=TraceEntryOut, tag="trace"),
    Route("GET", "/v1/blobs/{id}", blob, "A blob of the trace (content base64)",
          response=BlobOut, auth="admin", tag="trace"),
    Route("GET", "/v1/gate/pending", gate_pending, "Intents held at the human gate",
          response=GatePending, auth="admin", tag="supervisor"),
    Route("POST", "/v1/gate/{id}/approve", gate_approve, "Approve a held intent",
          body=GateAnswer, response=GateItem, auth="admin", tag="supervisor"),
    Route("POST", "/v1/gate/{id}/reject", gate_reject, "Reject (block) a held intent",
          body=GateAnswer, response=GateItem, auth="admin", tag="supervisor"),
    Route("GET", "/v1/events", events,
          "WebSocket: intents, decisions and effects as JSON ({type, commit, effect})",
          query=(Query("scope", "Only these scopes", many=True),
                 Query("kind", "Only these effect kinds (fs.write, exec, ...)", many=True),
                 Query("type", "Only these event types (intent, decision, effect)", many=True),
                 Query("token", "The bearer token (browsers cannot set headers)")),
          websocket=True, tag="streams"),
    Route("GET", "/v1/reviewers", reviewers,
          "WebSocket: review pending intents (see the reviewer protocol)",
          query=(Query("name", "The reviewer's name (recorded in decisions)"),
                 Query("kind", "Effect kinds to review (none: all)", many=True),
                 Query("timeout", "Seconds to answer before abstaining", type="number"),
                 Query("token", "The admin token")),
          auth="admin", websocket=True, tag="streams"),
)

# The dashboard's read-only views (graph, diffs, scope overview) live in _views.py.
from ._cuts import CUT_ROUTES  # noqa: E402
from ._dashboard import VIEW_ROUTES  # noqa: E402
from ._teams import TEAM_ROUTES  # noqa: E402

ROUTES = ROUTES + CUT_ROUTES + TEAM_ROUTES + VIEW_ROUTES
