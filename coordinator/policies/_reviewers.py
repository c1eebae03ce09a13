"""External reviewers: processes that answer pending intents over a WebSocket.

A reviewer connects to `/v1/reviewers?name=N&kind=K&timeout=T` with the admin
token and chooses the effect kinds it reviews (none: every kind). For each
matching intent the server sends::

    {"type": "review", "id": "r17", "effect": {...the pending Effect...}}

and the reviewer answers with a `ReviewAnswer`::

    {"type": "answer", "id": "r17", "verdict": "allow" | "block" | "rewrite"
     | "defer" | "abstain", "reason": "...", "rewritten": {...}, "until": "..."}

Reviewers are asked in the order they connected; the first that does not
abstain decides (its decision's policy is `reviewer:<name>`). A reviewer that
does not answer within its timeout, or disconnects, abstains, and that is
recorded: the final decision's reason ends with
`reviewer <name> abstained: no answer within <T>s`.

A message that is not a valid `ReviewAnswer` is refused with
`{"type": "error", "detail": ...}` and its review goes on waiting; one whose
`content_b64` is not base64 is refused too and blocks its intent (`reviewer
<name> sent invalid base64`): the reviewer meant some content, not none.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pydantic import ValidationError

from ..records._effects import Decision, FsPatch, FsWrite, Intent
from ..records._wire import ReviewAnswer
from ._chain import View

__all__ = ["Reviewer", "ReviewerPool"]

Send = Callable[[str], Awaitable[None]]


@dataclass(eq=False)
class Reviewer:
    name: str
    kinds: frozenset[str] | None
    timeout: float
    send: Send
    waiting: dict[str, asyncio.Future[ReviewAnswer]] = field(default_factory=dict)

    def reviews(self, kind: str) -> bool:
        return self.kinds is None or kind in self.kinds


class ReviewerPool:
    """Policy: ask the connected external reviewers."""

    name = "reviewers"

    def __init__(self) -> None:
        self.reviewers: list[Reviewer] = []
        self._ids = itertools.count(1)

    def add(self, reviewer: Reviewer) -> None:
        self.reviewers.append(reviewer)

    def remove(self, reviewer: Reviewer) -> None:
        if reviewer in self.reviewers:
            self.reviewers.remove(reviewer)
        for fut in reviewer.waiting.values():
            if not fut.done():
                fut.cancel()

    def answer(self, reviewer: Reviewer, answer: ReviewAnswer) -> bool:
        """Deliver an answer; False when nothing waits for that id (late or unknown)."""
        fut = reviewer.waiting.get(answer.id)
        if fut is None or fut.done():
            return False
        fut.set_result(answer)
        return True

    def receive(self, reviewer: Reviewer, message: str) -> str | None:
        """Read one message of `reviewer` and deliver its answer: None, or the
        error to send back (not an answer, or no review waits for its id)."""
        try:
            # strict all the way down: a rewritten intent's mode 33188.0 is refused
            answer = ReviewAnswer.model_validate_json(message, strict=True)
        except ValidationError as e:
            rid = _answer_id(message)
            if rid is not None and any(err["type"] == "base64_decode" for err in e.errors()):
                refused = f"reviewer {reviewer.name} sent invalid base64"
                self.answer(reviewer, ReviewAnswer(id=rid, verdict="block", reason=refused))
            return str(e)
        if not self.answer(reviewer, answer):
            return f"no review {answer.id!r} is waiting (late?)"
        return None

    async def __call__(self, intent: Intent, view: View) -> Decision | None:
        for reviewer in list(self.reviewers):
            if not reviewer.reviews(intent.kind):
                continue
            decision = await self._ask(reviewer, intent, view)
            if decision is not None:
                return decision
        return None

    async def _ask(self, reviewer: Reviewer, intent: Intent, view: View) -> Decision | None:
        rid = f"r{next(self._ids)}"
        fut: asyncio.Future[ReviewAnswer] = asyncio.get_running_loop().create_future()
        reviewer.waiting[rid] = fut
        effect = view.effect.model_copy(update={"intent": intent})
        try:
            await reviewer.send(
                f'{{"type":"review","id":"{rid}","effect":{effect.model_dump_json()}}}'
            )
            answer = await asyncio.wait_for(fut, reviewer.timeout)
        except TimeoutError:
            view.note(f"reviewer {reviewer.name} abstained: no answer within "
                      f"{reviewer.timeout:g}s")
            return None
        except (asyncio.CancelledError, ConnectionError, RuntimeError):
            if asyncio.current_task() is not None and asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
            view.note(f"reviewer {reviewer.name} abstained: disconnected")
            return None
        finally:
            reviewer.waiting.pop(rid, None)
        return await self._decision(reviewer, answer, intent, view)

    async def _decision(
        self, reviewer: Reviewer, a: ReviewAnswer, intent: Intent, view: View
    ) -> Decision | None:
        policy = f"reviewer:{reviewer.name}"
        if a.verdict == "abstain":
            return None
        if a.verdict == "defer" and not a.until:
            return Decision(verdict="block", policy=policy,
                            reason=f"reviewer {reviewer.name} deferred without `until`")
        if a.verdict != "rewrite":
            return Decision(verdict=a.verdict, reason=a.reason, until=a.until, policy=policy)
        new = a.rewritten or intent
        if new.kind != intent.kind:
            return Decision(verdict="block", policy=policy, reason=(
                f"reviewer {reviewer.name} rewrote a {intent.kind} into a {new.kind}; refused"))
        if a.content_b64 is not None:
            if not isinstance(new, FsWrite | FsPatch):
                return Decision(verdict="block", policy=policy,
                                reason=f"reviewer {reviewer.name} sent content for a {new.kind}")
            blob = await view.store(a.content_b64)
            new = new.model_copy(update={"blob": blob})
        return Decision(verdict="rewrite", rewritten=new, reason=a.reason, policy=policy)


def _answer_id(message: str) -> str | None:
    """The `id` of an answer that failed validation, if it names one."""
    try:
        rid = json.loads(message).get("id")
    except (ValueError, AttributeError):
        return None
    return rid if isinstance(rid, str) else None
