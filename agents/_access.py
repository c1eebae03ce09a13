"""One scope's tool surface, in process or over HTTP: what external agents act through.

`ScopeAccess` is the small protocol the MCP server, the Claude Code hook and the
mini-swe-agent environment share. `LocalAccess` acts on a `Scope` of an open
`Coordinator`; `RemoteAccess` acts on a scope of a running `corral serve` through
`CorralClient` with the scope's token. Both answer with the same `Said` record, so a
blocked intent reads the same whichever way the agent is connected.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Protocol

from coordinator import Coordinator, ExecOutcome, Message, Result, Scope
from coordinator.client import CorralClient, ExecResultOut, ResultOut

__all__ = ["RUN_ENV", "LocalAccess", "RemoteAccess", "Said", "ScopeAccess", "blocked_text"]

RUN_ENV = {
    "HOME": "/tmp", "LANG": "C.UTF-8", "TMPDIR": "/tmp",
    # Bytecode caches would show up in the agent's patch of a repo without a .gitignore.
    "PYTHONDONTWRITEBYTECODE": "1",
}
"""Variables of an agent's commands, over the scope's command environment
(`Scope.exec_env`: the prepared project environment's PATH and variables, the
toolchain). Nothing of the host's: a host PATH would hide the project's virtualenv."""

_HOST_PATH = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")


@dataclass(frozen=True, slots=True)
class Said:
    """What became of one intent, as an agent is told."""

    ok: bool
    """Materialized (committed)."""
    blocked: bool
    reason: str
    """The supervisor's reason when blocked ('' otherwise)."""
    policy: str
    """The policy that decided ("default" when all abstained)."""
    commit: str | None
    effect: str
    """The effect's id (`scope#seq`)."""
    returncode: int | None = None
    """For a command: its exit status."""
    output: str = ""
    """For a command: stdout then stderr, as text."""
    timed_out: bool = False


def blocked_text(said: Said) -> str:
    """How a blocked intent is shown to an agent: the policy and its reason."""
    return f"BLOCKED by the supervisor ({said.policy}): {said.reason}"


class ScopeAccess(Protocol):
    """The operations an external agent may take on its scope."""

    name: str

    async def read(self, path: str) -> bytes: ...

    async def listdir(self, path: str = "") -> list[str]: ...

    async def write(self, path: str, data: bytes) -> Said: ...

    async def patch(self, path: str, diff: str) -> Said: ...

    async def delete(self, path: str) -> Said: ...

    async def run(self, argv: list[str], timeout: float, env: dict[str, str], *,
                  cause: str | None = None) -> Said:
        """Run a command in the scope (reviewed like any exec); `env` is added to the
        scope's command environment."""
        ...

    async def send(self, to: str, text: str) -> Said: ...

    async def inbox(self) -> list[tuple[str | None, str]]:
        """Take the messages received so far: (sender, text)."""
        ...

    async def messages(self) -> list[Message]:
        """Take the messages received so far, whole (typed requests keep their ids)."""
        ...

    @property
    def parent(self) -> str | None: ...


def _output(stdout: bytes, stderr: bytes) -> str:
    out = stdout.decode(errors="replace")
    err = stderr.decode(errors="replace")
    if out and err and not out.endswith("\n"):
        out += "\n"
    return out + err


class LocalAccess:
    """A scope of a coordinator open in this process."""

    def __init__(self, coord: Coordinator, scope: Scope) -> None:
        self.coord, self.scope = coord, scope
        self.name = scope.name

    @property
    def parent(self) -> str | None:
        return self.scope.parent

    async def _said(self, r: Result) -> Said:
        d = r.decision
        said = Said(ok=r.ok, blocked=r.blocked, reason=r.reason,
                    policy=d.policy if d else "default", commit=r.commit, effect=r.effect.id)
        out = r.outcome
        if isinstance(out, ExecOutcome):
            trace = self.coord.trace
            stdout, stderr = await self.coord.io(
                lambda: (trace.blob(out.stdout), trace.blob(out.stderr)))
            return replace(said, returncode=out.returncode, output=_output(stdout, stderr),
                           timed_out=out.timed_out)
        return said

    async def read(self, path: str) -> bytes:
        return await self.scope.read(path)

    async def listdir(self, path: str = "") -> list[str]:
        return await self.scope.listdir(path)

    async def write(self, path: str, data: bytes) -> Said:
        return await self._said(await self.scope.write(path, data))

    async def patch(self, path: str, diff: str) -> Said:
        return await self._said(await self.scope.patch(path, diff))

    async def delete(self, path: str) -> Said:
        return await self._said(await self.scope.delete(path))

    async def run(self, argv: list[str], timeout: float, env: dict[str, str], *,
                  cause: str | None = None) -> Said:
        # `env` goes over the scope's own command environment: the project's venv first
        env = {**self.scope.exec_env(), **env}
        return await self._said(
            await self.scope.exec(argv, timeout=timeout, env=env, cause=cause))

    async def send(self, to: str, text: str) -> Said:
        return await self._said(await self.scope.send(to, text))

    async def inbox(self) -> list[tuple[str | None, str]]:
        return [(m.sender, m.text) for m in self.scope.take_messages()]

    async def messages(self) -> list[Message]:
        return self.scope.take_messages()


class RemoteAccess:
    """A scope of a running `corral serve`, through `CorralClient` (the scope's token)."""

    def __init__(self, client: CorralClient, name: str, parent: str | None = None) -> None:
        self.client, self.name = client, name
        self._parent = parent

    @property
    def parent(self) -> str | None:
        return self._parent

    async def load_parent(self) -> None:
        """Look the scope's parent up (it names whom `finish` reports to)."""
        self._parent = (await self.client.scope(self.name)).parent

    @staticmethod
    def _said(r: ResultOut) -> Said:
        d = r.effect.decision
        said = Said(ok=r.ok, blocked=r.status == "blocked", reason=r.reason,
                    policy=d.policy if d else "default", commit=r.commit, effect=r.effect.id)
        if isinstance(r, ExecResultOut) and r.returncode is not None:
            stdout, stderr = r.stdout_b64 or b"", r.stderr_b64 or b""
            return replace(said, returncode=r.returncode, output=_output(stdout, stderr),
                           timed_out=r.timed_out)
        return said

    async def read(self, path: str) -> bytes:
        return await self.client.read(self.name, path)

    async def listdir(self, path: str = "") -> list[str]:
        return await self.client.listdir(self.name, path)

    async def write(self, path: str, data: bytes) -> Said:
        return self._said(await self.client.write(self.name, path, data))

    async def patch(self, path: str, diff: str) -> Said:
        return self._said(await self.client.patch(self.name, path, diff))

    async def delete(self, path: str) -> Said:
        return self._said(await self.client.delete(self.name, path))

    async def run(self, argv: list[str], timeout: float, env: dict[str, str], *,
                  cause: str | None = None) -> Said:
        # The server's command environment is not known here: PATH as before.
        env = {"PATH": _HOST_PATH, **env}
        return self._said(await self.client.exec(self.name, argv, timeout=timeout, env=env,
                                                 cause=cause))

    async def send(self, to: str, text: str) -> Said:
        return self._said(await self.client.send(self.name, to, text))

    async def inbox(self) -> list[tuple[str | None, str]]:
        return [(m.sender, m.text) for m in await self.client.take_messages(self.name)]

    async def messages(self) -> list[Message]:
        return await self.client.take_messages(self.name)
