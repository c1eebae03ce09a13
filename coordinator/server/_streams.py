"""The WebSocket streams: observers of the event bus, and external reviewers."""

from __future__ import annotations

import asyncio
import json
import math

from aiohttp import WSMsgType, web

from ..policies._reviewers import Reviewer
from ..records._events import Event
from ..records._wire import BadRequest
from ._auth import Tokens
from ._hub import HUB

__all__ = ["event_json", "events", "reviewers"]

EVENT_TYPES = ("intent", "decision", "effect")


def event_json(event: Event) -> str:
    """`{"type", "commit", "summary", "effect"}`: the effect record as the trace
    stores it, and its one-line summary (the commit subject). A decision's summary
    carries no "[pending]" mark: the decision beside it says what became of it."""
    commit = json.dumps(event.commit)
    summary = json.dumps(event.effect.summary(status=event.type != "decision"))
    return (f'{{"type":"{event.type}","commit":{commit},"summary":{summary},'
            f'"effect":{event.effect.model_dump_json()}}}')


async def _drain(ws: web.WebSocketResponse) -> None:
    """Read (and ignore) what an observer sends, until it closes."""
    async for _ in ws:
        pass


async def events(request: web.Request) -> web.StreamResponse:
    hub = request.app[HUB]
    who = hub.who(request, allow_query=True)
    coord = hub.coordinator
    scopes = request.query.getall("scope", []) or None
    kinds = request.query.getall("kind", []) or None
    types = request.query.getall("type", []) or None
    if types is not None and not set(types) <= set(EVENT_TYPES):
        raise BadRequest(f"type must be one of {', '.join(EVENT_TYPES)}")
    if not who.admin:
        assert who.scope is not None
        wanted = scopes or [who.scope]
        for name in wanted:
            hub.live_tokens.require(who, name, coord)
        scopes = wanted
    ws = web.WebSocketResponse(heartbeat=30)
    await ws.prepare(request)
    hub.sockets.add(ws)
    sub = coord.events.subscribe(scopes=scopes, kinds=kinds, types=types)  # type: ignore[arg-type]
    if not who.admin:
        # Discarding the token's scope, or a watched one, ends the stream: the
        # name may be forked again, elsewhere, by someone else.
        assert who.scope is not None and scopes is not None
        hub.watch_stream(sub, {who.scope, *scopes})
    reported = 0
    try:
        await ws.send_str(json.dumps({"type": "subscribed", "scopes": scopes, "kinds": kinds,
                                      "types": types}))
        async with asyncio.TaskGroup() as tg:
            reader = tg.create_task(_drain(ws))
            reader.add_done_callback(lambda _: sub.close())
            while (event := await sub.get()) is not None:
                if sub.dropped > reported:
                    await ws.send_str(json.dumps({"type": "dropped",
                                                  "count": sub.dropped - reported}))
                    reported = sub.dropped
                await ws.send_str(event_json(event))
            await ws.close()
    except* (ConnectionError, RuntimeError):
        pass
    finally:
        sub.close()
        hub.unwatch_stream(sub)
    return ws


async def reviewers(request: web.Request) -> web.StreamResponse:
    hub = request.app[HUB]
    who = hub.who(request, allow_query=True)
    Tokens.require_admin(who)
    pool = hub.reviewers
    name = request.query.get("name") or f"reviewer-{len(pool.reviewers) + 1}"
    kinds = frozenset(request.query.getall("kind", [])) or None
    try:
        timeout = float(request.query.get("timeout", "5"))
    except ValueError:
        timeout = math.nan
    if not 0 < timeout <= 600:
        raise BadRequest("timeout must be a number of seconds in (0, 600]")
    ws = web.WebSocketResponse(heartbeat=30)
    await ws.prepare(request)
    hub.sockets.add(ws)
    reviewer = Reviewer(name, kinds, timeout, ws.send_str)
    pool.add(reviewer)
    try:
        await ws.send_str(json.dumps({"type": "registered", "name": name,
                                      "kinds": sorted(kinds) if kinds else None,
                                      "timeout": timeout}))
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            if (detail := pool.receive(reviewer, msg.data)) is not None:
                await ws.send_str(json.dumps({"type": "error", "detail": detail}))
    except (ConnectionError, RuntimeError):
        pass
    finally:
        pool.remove(reviewer)
    return ws
