"""The team's routes: take a consistent cut, read one, fork or rewind the team from it
(admin only: a cut spans scopes no scope token speaks for)."""

from __future__ import annotations

from aiohttp import web

from ..control._cut import Cut
from ..records._wire import (
    CutOut,
    CutRequest,
    DecisionsOut,
    ForkTeamRequest,
    MemberCutOut,
    NamesOut,
    RewindTeamRequest,
    ScopeOut,
    ScopesOut,
)
from ._auth import Tokens
from ._http import body, caller, json_response
from ._openapi import Route

__all__ = ["CUT_ROUTES"]


def _cut_out(cut: Cut) -> CutOut:
    return CutOut(name=cut.name, commit=cut.commit, time=cut.time, members=[
        MemberCutOut(scope=m.scope, head=m.head, inbox=list(m.inbox), pending=list(m.pending))
        for m in cut.members])


async def take(request: web.Request) -> web.Response:
    hub, who = caller(request)
    Tokens.require_admin(who)
    req = await body(request, CutRequest)
    return json_response(_cut_out(await hub.coordinator.cut(req.scopes, name=req.name)))


async def names(request: web.Request) -> web.Response:
    hub, who = caller(request)
    Tokens.require_admin(who)
    coord = hub.coordinator
    return json_response(NamesOut(names=await coord.io(coord.cuts)))


async def show(request: web.Request) -> web.Response:
    hub, who = caller(request)
    Tokens.require_admin(who)
    return json_response(_cut_out(await hub.coordinator.read_cut(request.match_info["cut"])))


async def fork_team(request: web.Request) -> web.Response:
    hub, who = caller(request)
    Tokens.require_admin(who)
    req = await body(request, ForkTeamRequest)
    forked = await hub.coordinator.fork_team(request.match_info["cut"], req.prefix)
    return json_response(ScopesOut(scopes=[
        ScopeOut(name=s.name, head=s.head, parent=s.parent, fork_point=s.fork_point,
                 backend=s.info().backend) for s in forked]))


async def rewind_team(request: web.Request) -> web.Response:
    hub, who = caller(request)
    Tokens.require_admin(who)
    req = await body(request, RewindTeamRequest)
    ids = await hub.coordinator.rewind_team(request.match_info["cut"], reason=req.reason)
    return json_response(DecisionsOut(decisions=ids))


_C = "/v1/cuts/{cut}"

CUT_ROUTES: tuple[Route, ...] = (
    Route("POST", "/v1/cuts", take, "Take a consistent cut of the team (every scope's head, "
          "inbox, pending intents) and record it", body=CutRequest, response=CutOut,
          auth="admin", tag="team"),
    Route("GET", "/v1/cuts", names, "The recorded cuts", response=NamesOut, auth="admin",
          tag="team"),
    Route("GET", _C, show, "One recorded cut", response=CutOut, auth="admin", tag="team"),
    Route("POST", _C + "/fork", fork_team, "Fork every member at its cut head, as "
          "<prefix><member>, with its cut inbox", body=ForkTeamRequest, response=ScopesOut,
          auth="admin", tag="team"),
    Route("POST", _C + "/rewind", rewind_team, "Rewind every member to its cut head and "
          "inbox, together", body=RewindTeamRequest, response=DecisionsOut, auth="admin",
          tag="team"),
)
