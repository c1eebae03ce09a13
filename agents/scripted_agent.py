"""The scripted agent: a fixed list of steps carried out as real effects, no model.

It serves tests, benchmarks and the demo: every step goes through the scope's
one path (policy chain, workspace, trace) exactly like a model-driven agent's.
A blocked step does not stop the script; the step's Result says why. It is an
`Agent` too (``await ScriptedAgent(steps)(ctx)``), so `corral run --agent module:attr`
can run one. For a scripted *model* behind a model-driven agent, see
`agents.providers.scripted`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from coordinator import Result, Scope

from .protocol import AgentContext, AgentResult, scope_patch

__all__ = ["Delete", "Patch", "Run", "ScriptedAgent", "Send", "Step", "Write"]


@dataclass(frozen=True, slots=True)
class Write:
    path: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Patch:
    path: str
    diff: str


@dataclass(frozen=True, slots=True)
class Delete:
    path: str


@dataclass(frozen=True, slots=True)
class Run:
    argv: tuple[str, ...]
    timeout: float = 60.0


@dataclass(frozen=True, slots=True)
class Send:
    to: str
    text: str


Step = Write | Patch | Delete | Run | Send


class ScriptedAgent:
    """Runs `steps` in `scope`, calling `on_result(step, result)` after each."""

    def __init__(
        self,
        steps: Sequence[Step],
        on_result: Callable[[Step, Result], Awaitable[None] | None] | None = None,
    ) -> None:
        self.steps = list(steps)
        self.on_result = on_result

    async def __call__(self, ctx: AgentContext) -> AgentResult:
        """Carry out every step in `ctx.scope` (the context's provider and budget are not
        used); returns a finished result counting the steps and the blocked ones."""
        results = await self.run(ctx.scope)
        return AgentResult(
            name=ctx.scope.name, status="finished", summary=f"{len(results)} scripted steps",
            steps=len(results), prompt_tokens=0, cached_tokens=0, completion_tokens=0,
            blocked=sum(r.blocked for r in results), patch=await scope_patch(ctx.coord, ctx.scope),
            head=ctx.scope.head)

    async def run(self, scope: Scope) -> list[Result]:
        """Carry out every step; returns their Results in order."""
        results = []
        for step in self.steps:
            result = await self.step(scope, step)
            results.append(result)
            if self.on_result is not None:
                maybe = self.on_result(step, result)
                if maybe is not None:
                    await maybe
        return results

    @staticmethod
    async def step(scope: Scope, step: Step) -> Result:
        match step:
            case Write(path, data):
                return await scope.write(path, data)
            case Patch(path, diff):
                return await scope.patch(path, diff)
            case Delete(path):
                return await scope.delete(path)
            case Run(argv, timeout):
                return await scope.exec(list(argv), timeout=timeout)
            case Send(to, text):
                return await scope.send(to, text)
        raise TypeError(f"not a step: {step!r}")
