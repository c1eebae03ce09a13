"""An async client for the Corral server, for agents and supervisors in other processes.

::

    async with CorralClient("http://127.0.0.1:8765", token=admin) as corral:
        alice = await corral.fork("root", "alice")          # ForkResponse, .token
        agent = corral.with_token(alice.token)               # acts on alice only
        r = await agent.write("alice", "src/app.py", b"...")  # ResultOut; r.ok, r.reason
        async for event in corral.events(scopes=["alice"]):   # dicts: type, commit, effect
            ...

Error responses raise the same exceptions as the Python API (PathError,
UnknownScope, ScopeExists, FileNotFoundError, TeamError, ...); 401/403 raise AuthError /
Forbidden; anything else a `ClientError` (a CorralError) with `.status`.

A team over HTTP: `create_team`, `teams`, and `team(scope, team)`, a `TeamClient` acting as
the member whose scope it names (the token must act on that scope), with the operations
of `TeamMember` in process::

    await corral.create_team("dev", ["lead", "ui"], lead="lead")
    ui = corral.with_token(ui_token).team("ui", "dev")
    t = (await ui.add("build the form")).task
    if (await ui.claim(t.id)).won: ...

Over 500 lines: one method per route of the API (the team's calls in `TeamCalls` and
`TeamClient`), so what a client can do is read in one file, beside the route table.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import quote

import aiohttp
from pydantic import BaseModel

from .records import _errors as _errors
from .records._effects import Message
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
from .records._wire import (
    BlobOut,
    CutOut,
    DecisionsOut,
    ExecResultOut,
    ForkResponse,
    GateItem,
    GatePending,
    LogResponse,
    MergeResponse,
    MessagesOut,
    NamesOut,
    ReadResponse,
    ResultOut,
    ScopeOut,
    ScopesOut,
    TeamMergeResponse,
    TraceEntryOut,
    WriteRequest,
    b64,
)
from .server._auth import AuthError, Forbidden

__all__ = ["ClientError", "CorralClient", "ReviewRequest", "TeamClient"]

M = TypeVar("M", bound=BaseModel)


class ClientError(_errors.CorralError):
    """An error response with no more specific class; `.status` is the HTTP status."""

    def __init__(self, message: str, status: int, error: str = "") -> None:
        super().__init__(message)
        self.status = status  # type: ignore[misc]
        self.error = error


_BY_NAME: dict[str, type[Exception]] = {
    name: getattr(_errors, name) for name in _errors.__all__
} | {
    "AuthError": AuthError,
    "Forbidden": Forbidden,
    "FileNotFoundError": FileNotFoundError,
    "IsADirectoryError": IsADirectoryError,
    "NotADirectoryError": NotADirectoryError,
}


def _raise(status: int, payload: Any) -> None:
    error = payload.get("error", "") if isinstance(payload, dict) else ""
    detail = payload.get("detail", str(payload)) if isinstance(payload, dict) else str(payload)
    cls = _BY_NAME.get(error)
    if cls is None:
        if status == 401:
            cls = AuthError
        elif status == 403:
            cls = Forbidden
        else:
            raise ClientError(f"{status} {error}: {detail}", status, error)
    raised = cls(detail)
    # The error classes know nothing of HTTP: the status that carried it rides along.
    raised.status = status  # type: ignore[attr-defined]
    raise raised


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


class ReviewRequest(dict):  # type: ignore[type-arg]
    """One `review` message: `["id"]` and `["effect"]` (the pending effect as JSON)."""


class Reviewer:
    """A connected external reviewer: iterate requests, `answer` each."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, registered: dict[str, Any]):
        self._ws = ws
        self.registered = registered

    def __aiter__(self) -> AsyncIterator[ReviewRequest]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[ReviewRequest]:
        async for msg in self._ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(msg.data)
            if data.get("type") == "review":
                yield ReviewRequest(data)

    async def answer(
        self,
        request: ReviewRequest | str,
        verdict: Literal["allow", "block", "rewrite", "defer", "abstain"],
        reason: str = "",
        *,
        rewritten: dict[str, Any] | None = None,
        content: bytes | None = None,
        until: str | None = None,
    ) -> None:
        rid = request if isinstance(request, str) else request["id"]
        body: dict[str, Any] = {"type": "answer", "id": rid, "verdict": verdict,
                                "reason": reason}
        if rewritten is not None:
            body["rewritten"] = rewritten
        if content is not None:
            body["content_b64"] = b64(content).decode("ascii")
        if until is not None:
            body["until"] = until
        await self._ws.send_str(json.dumps(body))


class CorralClient(TeamCalls):
    """The API over HTTP. Use as an async context manager (it owns a session),
    or pass your own `session`. A team's calls (`create_team`, `teams`, `team`) are
    `TeamCalls`'."""

    def __init__(self, base_url: str, token: str | None = None, *,
                 session: aiohttp.ClientSession | None = None, timeout: float = 300) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self._session = session
        self._owns = session is None
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    async def __aenter__(self) -> CorralClient:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns and self._session is not None:
            await self._session.close()
            self._session = None

    def with_token(self, token: str) -> CorralClient:
        """A client sharing this one's connection pool, acting with `token`."""
        return CorralClient(self.base_url, token, session=self.session)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use `async with CorralClient(...)` first")
        return self._session

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def request(self, method: str, path: str, *, json_body: Any = None,
                      params: Any = None) -> Any:
        """One API call; returns the decoded JSON, raises the mapped error."""
        data = json.dumps(json_body).encode() if json_body is not None else None
        headers = self._headers()
        if data is not None:
            headers["Content-Type"] = "application/json"
        async with self.session.request(method, self.base_url + path, data=data,
                                        params=params, headers=headers) as resp:
            raw = await resp.read()
            try:
                payload = json.loads(raw) if raw else None
            except ValueError:
                payload = raw.decode(errors="replace")
            if resp.status >= 400:
                _raise(resp.status, payload)
            return payload

    async def _call(self, model: type[M], method: str, path: str, body: Any = None,
                    params: Any = None) -> M:
        return model.model_validate(await self.request(method, path, json_body=body,
                                                       params=params))

    @staticmethod
    def _s(scope: str) -> str:
        return f"/v1/scopes/{scope}"

    # -- scopes ---------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        return await self.request("GET", "/v1/health")  # type: ignore[no-any-return]

    async def scopes(self) -> list[ScopeOut]:
        return (await self._call(ScopesOut, "GET", "/v1/scopes")).scopes

    async def scope(self, name: str) -> ScopeOut:
        return await self._call(ScopeOut, "GET", self._s(name))

    async def fork(self, parent: str, name: str, *, at: str | None = None) -> ForkResponse:
        """Fork `name` from `parent` (at its head, or at `at`, a commit in its
        history); the response carries the child's token."""
        body: dict[str, object] = {"name": name}
        if at is not None:
            body["at"] = at
        return await self._call(ForkResponse, "POST", self._s(parent) + "/fork", body)

    async def read(self, scope: str, path: str) -> bytes:
        r = await self._call(ReadResponse, "GET", self._s(scope) + "/file", params={"path": path})
        return r.content_b64

    async def listdir(self, scope: str, path: str = "") -> list[str]:
        return (await self._call(NamesOut, "GET", self._s(scope) + "/dir",
                                 params={"path": path})).names

    async def write(self, scope: str, path: str, data: bytes, *, mode: int = 0o100644,
                    cause: str | None = None) -> ResultOut:
        # The server's own record builds the body (content as base64); the server validates it
        body = WriteRequest.model_construct(path=path, content_b64=data, mode=mode, cause=cause)
        return await self._call(ResultOut, "POST", self._s(scope) + "/write",
                                body.model_dump(mode="json"))

    async def patch(self, scope: str, path_or_diff: str, diff: str | None = None, *,
                    three_way: bool = False, cause: str | None = None) -> ResultOut:
        """As Scope.patch: `patch(scope, diff)` applies a whole multi-file patch,
        `patch(scope, path, diff)` hunks of one file."""
        body: dict[str, object] = {"diff": path_or_diff if diff is None else diff,
                                   "three_way": three_way, "cause": cause}
        if diff is not None:
            body["path"] = path_or_diff
        return await self._call(ResultOut, "POST", self._s(scope) + "/patch", body)

    async def delete(self, scope: str, path: str, *, cause: str | None = None) -> ResultOut:
        return await self._call(ResultOut, "POST", self._s(scope) + "/delete",
                                {"path": path, "cause": cause})

    async def exec(self, scope: str, argv: Sequence[str], *, timeout: float = 120.0,
                   network: bool = False, env: dict[str, str] | None = None,
                   cause: str | None = None) -> ExecResultOut:
        return await self._call(ExecResultOut, "POST", self._s(scope) + "/exec",
                                {"argv": list(argv), "timeout": timeout, "network": network,
                                 "env": env, "cause": cause})

    async def review(self, scope: str, **intent: Any) -> ResultOut:
        """The policy chain's decision on one intent, recorded but not carried out: give
        exactly one of `write=`, `patch=`, `delete=`, `exec=` as the body of that call
        (e.g. `exec={"argv": ["make"]}`, `write={"path": p, "content_b64": b}`)."""
        return await self._call(ResultOut, "POST", self._s(scope) + "/review", intent)

    async def rewind(self, scope: str, to: str | None = None, *, steps: int | None = None,
                     cause: str | None = None) -> ResultOut:
        return await self._call(ResultOut, "POST", self._s(scope) + "/rewind",
                                {"to": to, "steps": steps, "cause": cause})

    async def merge(self, scope: str, other: str, *,
                    strategy: Literal["fail", "ours", "theirs", "union"] = "fail",
                    dry_run: bool = False, cause: str | None = None) -> MergeResponse:
        return await self._call(MergeResponse, "POST", self._s(scope) + "/merge",
                                {"other": other, "strategy": strategy, "dry_run": dry_run,
                                 "cause": cause})

    async def merge_team(self, scope: str, members: Sequence[str], *,
                         order: Literal["given", "fewest-conflicts"] = "given",
                         strategy: Literal["fail", "ours", "theirs", "union"] = "fail",
                         dry_run: bool = False, cause: str | None = None) -> TeamMergeResponse:
        """Merge `members` into `scope` one after another (`Coordinator.merge_team`)."""
        return await self._call(TeamMergeResponse, "POST", self._s(scope) + "/merge-team",
                                {"members": list(members), "order": order,
                                 "strategy": strategy, "dry_run": dry_run, "cause": cause})

    async def discard(self, scope: str, *, cause: str | None = None) -> ResultOut:
        return await self._call(ResultOut, "POST", self._s(scope) + "/discard", {"cause": cause})

    async def send(self, scope: str, to: str, text: str) -> ResultOut:
        return await self._call(ResultOut, "POST", self._s(scope) + "/send",
                                {"to": to, "text": text})

    async def take_messages(self, scope: str) -> list[Message]:
        return (await self._call(MessagesOut, "POST", self._s(scope) + "/inbox/take")).messages

    # -- supervisor -----------------------------------------------------------

    async def inject(self, scope: str, text: str, *, sender: str = "supervisor") -> ResultOut:
        return await self._call(ResultOut, "POST", self._s(scope) + "/inject",
                                {"text": text, "sender": sender})

    async def handoff(self, scope: str, source: str, *, note: str | None = None) -> MergeResponse:
        return await self._call(MergeResponse, "POST", self._s(scope) + "/handoff",
                                {"source": source, "note": note})

    # -- the team: consistent cuts (admin) --------------------------------------------

    async def cut(self, scopes: Sequence[str] | None = None, *, name: str | None = None
                  ) -> CutOut:
        """A consistent cut of `scopes` (default every live one), recorded as `name`."""
        return await self._call(CutOut, "POST", "/v1/cuts",
                                {"scopes": list(scopes) if scopes is not None else None,
                                 "name": name})

    async def cuts(self) -> list[str]:
        return (await self._call(NamesOut, "GET", "/v1/cuts")).names

    async def read_cut(self, name: str) -> CutOut:
        return await self._call(CutOut, "GET", f"/v1/cuts/{quote(name, safe='')}")

    async def fork_team(self, cut: str, prefix: str) -> list[ScopeOut]:
        return (await self._call(ScopesOut, "POST", f"/v1/cuts/{quote(cut, safe='')}/fork",
                                 {"prefix": prefix})).scopes

    async def rewind_team(self, cut: str, *, reason: str = "") -> list[str]:
        return (await self._call(DecisionsOut, "POST",
                                 f"/v1/cuts/{quote(cut, safe='')}/rewind",
                                 {"reason": reason})).decisions

    async def gate_pending(self) -> list[GateItem]:
        return (await self._call(GatePending, "GET", "/v1/gate/pending")).items

    async def approve(self, id: str, reason: str = "") -> GateItem:
        return await self._call(GateItem, "POST", f"/v1/gate/{id}/approve", {"reason": reason})

    async def reject(self, id: str, reason: str = "") -> GateItem:
        return await self._call(GateItem, "POST", f"/v1/gate/{id}/reject", {"reason": reason})

    async def next_held(self, events: AsyncIterator[dict[str, Any]]) -> GateItem:
        """The next intent held at the human gate, waiting for its announcement on
        `events`: a stream from `subscribe(types="decision")` (or wider) entered
        before the intent was proposed, so the hold cannot be missed. Bound the
        wait yourself (`asyncio.timeout`); raises ClientError if the stream ends."""
        async for event in events:
            effect = event.get("effect") or {}
            decision = effect.get("decision") or {}
            if (event.get("type") == "decision" and decision.get("verdict") == "defer"
                    and decision.get("policy") == "human-gate"):
                # Announced once listed; answered meanwhile (by someone else), it is gone.
                for item in reversed(await self.gate_pending()):
                    if item.effect.id == effect.get("id"):
                        return item
        raise ClientError("the event stream ended before anything was held at the gate", 500)

    # -- trace ----------------------------------------------------------------

    async def log(self, scope: str, *, limit: int | None = None,
                  before: str | None = None) -> LogResponse:
        """The scope's whole branch, oldest first; with `limit` or `before`, one
        page, newest first, whose `next` is the `before` of the next page."""
        params = {k: str(v) for k, v in (("limit", limit), ("before", before))
                  if v is not None}
        return await self._call(LogResponse, "GET", self._s(scope) + "/log",
                                params=params or None)

    async def show(self, commit: str) -> TraceEntryOut:
        return await self._call(TraceEntryOut, "GET", f"/v1/trace/{commit}")

    async def blob(self, oid: str) -> bytes:
        r = await self._call(BlobOut, "GET", f"/v1/blobs/{oid}")
        return r.content_b64

    async def metrics(self) -> str:
        """The Prometheus text of `/metrics` (needs the admin token)."""
        async with self.session.get(self.base_url + "/metrics", headers=self._headers()) as resp:
            text = await resp.text()
            if resp.status >= 400:
                try:
                    payload: Any = json.loads(text)
                except ValueError:
                    payload = text
                _raise(resp.status, payload)
            return text

    # -- streams --------------------------------------------------------------

    def _ws_url(self, path: str) -> str:
        return self.base_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + path

    @staticmethod
    def _multi(**values: Iterable[str] | str | None) -> list[tuple[str, str]]:
        # A lone string is one value, not its letters ("bob", not "b", "o", "b").
        return [(k, v) for k, vs in values.items()
                for v in ((vs,) if isinstance(vs, str) else (vs or ()))]

    @asynccontextmanager
    async def subscribe(
        self, *, scopes: Iterable[str] | str | None = None,
        kinds: Iterable[str] | str | None = None, types: Iterable[str] | str | None = None,
        scope: str | None = None, kind: str | None = None, type: str | None = None,
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """`async with client.subscribe(...) as events: async for e in events` — the
        subscription is live once the context is entered. Filters take one name or
        several (`scope="bob"` or `scopes=["alice", "bob"]`, likewise kind and type),
        as the `/v1/events` query does."""
        params = self._multi(scope=scopes, kind=kinds, type=types)
        params += self._multi(scope=scope, kind=kind, type=type)
        async with self.session.ws_connect(self._ws_url("/v1/events"), params=params,
                                           headers=self._headers()) as ws:
            hello = await ws.receive_json()
            if hello.get("type") != "subscribed":
                raise ClientError(f"unexpected first message {hello}", 500)

            async def stream() -> AsyncIterator[dict[str, Any]]:
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        break
                    yield json.loads(msg.data)

            yield stream()

    async def events(
        self, *, scopes: Iterable[str] | str | None = None,
        kinds: Iterable[str] | str | None = None, types: Iterable[str] | str | None = None,
        scope: str | None = None, kind: str | None = None, type: str | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Every matching event, as dicts `{type, commit, effect}` (filters as `subscribe`)."""
        async with self.subscribe(scopes=scopes, kinds=kinds, types=types, scope=scope,
                                  kind=kind, type=type) as stream:
            async for event in stream:
                yield event

    @asynccontextmanager
    async def reviewer(self, name: str, kinds: Iterable[str] | None = None, *,
                       timeout: float = 5.0) -> AsyncIterator[Reviewer]:
        """Connect as an external reviewer (admin token) of `kinds` (None: all)."""
        params = [("name", name), ("timeout", str(timeout)), *self._multi(kind=kinds)]
        try:
            ws_cm = self.session.ws_connect(self._ws_url("/v1/reviewers"), params=params,
                                            headers=self._headers())
            ws = await ws_cm.__aenter__()
        except aiohttp.WSServerHandshakeError as e:
            _raise(e.status, {"error": "", "detail": e.message})
            raise
        try:
            registered = await ws.receive_json()
            yield Reviewer(ws, registered)
        finally:
            await ws_cm.__aexit__(None, None, None)

