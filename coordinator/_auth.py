"""Bearer tokens: an admin token, and one token per scope issued at fork.

A scope token is `s.<scope>.<mac>`, where the MAC is an HMAC-SHA256 (key kept
in `<state>/server.key`, mode 0600) over the scope's name and its fork commit.
So tokens survive a server restart, need no table, and die with the scope: a
scope forked again under the same name gets a new fork commit and a new token.

A scope token acts on its own scope and on every scope forked from it (an agent
may run sub-agents); merging needs authority over both scopes. Everything else
(the root scope, the gate, reviewers, control actions, blobs) needs the admin
token.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ._errors import CorralError

if TYPE_CHECKING:
    from ._coordinator import Coordinator

__all__ = ["AuthError", "Forbidden", "Principal", "Tokens"]


class AuthError(CorralError):
    """No token, or a token that is not valid (401)."""

    status = 401


class Forbidden(AuthError):
    """A valid token acting outside its authority (403)."""

    status = 403


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the admin, or the agent of one scope."""

    scope: str | None
    """None for the admin."""

    @property
    def admin(self) -> bool:
        return self.scope is None


ADMIN = Principal(None)


class Tokens:
    def __init__(self, key: bytes, admin: str) -> None:
        self._key = key
        self.admin = admin

    @classmethod
    def load(cls, state: Path, admin: str | None) -> Tokens:
        """The key in `<state>/server.key` (created on first use) and the admin
        token (`admin`, or a fresh random one)."""
        path = state / "server.key"
        try:
            key = path.read_bytes()
        except FileNotFoundError:
            key = secrets.token_bytes(32)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(key)
        return cls(key, admin or "a." + secrets.token_urlsafe(24))

    def _mac(self, scope: str, fork_point: str) -> str:
        msg = f"{scope}\0{fork_point}".encode()
        return hmac.new(self._key, msg, hashlib.sha256).hexdigest()[:40]

    def issue(self, scope: str, fork_point: str) -> str:
        return f"s.{scope}.{self._mac(scope, fork_point)}"

    def principal(self, token: str | None, coord: Coordinator) -> Principal:
        """Who `token` is; raises AuthError when it is missing or not valid."""
        if not token:
            raise AuthError("missing bearer token (Authorization: Bearer <token>)")
        if hmac.compare_digest(token.encode(), self.admin.encode()):
            return ADMIN
        if token.startswith("s.") and token.count(".") >= 2:
            name, _, mac = token[2:].rpartition(".")
            scope = coord.scopes.get(name)
            if scope is not None and not scope.discarded and hmac.compare_digest(
                mac.encode(), self._mac(name, scope.fork_point).encode()
            ):
                return Principal(name)
        raise AuthError("invalid token (or its scope was discarded)")

    @staticmethod
    def covers(who: Principal, scope: str, coord: Coordinator) -> bool:
        """Whether `who` may act on `scope`: admin, the scope itself or an ancestor."""
        if who.scope is None:
            return True
        seen = 0
        name: str | None = scope
        while name is not None and seen < 10_000:
            if name == who.scope:
                return True
            s = coord.scopes.get(name)
            name = s.parent if s is not None else None
            seen += 1
        return False

    def require(self, who: Principal, scope: str, coord: Coordinator) -> None:
        """Raises Forbidden unless `who` may act on `scope`."""
        if not self.covers(who, scope, coord):
            raise Forbidden(f"this token acts on scope {who.scope!r} and its forks, "
                            f"not on {scope!r}")

    @staticmethod
    def require_admin(who: Principal) -> None:
        if not who.admin:
            raise Forbidden("this operation needs the admin token")
