"""The human gate: a policy that holds chosen intents until a person answers.

A rule matches an intent by kind and, optionally, by path glob, on the paths
the intent writes. The glob means what it means in a `.gitignore` (pathspec's
`GitIgnoreSpec`): `*` stops at `/`, `**` crosses it, a glob without a slash
matches at any depth (`*.lock`), one with a slash is anchored at the root
(`src/*.py` is not `src/a/b.py`), and a glob matching a directory matches
everything under it (`src/*` matches `src/a/b.py`, as git ignores it).

A held intent waits — its scope waits with it — until someone approves or
rejects it over the API (`/v1/gate/...`). Rejecting blocks it with the
person's reason. Approving does not decide: the gate steps aside
(the chain goes on, so later policies still see it) and the approval is noted
in the final decision's reason. With a `timeout`, an unanswered hold blocks.
Each hold is announced on the event bus as a `decision` event with verdict
`defer` from policy `human-gate`, as a policy's deferral is, once the item is
listed: a dashboard or a client (`CorralClient.next_held`) waits for it
instead of polling `/v1/gate/pending`.

A transactional exec is reviewed twice, and a matching rule holds it twice:
once before it runs (`review == "intent"`: may this command run?), and, if it
changed files, once more before they are applied (`review == "changes"`; the
held effect's intent lists them and its summary names them). A rule with a
path glob matches only the second. Both answers are recorded: the first in the
effect's decision, the second in its outcome's `review` (and, when it
rejects, as the effect's decision with the first one's reason after it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

import pathspec

from ..records._effects import Decision, Effect, Exec, FsDelete, FsPatch, FsWrite, Intent
from ..records._errors import NotFound
from ..records._events import Event, EventBus
from ._chain import View

__all__ = ["GateRule", "HumanGate", "Held", "Review"]


@dataclass(frozen=True, slots=True)
class GateRule:
    """Hold intents of `kind` ("*" for any) touching a path matching `glob` (None: any)."""

    kind: str = "*"
    glob: str | None = None
    _spec: pathspec.PathSpec | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        spec = pathspec.GitIgnoreSpec.from_lines([self.glob]) if self.glob else None
        object.__setattr__(self, "_spec", spec)  # frozen: compiled once, here

    @classmethod
    def parse(cls, spec: str) -> GateRule:
        """`KIND` or `KIND:GLOB`, e.g. `exec`, `fs.write:src/*`, `*:*.lock`."""
        kind, sep, glob = spec.partition(":")
        return cls(kind or "*", glob if sep and glob else None)

    def __str__(self) -> str:
        return self.kind + (f":{self.glob}" if self.glob else "")

    def matches(self, intent: Intent) -> bool:
        if self.kind != "*" and intent.kind != self.kind:
            return False
        if self._spec is None:
            return True
        return any(self._spec.match_file(p) for p in _paths(intent))


def _paths(intent: Intent) -> list[str]:
    match intent:
        case FsPatch() if intent.changes:  # a patch of many files
            return [c.path for c in intent.changes]
        case FsWrite() | FsPatch() | FsDelete():
            return [intent.path]
        case Exec(changes=changes) if changes:
            return [c.path for c in changes]
    return []


Review = Literal["intent", "changes"]


@dataclass(slots=True)
class Held:
    id: str
    rule: GateRule
    effect: Effect
    answer: asyncio.Future[tuple[bool, str]]

    @property
    def review(self) -> Review:
        """"intent" (may this run?), or "changes": the second review of an exec,
        holding the files the command changed before they are applied."""
        intent = self.effect.intent
        return "changes" if isinstance(intent, Exec) and intent.changes is not None else "intent"

    def summary(self) -> str:
        line = self.effect.summary(status=False)
        intent = self.effect.intent
        if isinstance(intent, Exec) and intent.changes is not None:
            paths = [c.path for c in intent.changes]
            shown = ", ".join(paths[:5]) + (f", ... ({len(paths)} files)" if len(paths) > 5 else "")
            line += f" [its changes: {shown}]"
        return line


class HumanGate:
    """Policy: hold intents matching any rule until approved or rejected."""

    name = "human-gate"

    def __init__(self, rules: list[GateRule], *, timeout: float | None = None) -> None:
        self.rules = list(rules)
        self.timeout = timeout
        self._held: dict[str, Held] = {}
        self._n = 0
        self.events: EventBus | None = None
        """Where holds are announced: the server sets its coordinator's bus."""

    def pending(self) -> list[Held]:
        """Held intents, oldest first."""
        return list(self._held.values())

    def answer(self, id: str, approve: bool, reason: str = "") -> Held:
        """Approve or reject the held intent `id`; raises NotFound."""
        held = self._held.pop(id, None)
        if held is None or held.answer.done():
            raise NotFound(f"no held intent {id!r} at the gate")
        held.answer.set_result((approve, reason))
        return held

    def close(self, reason: str = "the server is shutting down") -> None:
        """Reject everything still held."""
        for id in list(self._held):
            self.answer(id, False, reason)

    async def __call__(self, intent: Intent, view: View) -> Decision | None:
        rule = next((r for r in self.rules if r.matches(intent)), None)
        if rule is None:
            return None
        self._n += 1
        held = Held(f"g{self._n}", rule, view.effect,
                    asyncio.get_running_loop().create_future())
        self._held[held.id] = held
        if self.events is not None:
            hold = Decision(verdict="defer", policy=self.name, reason=f"held at the gate ({rule})")
            self.events.publish(Event("decision",
                                      view.effect.model_copy(update={"decision": hold})))
        try:
            approved, reason = await asyncio.wait_for(asyncio.shield(held.answer), self.timeout)
        except TimeoutError:
            return Decision(verdict="block", reason=f"held at the gate ({rule}) and not "
                            f"answered within {self.timeout}s")
        finally:
            self._held.pop(held.id, None)
        if approved:
            view.note(f"approved at the gate ({rule})" + (f": {reason}" if reason else ""))
            return None
        return Decision(verdict="block",
                        reason=f"rejected at the gate ({rule})" + (f": {reason}" if reason else ""))
