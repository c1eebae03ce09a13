"""Bearer tokens: an admin token, and one token per scope incarnation issued at fork.

A scope token is `s.<scope>.<secret>`, the secret 32 random bytes (base64url)
drawn when the token is issued. The server keeps only its SHA-256 digest, with
the scope's name and fork commit, in `<state>/tokens` (mode 0600, one JSON
line per issue or revocation, appended before the fork is answered). So a
token survives a restart, and nothing anyone can read gives it back: not the
trace, not `/v1/health`, not the state directory itself (a digest is not a
secret). It dies with its scope *incarnation*: discarding the scope revokes
it (durably), and a scope forked again under the same name, even at the same
commit in the same second, gets a new secret.

A scope token acts on its own scope and on every scope forked from it (an agent
may run sub-agents); merging needs authority over both scopes. Everything else
(the root scope, the gate, reviewers, control actions, blobs) needs the admin
token.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..records._errors import AuthError, DiskFull, Forbidden, disk_full

if TYPE_CHECKING:
    from ..control._coordinator import Coordinator
    from ..scopes._scope import Scope

__all__ = ["AuthError", "Forbidden", "Principal", "Tokens"]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the admin, or the agent of one scope."""

    scope: str | None
    """None for the admin."""

    @property
    def admin(self) -> bool:
        return self.scope is None


ADMIN = Principal(None)


@dataclass(slots=True)
class _Issued:
    fork: str
    """The fork commit of the incarnation the token was issued for."""
    digest: str
    """SHA-256 of the token's secret (hex)."""
    scope: weakref.ref[Scope] | None = None
    """The incarnation itself, once seen in this process (None after a restart
    until the first check binds it by its fork commit)."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class Tokens:
    def __init__(self, path: Path | None, admin: str) -> None:
        self._path = path
        self._issued: dict[str, _Issued] = {}
        self._links: dict[tuple[str, str, str, str], bool] = {}
        self.admin = admin

    @classmethod
    def load(cls, state: Path, admin: str | None) -> Tokens:
        """The scope tokens issued so far (digests in `<state>/tokens`) and the
        admin token (`admin`, or a fresh random one). The file is compacted to
        the tokens still in force."""
        tokens = cls(state / "tokens", admin or "a." + secrets.token_urlsafe(24))
        try:
            lines = tokens._path.read_text().splitlines()  # type: ignore[union-attr]
        except FileNotFoundError:
            lines = []
        for line in lines:
            try:
                rec = json.loads(line)
                if rec.get("revoked"):
                    tokens._issued.pop(rec["scope"], None)
                else:
                    tokens._issued[rec["scope"]] = _Issued(rec["fork"], rec["digest"])
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a torn last line: the fork it belonged to was never answered
        tmp = state / "tokens.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.writelines(tokens._line(name, i.fork, i.digest) for name, i in
                             tokens._issued.items())
            os.replace(tmp, state / "tokens")
        except OSError as e:
            if not disk_full(e):
                raise
            # Compaction only saves space: on a full disk the file stays as it is.
            tmp.unlink(missing_ok=True)
        return tokens

    @staticmethod
    def _line(scope: str, fork: str, digest: str) -> str:
        return json.dumps({"scope": scope, "fork": fork, "digest": digest}) + "\n"

    def _append(self, line: str) -> None:
        if self._path is None:
            return
        fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        data = line.encode()
        written = 0
        try:
            written = os.write(fd, data)  # one write(2): whole or torn, never interleaved
            if written != len(data):  # a short write: the disk filled up
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as e:
            # No torn line: it would swallow the next one appended after it.
            os.ftruncate(fd, os.fstat(fd).st_size - written)
            if disk_full(e):
                raise DiskFull(f"the token file could not be written: {e.strerror}",
                               cause=e) from e
            raise
        finally:
            os.close(fd)

    def issue(self, scope: Scope) -> str:
        """A new token for this incarnation of `scope` (any earlier one stops
        working); durable when this returns."""
        secret = secrets.token_urlsafe(32)
        digest = _digest(secret)
        self._append(self._line(scope.name, scope.fork_point, digest))
        self._issued[scope.name] = _Issued(scope.fork_point, digest, weakref.ref(scope))
        return f"s.{scope.name}.{secret}"

    def revoke(self, name: str) -> None:
        """Scope `name` was discarded: its token dies (durably)."""
        if self._issued.pop(name, None) is not None:
            self._append(json.dumps({"scope": name, "revoked": True}) + "\n")

    def principal(self, token: str | None, coord: Coordinator) -> Principal:
        """Who `token` is; raises AuthError when it is missing or not valid."""
        if not token:
            raise AuthError("missing bearer token (Authorization: Bearer <token>)")
        if hmac.compare_digest(token.encode(), self.admin.encode()):
            return ADMIN
        if token.startswith("s.") and token.count(".") >= 2:
            name, _, secret = token[2:].rpartition(".")
            issued = self._issued.get(name)
            scope = coord.scopes.get(name)
            if (
                issued is not None
                and scope is not None
                and not scope.discarded
                and self._same_incarnation(issued, scope)
                and hmac.compare_digest(_digest(secret).encode(), issued.digest.encode())
            ):
                return Principal(name)
        raise AuthError("invalid token (or its scope was discarded)")

    @staticmethod
    def _same_incarnation(issued: _Issued, scope: Scope) -> bool:
        if issued.scope is None:  # first check since a restart
            if issued.fork != scope.fork_point:
                return False
            issued.scope = weakref.ref(scope)
        return issued.scope() is scope

    def covers(self, who: Principal, scope: str, coord: Coordinator) -> bool:
        """Whether `who` may act on `scope`: admin, the scope itself or an ancestor.

        Ancestry is by incarnation, not by name: a scope forked from an earlier
        `P` that was discarded is not covered by the token of a new `P`.
        """
        if who.scope is None or scope == who.scope:
            return True
        seen = 0
        s = coord.scopes.get(scope)
        while s is not None and s.parent is not None and seen < 10_000:
            parent = coord.scopes.get(s.parent)
            if parent is None or not self._forked_from(s, parent, coord):
                return False
            if parent.name == who.scope:
                return True
            s = parent
            seen += 1
        return False

    def _forked_from(self, child: Scope, parent: Scope, coord: Coordinator) -> bool:
        """Whether `child` was forked from this incarnation of `parent`: then the
        parent's fork commit is in the child's history (asked once per pair)."""
        key = (child.name, child.fork_point, parent.name, parent.fork_point)
        known = self._links.get(key)
        if known is None:
            known = self._links[key] = coord.trace.is_ancestor(parent.fork_point,
                                                               child.fork_point)
        return known

    def require(self, who: Principal, scope: str, coord: Coordinator) -> None:
        """Raises Forbidden unless `who` may act on `scope`."""
        if not self.covers(who, scope, coord):
            raise Forbidden(f"this token acts on scope {who.scope!r} and its forks, "
                            f"not on {scope!r}")

    @staticmethod
    def require_admin(who: Principal) -> None:
        if not who.admin:
            raise Forbidden("this operation needs the admin token")
