"""The server's state: configuration, the open coordinator, tokens, the gate and
the reviewers, held in the aiohttp app under one typed key."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from sandboxes import Limits

from ..control._coordinator import Coordinator
from ..policies._chain import Policy
from ..policies._gate import GateRule, HumanGate
from ..policies._reviewers import ReviewerPool
from ..policies._settings import Settings
from ..records._events import Event, Subscription
from ..scopes._environment import Environment
from ..scopes._scope import Scope
from ._auth import Principal, Tokens
from ._openapi import Route

__all__ = ["API_ROUTES", "HUB", "Hub", "ServerConfig"]

DEFAULT_MAX_BODY = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """How `corral serve` (or `make_app`) opens its coordinator and guards it.

    The state's settings (`Settings`) are `settings` when given: recorded for a new
    state; on one that records others the server refuses to start unless
    `change_settings`, which records the change. With `settings` None the server
    runs with the recorded ones, and for a state that records none with the ones
    `guard`, `gate`, `gate_timeout`, `defer_timeout`, `exec_limits` and `toolchain`
    describe (recorded then). `policies` are in-process objects, asked after the
    settings' and never recorded."""

    state: Path
    repo: Path | None = None
    """Needed only to create a new state directory."""
    base: str = "HEAD"
    backend: str | None = None
    policies: Sequence[Policy] = ()
    """Custom policies, asked after the conflict guard and before reviewers and the gate."""
    guard: bool = True
    """Put the conflict guard first in the chain."""
    gate: Sequence[GateRule] = ()
    gate_timeout: float | None = None
    defer_timeout: float | None = None
    """Seconds a deferred intent waits for its scope to merge (None: the
    coordinator's default, `DEFER_TIMEOUT_S`)."""
    exec_limits: Limits | None = None
    """What one command may use (None: the defaults of `sandboxes.Limits`)."""
    toolchain: Sequence[Path] = ()
    """Host directories commands see read-only, their bin/ first on PATH."""
    admin_token: str | None = None
    """None: a random one (read it from `Hub.tokens.admin`)."""
    max_body: int = DEFAULT_MAX_BODY
    """Largest request body in bytes (413 beyond)."""
    body_timeout: float = 30.0
    """Seconds a request body may take to arrive (408 beyond)."""
    clock: Callable[[], float] | None = None
    """Fixed commit times, for reproducible traces (tests)."""
    settings: Settings | None = None
    """The settings to run with (see the class docstring)."""
    change_settings: bool = False
    """Record `settings` even when the state records others."""
    environment: Environment | None = None
    """The project's environment to set up in root before serving (`Coordinator.prepare`;
    None: none)."""

    def default_settings(self) -> Settings:
        """The settings the fields above describe (for a state that records none)."""
        fields: dict[str, Any] = {
            "policies": ("conflict-guard",) if self.guard else (),
            "gate": tuple(str(r) for r in self.gate), "gate_timeout": self.gate_timeout,
            "toolchain": tuple(Path(t).resolve() for t in self.toolchain)}
        if self.defer_timeout is not None:
            fields["defer_timeout"] = self.defer_timeout
        if self.exec_limits is not None:
            fields["exec_limits"] = self.exec_limits
        return Settings(**fields)


@dataclass(eq=False)
class Hub:
    config: ServerConfig
    gate: HumanGate
    reviewers: ReviewerPool = field(default_factory=ReviewerPool)
    coord: Coordinator | None = None
    tokens: Tokens | None = None
    sockets: weakref.WeakSet[web.WebSocketResponse] = field(default_factory=weakref.WeakSet)
    scoped_streams: dict[str, set[Subscription]] = field(default_factory=dict)
    """Event streams opened with a scope token, by every scope they depend on
    (the token's and the ones they watch): closed when any of them is discarded."""

    def on_event(self, event: Event) -> None:
        """A scope discarded: its token dies and the streams it authorized close,
        before its name can be forked again."""
        effect = event.effect
        if (event.type != "effect" or effect.kind != "scope.discard"
                or effect.status != "materialized"):
            return
        if self.tokens is not None:
            self.tokens.revoke(effect.scope)
        for sub in self.scoped_streams.pop(effect.scope, set()):
            sub.close()

    def watch_stream(self, sub: Subscription, scopes: Iterable[str]) -> None:
        for name in scopes:
            self.scoped_streams.setdefault(name, set()).add(sub)

    def unwatch_stream(self, sub: Subscription) -> None:
        for name, subs in list(self.scoped_streams.items()):
            subs.discard(sub)
            if not subs:
                del self.scoped_streams[name]

    @property
    def coordinator(self) -> Coordinator:
        """The open coordinator (RuntimeError before the app started or after it stopped)."""
        if self.coord is None:
            raise RuntimeError("the coordinator is not open")
        return self.coord

    @property
    def live_tokens(self) -> Tokens:
        """The tokens of the open coordinator's scopes."""
        assert self.tokens is not None
        return self.tokens

    def who(self, request: web.Request, *, allow_query: bool = False) -> Principal:
        """The caller, from `Authorization: Bearer ...` (or `?token=` for WebSockets)."""
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header[:7].lower() == "bearer " else None
        if token is None and allow_query:
            token = request.query.get("token")
        return self.live_tokens.principal(token, self.coordinator)

    def scope(self, who: Principal, name: str) -> Scope:
        """The live scope `name`, if `who` may act on it (Forbidden / UnknownScope)."""
        if not who.admin:
            self.live_tokens.require(who, name, self.coordinator)
        return self.coordinator.scope(name)

    def timed(self, kind: str) -> ContextManager[None]:
        """Time spent inside the coordinator for one effect (`corral_effect_seconds`)."""
        return self.coordinator.metrics.effect_seconds.labels(kind).time()

    def policies(self) -> list[Policy]:
        """The in-process policies, asked after the settings' (see ServerConfig)."""
        return [*self.config.policies, self.reviewers, self.gate]


HUB = web.AppKey("hub", Hub)

API_ROUTES: web.AppKey[tuple[Route, ...]] = web.AppKey("api_routes")
"""Every route the app serves (the core table plus extensions'): /openapi.json's source."""
