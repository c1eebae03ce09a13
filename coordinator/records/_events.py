"""The event bus: observers see every intent, decision and effect, and never perturb.

Publishing never waits on an observer: each subscription has its own bounded
queue, and a subscriber that falls behind loses its oldest events (and is told
how many) instead of slowing the agents down.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from ._effects import Effect

__all__ = ["Event", "EventBus", "Subscription"]

EventType = Literal["intent", "decision", "effect"]


@dataclass(frozen=True, slots=True)
class Event:
    type: EventType
    effect: Effect
    commit: str | None = None
    """The trace commit, for `effect` events."""


class Subscription:
    """An async iterator of events matching a filter; close it when done."""

    def __init__(
        self,
        bus: EventBus,
        scopes: frozenset[str] | None,
        kinds: frozenset[str] | None,
        types: frozenset[str] | None,
        maxsize: int,
    ) -> None:
        self._bus = bus
        self.scopes, self.kinds, self.types = scopes, kinds, types
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize)
        self.dropped = 0

    def matches(self, event: Event) -> bool:
        return (
            (self.scopes is None or event.effect.scope in self.scopes)
            and (self.kinds is None or event.effect.kind in self.kinds)
            and (self.types is None or event.type in self.types)
        )

    def _offer(self, event: Event | None) -> None:
        while True:
            try:
                self._queue.put_nowait(event)
                return
            except asyncio.QueueFull:
                self._queue.get_nowait()
                self.dropped += 1

    async def get(self) -> Event | None:
        """The next event; None once the subscription is closed."""
        return await self._queue.get()

    def drain(self) -> list[Event]:
        """Every event already queued, without waiting."""
        out: list[Event] = []
        while not self._queue.empty():
            event = self._queue.get_nowait()
            if event is None:
                break
            out.append(event)
        return out

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[Event]:
        while (event := await self._queue.get()) is not None:
            yield event

    def close(self) -> None:
        self._bus._subs.discard(self)
        self._offer(None)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class EventBus:
    def __init__(self) -> None:
        self._subs: set[Subscription] = set()
        self._listeners: list[Callable[[Event], None]] = []

    def listen(self, fn: Callable[[Event], None]) -> None:
        """Call `fn` with every event, synchronously, after the subscriptions
        have it (for bookkeeping that must not lag: revoking a discarded scope's
        token before anything else can run; counting tokens from model calls).
        `fn` runs on the agents' path: it must be quick and must not raise."""
        self._listeners.append(fn)

    def subscribe(
        self,
        *,
        scopes: Iterable[str] | None = None,
        kinds: Iterable[str] | None = None,
        types: Iterable[EventType] | None = None,
        maxsize: int = 10_000,
    ) -> Subscription:
        sub = Subscription(
            self,
            frozenset(scopes) if scopes is not None else None,
            frozenset(kinds) if kinds is not None else None,
            frozenset(types) if types is not None else None,
            maxsize,
        )
        self._subs.add(sub)
        return sub

    def publish(self, event: Event) -> None:
        for sub in list(self._subs):
            if sub.matches(event):
                sub._offer(event)
        for fn in self._listeners:
            fn(event)

    def close(self) -> None:
        self._listeners.clear()
        for sub in list(self._subs):
            sub.close()
