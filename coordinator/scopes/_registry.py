"""The scope registry: every scope of one coordinator by name, and the names
claimed by forks in progress."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

from ..records._errors import ScopeExists, UnknownScope

__all__ = ["Registered", "ScopeRegistry"]


class Registered(Protocol):
    """What the registry needs of a scope (a `Scope`, in a coordinator)."""

    @property
    def name(self) -> str: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def discarded(self) -> bool: ...


S = TypeVar("S", bound=Registered)


class ScopeRegistry(dict[str, S]):
    """Scopes by name (a dict: discarded scopes stay while live forks name them
    as their parent). `Coordinator.scopes` is this object."""

    def __init__(self) -> None:
        super().__init__()
        self._forking: set[str] = set()

    def live(self) -> list[S]:
        """Every scope not discarded, in registration order."""
        return [s for s in self.values() if not s.discarded]

    def scope(self, name: str) -> S:
        """The live scope `name`; raises UnknownScope."""
        scope = self.get(name)
        if scope is None or scope.discarded:
            raise UnknownScope(f"no scope named {name!r}")
        return scope

    @contextmanager
    def claim(self, name: str) -> Iterator[None]:
        """Hold scope name `name` for a fork in progress (released when it ends;
        by then the scope is registered or the fork failed). Raises
        ScopeExists when a live scope or another fork has it. Synchronous, so
        the check and the claim are one step on the event loop."""
        live = self.get(name)
        if (live is not None and not live.discarded) or name in self._forking:
            raise ScopeExists(f"scope {name!r} already exists")
        self._forking.add(name)
        try:
            yield
        finally:
            self._forking.discard(name)

    def forget(self, scope: S) -> None:
        """A discarded scope leaves the registry, unless live scopes were forked
        from it: they name it as their parent, so it stays until the last of
        them goes."""
        gone: S | None = scope
        while gone is not None and gone.discarded and gone.name != "root":
            if self.get(gone.name) is not gone or any(
                s.parent == gone.name for s in self.values()
            ):
                break
            del self[gone.name]
            gone = self.get(gone.parent) if gone.parent is not None else None
