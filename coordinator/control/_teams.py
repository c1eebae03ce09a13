"""Teams in the coordinator: each recorded as a ref, made, loaded again, and forked with a cut.

A team is named scopes with a lead (`TeamInfo`), recorded as
`refs/corral/teams/<name>`: a commit whose parents are the members' heads when it was
made and whose tree holds `team.json` (`git show refs/corral/teams/<name>:team.json`).
Its state is not recorded there: it is derived from the members' branches (`scopes._team`).

Forking a cut (`Coordinator.fork_team`) forks every team whose members are all in the
cut as `<prefix><team>`: its members are the forked scopes under the same member names,
and its origin is the team it came from, whose operations on the forked branches (those
before the cut) are its own. So the forked team's task list and scratchpad are the ones
at the cut.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..records._errors import CorralError, NotFound, ScopeExists, StateError
from ..records._paths import check_scope_name
from ..records._team import TeamInfo
from ..scopes._runtime import Runtime
from ..scopes._scope import Scope
from ..scopes._team import Team, Teams
from ..store._trace import Trace
from ._cut import Cut

__all__ = ["TEAM_PREFIX", "create_team", "fork_teams", "load_teams", "team_of", "teams_in"]

TEAM_PREFIX = "refs/corral/teams/"
TEAM_FILE = "team.json"


def _check_name(name: str) -> str:
    try:
        return check_scope_name(name)
    except CorralError as e:
        raise type(e)(str(e).replace("scope name", "team name")) from e


def _record(trace: Trace, info: TeamInfo, heads: list[str]) -> None:
    ref = TEAM_PREFIX + info.name
    if trace.ref(ref) is not None:
        raise ScopeExists(f"a team named {info.name!r} exists ({ref})")
    body = {"v": 1, "name": info.name, "lead": info.lead, "members": info.members,
            "origin": info.origin}
    blob = trace.write_blob(json.dumps(body, indent=1, sort_keys=True).encode() + b"\n")
    tree = trace.build_tree(None, {TEAM_FILE: (blob, 0o100644)})
    summary = ", ".join(f"{m}={s}" for m, s in sorted(info.members.items()))
    commit = trace.write_commit(tree, list(dict.fromkeys(heads)),
                                f"corral team {info.name}: lead {info.lead}; {summary}\n")
    trace.set_ref(ref, commit)


def _read(trace: Trace, ref: str) -> TeamInfo:
    commit = trace.ref(ref)
    assert commit is not None
    try:
        body = json.loads(trace.read(commit, TEAM_FILE))
        return TeamInfo(str(body["name"]), str(body["lead"]),
                        {str(m): str(s) for m, s in body["members"].items()}, body["origin"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise StateError(f"team {ref} ({commit[:12]}) cannot be read: {e}", cause=e) from e


def _lineage(infos: dict[str, TeamInfo], info: TeamInfo) -> dict[str, dict[str, str]]:
    """{team: {scope: member}} for `info` and the teams it was forked from."""
    out: dict[str, dict[str, str]] = {}
    at: TeamInfo | None = info
    while at is not None and at.name not in out:
        out[at.name] = {scope: member for member, scope in at.members.items()}
        at = infos.get(at.origin) if at.origin is not None else None
    return out


def load_teams(rt: Runtime[Scope], teams: Teams) -> None:
    """Every recorded team into `teams` (blocking: at open). Their state is derived from
    their members' branches at the first read or operation."""
    infos = {i.name: i for i in (_read(rt.trace, r) for r in rt.trace.refs(TEAM_PREFIX))}
    for info in infos.values():
        teams[info.name] = Team(rt, info, _lineage(infos, info))


async def create_team(rt: Runtime[Scope], teams: Teams, name: str, members: Sequence[Scope],
                      lead: Scope, *, origin: str | None = None,
                      names: Sequence[str] | None = None) -> Team:
    """Make team `name` of `members` (live scopes; member names: `names`, default their
    scope names) led by `lead` (one of them), recorded at `refs/corral/teams/<name>`.
    Raises ScopeExists for a team of that name, CorralError for a lead who is not a
    member or a member listed twice, ScopeDiscarded for a discarded member."""
    _check_name(name)
    if name in teams:
        raise ScopeExists(f"a team named {name!r} exists")
    member_names = list(names) if names is not None else [s.name for s in members]
    if not members:
        raise CorralError("a team needs at least one member")
    if len(set(member_names)) != len(member_names) or len({s.name for s in members}) != len(
            members):
        raise CorralError(f"a member is listed twice: {', '.join(member_names)}")
    if lead not in members:
        raise CorralError(f"the lead {lead.name!r} is not one of the members")
    for s in members:
        s._check_live()
    info = TeamInfo(name, member_names[list(members).index(lead)],
                    dict(zip(member_names, (s.name for s in members), strict=True)), origin)
    await rt.io(_record, rt.trace, info, [s.head for s in members])
    infos = {t.name: t.info for t in teams.values()}
    team = teams[name] = Team(rt, info, _lineage(infos, info))
    await team.fresh()
    return team


def teams_in(teams: Teams, cut: Cut, prefix: str) -> list[Team]:
    """The teams all of whose members are in `cut`: the ones `fork_teams` forks. Raises
    ScopeExists when one's fork, `<prefix><team>`, exists already (before anything forks)."""
    inside = {m.scope for m in cut.members}
    found = [t for t in sorted(teams.values(), key=lambda t: t.name)
             if t.info.members and set(t.info.members.values()) <= inside]
    for team in found:
        name = _check_name(prefix + team.name)
        if name in teams:
            raise ScopeExists(f"a team named {name!r} exists: the fork of team "
                              f"{team.name!r} needs the name")
    return found


async def fork_teams(rt: Runtime[Scope], teams: Teams, cut: Cut, prefix: str,
                     forked: Sequence[Scope]) -> list[Team]:
    """For each team all of whose members are in `cut`, the team `<prefix><team>` of
    their forks (`forked`, one per member of the cut, in its order)."""
    by_scope = {m.scope: s for m, s in zip(cut.members, forked, strict=True)}
    out = []
    for team in teams_in(teams, cut, prefix):
        info = team.info
        names = sorted(info.members)
        scopes = [by_scope[info.members[m]] for m in names]
        lead = scopes[names.index(info.lead)]
        out.append(await create_team(rt, teams, prefix + info.name, scopes, lead,
                                     origin=info.name, names=names))
    return out


def team_of(teams: Teams, name: str) -> Team:
    """Team `name`. Raises NotFound."""
    found = teams.get(name)
    if found is None:
        raise NotFound(f"no team named {name!r}"
                       + (f" (teams: {', '.join(sorted(teams))})" if teams else ""))
    return found
