"""An MCP server per scope (the official `mcp` SDK): any MCP client works in a supervised scope.

Tools: read_file, list_files, write_file, edit, run, send_message, inbox, finish. Every tool
that changes something is an effect under the policy chain (`fs.write`, `fs.patch`, `exec`,
`message`); a blocked intent comes back as a tool error (`isError: true`) whose text is the
supervisor's policy and reason, and nothing touched the scope. `finish` tells the scope's
parent (a `message` effect) and refuses further changes.

Two transports:

- stdio, `corral mcp --scope NAME --url URL --token TOKEN` (a running `corral serve`, through
  `CorralClient`), or `corral mcp --scope NAME --state DIR` (in process: the coordinator
  opens with the settings the state records, so the chain a server ran with, its policies
  and gate rules included, holds here too; a gate rule blocks, as nobody can answer it);
- streamable HTTP on `corral serve` at `/v1/scopes/{name}/mcp`, with the scope's bearer
  token (`mount`, registered in the `corral.server` entry point group).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ._access import RUN_ENV, LocalAccess, RemoteAccess, Said, ScopeAccess, blocked_text

if TYPE_CHECKING:
    from aiohttp import web
    from mcp.server.mcpserver import MCPServer

    from coordinator import Route

__all__ = ["MCP_TOOLS", "build_server", "mount", "serve_stdio"]

MCP_TOOLS = ("read_file", "list_files", "write_file", "edit", "run", "send_message", "inbox",
             "finish")

_INSTRUCTIONS = (
    "You work in a Corral scope: your own copy-on-write copy of a git repository, supervised. "
    "Every change (write_file, edit, run) is reviewed before it lands; a blocked change comes "
    "back as a tool error that says why: adapt instead of retrying the same change. Commands "
    "run in the repository root with no network; the files they change are kept only if the "
    "supervisor accepts them. Call finish with a summary when done."
)


def build_server(access: ScopeAccess) -> MCPServer:
    """An MCP server whose tools act on `access`'s scope. Import errors mean the `mcp`
    extra is missing (`pip install 'corral[mcp]'`)."""
    from mcp.server.mcpserver import MCPServer

    server: MCPServer = MCPServer(f"corral-{access.name}", instructions=_INSTRUCTIONS)
    finished: list[str] = []  # finish's summary: after it, nothing more changes
    _file_tools(server, access, finished)
    _team_tools(server, access, finished)
    return server


def _changed(said: Said, ok: str) -> str:
    from mcp.server.mcpserver.exceptions import ToolError

    if said.blocked:
        raise ToolError(blocked_text(said))
    if not said.ok:
        raise ToolError(f"not applied ({said.reason or 'failed'})")
    return ok


def _live(finished: list[str]) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    if finished:
        raise ToolError(f"the task was finished ({finished[0]!r}); nothing more changes")


async def _guarded(coro: Any) -> Any:
    from mcp.server.mcpserver.exceptions import ToolError

    from coordinator import CorralError

    try:
        return await coro
    except (CorralError, OSError, ValueError, UnicodeError) as e:
        raise ToolError(f"{type(e).__name__}: {e}") from e


def _file_tools(server: MCPServer, access: ScopeAccess, finished: list[str]) -> None:
    """read_file, list_files, write_file, edit."""
    from mcp.server.mcpserver.exceptions import ToolError

    @server.tool()
    async def read_file(path: str) -> str:
        """Read a file of the repository (path relative to its root)."""
        data = await _guarded(access.read(path))
        return bytes(data).decode(errors="replace")

    @server.tool()
    async def list_files(path: str = "") -> str:
        """List a directory of the repository ('' is the root), one name a line."""
        names = await _guarded(access.listdir(path))
        return "\n".join(n for n in names if n != ".git")

    @server.tool()
    async def write_file(path: str, content: str) -> str:
        """Create or overwrite a file with the given content."""
        _live(finished)
        return _changed(await _guarded(access.write(path, content.encode())), f"wrote {path}")

    @server.tool()
    async def edit(path: str, old: str = "", new: str = "", diff: str = "") -> str:
        """Change a file: replace the exact text `old` (which must occur once) with `new`,
        or apply a unified diff given as `diff`."""
        _live(finished)
        if diff:
            return _changed(await _guarded(access.patch(path, diff)), f"patched {path}")
        current = bytes(await _guarded(access.read(path))).decode()
        count = current.count(old) if old else 0
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise ToolError(f"`old` {where} in {path}; give a longer unique excerpt")
        said = await _guarded(access.write(path, current.replace(old, new, 1).encode()))
        return _changed(said, f"edited {path}")


def _team_tools(server: MCPServer, access: ScopeAccess, finished: list[str]) -> None:
    """run, send_message, inbox, finish."""
    from mcp.server.mcpserver.exceptions import ToolError

    @server.tool()
    async def run(command: str, timeout: float = 120.0) -> str:
        """Run a shell command in the repository root (no network). Files it changes are
        kept only if the supervisor accepts them. Returns the exit code and output."""
        _live(finished)
        said = await _guarded(access.run(["sh", "-c", command], min(timeout, 600.0), RUN_ENV))
        if said.blocked:
            raise ToolError(blocked_text(said))
        head = f"exit code {said.returncode}" + (" (timed out)" if said.timed_out else "")
        if said.returncode != 0:
            raise ToolError(f"{head}\n{said.output}")
        return f"{head}\n{said.output}"

    @server.tool()
    async def send_message(to: str, text: str) -> str:
        """Send a message to another agent's scope (shown in its inbox)."""
        return _changed(await _guarded(access.send(to, text)), f"sent to {to}")

    @server.tool()
    async def inbox() -> str:
        """Take the messages other agents and the supervisor sent you since the last look."""
        got = await _guarded(access.inbox())
        return "\n".join(f"from {s or 'someone'}: {t}" for s, t in got) or "no messages"

    @server.tool()
    async def finish(summary: str) -> str:
        """Declare the task done, with a short summary (your parent scope is told)."""
        _live(finished)
        if access.parent is not None:
            _changed(await _guarded(access.send(access.parent, f"finished: {summary}")), "")
        finished.append(summary)
        return "finished"


async def serve_stdio(scope: str, *, url: str | None = None, token: str | None = None,
                      state: str | None = None, parent: str = "root") -> None:
    """Serve `scope`'s tools over stdio until the client closes the pipe. With `url`, act
    through a running server with `token`; with `state`, open the coordinator in process
    (forking `scope` from `parent` when it does not exist yet)."""
    async with _access(scope, url=url, token=token, state=state, parent=parent) as access:
        await build_server(access).run_stdio_async()


@asynccontextmanager
async def _access(scope: str, *, url: str | None, token: str | None, state: str | None,
                  parent: str) -> AsyncIterator[ScopeAccess]:
    if url is not None:
        from coordinator.client import CorralClient

        async with CorralClient(url, token) as client:
            remote = RemoteAccess(client, scope)
            await remote.load_parent()
            yield remote
        return
    if state is None:
        raise ValueError("give --url (a running corral serve) or --state (in process)")
    from coordinator import Coordinator

    async with Coordinator.open(state) as coord:
        existing = coord.scopes.get(scope)
        s = existing if existing is not None and not existing.discarded else (
            await coord.scope(parent).fork(scope))
        yield LocalAccess(coord, s)


# -- the HTTP transport on `corral serve` ---------------------------------------------------


class _Running:
    """A session manager kept running by a task of its own (anyio wants its task group
    entered and left by the same task)."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self._started, self._stop = asyncio.Event(), asyncio.Event()
        self._task = asyncio.create_task(self._hold())
        self._task.add_done_callback(lambda _: self._started.set())

    async def _hold(self) -> None:
        async with self.manager.run():
            self._started.set()
            await self._stop.wait()

    async def started(self) -> None:
        await self._started.wait()
        if self._task.done():
            self._task.result()  # it ended before serving: raise why

    async def close(self) -> None:
        self._stop.set()
        await self._task


class _Mounted:
    """One MCP server per live scope, made at its first request; the servers of scopes
    discarded (or forked anew under the same name) are stopped at the next request."""

    def __init__(self) -> None:
        self.running: dict[tuple[str, str], _Running] = {}
        self.lock = asyncio.Lock()

    async def manager(self, coord: Any, scope: Any) -> Any:
        async with self.lock:
            for key, gone in list(self.running.items()):
                live = coord.scopes.get(key[0])
                if live is None or live.discarded or live.fork_point != key[1]:
                    del self.running[key]
                    await gone.close()
            key = (scope.name, scope.fork_point)
            got = self.running.get(key)
            if got is None:
                server = build_server(LocalAccess(coord, scope))
                server.streamable_http_app(stateless_http=True, json_response=True)
                got = _Running(server.session_manager)
                await got.started()
                self.running[key] = got
            return got.manager

    async def close(self) -> None:
        for got in self.running.values():
            await got.close()
        self.running.clear()


def mount(app: web.Application) -> list[Route]:
    """Serve every scope's MCP tools at `POST /v1/scopes/{name}/mcp` (streamable HTTP,
    stateless, JSON responses) on `corral serve`, behind the scope's bearer token.
    Registered in the `corral.server` entry point group; adds nothing when the `mcp` extra
    is missing."""
    from importlib.util import find_spec

    if find_spec("mcp") is None:
        return []  # the SDK itself is imported at the first MCP request, not at start-up
    from coordinator import Route, request_scope

    mounted = _Mounted()

    async def lifetime(_: web.Application) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await mounted.close()

    async def handle(request: web.Request) -> web.StreamResponse:
        coord, scope = request_scope(request)
        sm = await mounted.manager(coord, scope)
        return await _asgi(sm.handle_request, request)

    app.cleanup_ctx.append(lifetime)
    return [Route("POST", "/v1/scopes/{name}/mcp", handle,
                  "MCP (streamable HTTP, stateless, JSON responses): the scope's tools for any "
                  "MCP client; see the README's MCP section", tag="agents")]


async def _asgi(asgi: Any, request: web.Request) -> web.StreamResponse:
    """Run one aiohttp request through an ASGI app, streaming its response back."""
    from aiohttp import web

    body = await request.read()
    sent_body = False
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": request.method, "scheme": request.scheme, "path": "/mcp",
        "raw_path": b"/mcp", "query_string": request.query_string.encode(),
        "root_path": "", "headers": [(k.lower().encode(), v.encode())
                                     for k, v in request.headers.items()],
        "client": (request.remote or "127.0.0.1", 0), "server": ("127.0.0.1", 0),
    }
    response: web.StreamResponse | None = None
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for k, v in message.get("headers", []):
                name = k.decode()
                if name.lower() not in ("content-length", "transfer-encoding"):
                    response.headers.add(name, v.decode())
            await response.prepare(request)
        elif message["type"] == "http.response.body":
            assert response is not None
            await response.write(message.get("body", b""))
            if not message.get("more_body", False):
                await response.write_eof()
                done.set()

    try:
        await asgi(scope, receive, send)
    finally:
        done.set()
    if response is None:
        return web.Response(status=500, text="the MCP transport sent no response")
    return response
