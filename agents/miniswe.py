"""mini-swe-agent (PyPI `mini-swe-agent`, pinned) working in a Corral scope.

Its three protocols are met by Corral's pieces; its own `DefaultAgent` loop runs unchanged:

- `ScopeEnvironment` (its Environment): every bash action is a transactional exec in the
  scope, reviewed by the policy chain before it runs and again with the files it changed.
  A blocked action comes back as the command's output (`BLOCKED by the supervisor
  (<policy>): <reason>`, return code 126) and nothing touched the scope.
- `ScopeModel` (its Model): each query goes through a Corral provider as a `model.call`
  effect (`ModelCaller`), so token counts, prompt caching and replay work as for the
  built-in agent. Requests carry no timestamps, so forks share the provider's cache.
- In a team (`team=`, or `AgentContext.team`), an action that is a `corral-team` command
  (`agents._team_commands`) is answered in process: the team's task list, scratchpad and
  typed requests, each operation an effect on the scope's branch like the built-in agent's
  team tools; the task it is given says how the command goes.
- `MiniSweAgent` runs the loop (in a worker thread: mini-swe-agent is synchronous) and
  records each action's observation as a `tool.call` effect caused by the model call, so
  the conversation is in the trace: when a supervisor rewinds the scope, the agent's
  messages are rebuilt from the branch before its next step. Its result's patch is the
  scope's diff against its fork point.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from coordinator import Coordinator, CorralError, Scope, ToolCall, ToolOutcome

from ._access import LocalAccess
from ._miniswe_protocols import (
    BLOCKED_RETURNCODE,
    ScopeEnvironment,
    ScopeModel,
    _assistant,
    _Bridge,
    _text,
)
from ._model_effects import ModelBlocked, ModelCaller
from ._team_commands import TEAM_COMMANDS_HELP
from ._transcript import transcript_at
from .protocol import AgentContext, AgentResult, AgentStatus, scope_patch
from .providers import (
    AssistantMessage,
    ModelError,
    UserMessage,
)
from .team_tools import LocalTeam, TeamAccess

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # no banner on stdout when imported

__all__ = ["BLOCKED_RETURNCODE", "MiniSweAgent", "ScopeEnvironment", "ScopeModel", "run"]


def _config(path: str | Path | None) -> dict[str, Any]:
    import yaml
    from minisweagent.config import get_config_path

    return yaml.safe_load(get_config_path(path or "mini.yaml").read_text()) or {}


class MiniSweAgent:
    """Runs mini-swe-agent's `DefaultAgent` on `task` in `scope`; `run()` returns an
    AgentResult (status, steps, tokens, blocked actions, the scope's patch).

    `config` is a mini-swe-agent YAML config (default: its `mini.yaml`); its agent templates,
    observation template and command environment are used. `before_step` (if set) is awaited
    before each step, on the event loop: a supervisor may act on the scope there (a rewind
    rewinds the conversation too).
    """

    def __init__(self, coord: Coordinator, scope: Scope, caller: ModelCaller, task: str, *,
                 max_steps: int = 30, config: str | Path | None = None,
                 timeout: float = 60.0, max_output_tokens: int = 4096,
                 before_step: Callable[[], Awaitable[None]] | None = None,
                 team: TeamAccess | None = None) -> None:
        self.coord, self.scope, self.caller, self.task = coord, scope, caller, task
        self.team = team
        """The agent's team: `corral-team` actions act on it."""
        self.max_steps = max_steps
        self.settings = _config(config)
        self.timeout = timeout
        self.max_output_tokens = max_output_tokens
        self.before_step = before_step
        self.rebuilt = 0
        """How many times the conversation was rebuilt from the trace (after a rewind)."""

    @property
    def name(self) -> str:
        return self.scope.name

    async def run(self) -> AgentResult:
        """Run to the agent's exit (submitted, a limit, an error). A model error or a
        blocked model call ends the run; everything done stays in the trace."""
        bridge = _Bridge(asyncio.get_running_loop())
        env = ScopeEnvironment(LocalAccess(self.coord, self.scope), bridge, timeout=self.timeout,
                               env=self.settings.get("environment", {}).get("env"),
                               team=self.team)
        model_cfg = self.settings.get("model", {})
        model = ScopeModel(self.coord, self.scope, self.caller, bridge,
                           observation_template=model_cfg.get(
                               "observation_template", _OBSERVATION),
                           format_error_template=model_cfg.get("format_error_template",
                                                               "{{ error }}"),
                           max_output_tokens=self.max_output_tokens)
        agent_cfg = {**self.settings.get("agent", {}), "step_limit": self.max_steps,
                     "cost_limit": 0}
        agent_cfg.pop("mode", None)
        agent = _scope_agent_class()(model, env, owner=self, bridge=bridge, **agent_cfg)
        status: AgentStatus
        error = None
        try:
            info = await asyncio.to_thread(agent.run,
                                           with_its_tools(self.task, self.team is not None))
            exit_status = str(info.get("exit_status", ""))
            summary = str(info.get("submission", "")) or exit_status
            status = _STATUS.get(exit_status, "error")
            if status == "error":
                error = exit_status
        except ModelBlocked as b:
            status, summary = "blocked", b.reason
        except (ModelError, CorralError) as e:
            status, summary, error = "error", str(e), str(e)
        return AgentResult(
            name=self.scope.name, status=status, summary=summary, steps=model.steps,
            prompt_tokens=self.caller.prompt_tokens, cached_tokens=self.caller.cached_tokens,
            completion_tokens=self.caller.completion_tokens, blocked=env.blocked,
            patch=await self.patch(), head=self.scope.head,
            replayed_steps=self.caller.replayed_calls, saved_tokens=self.caller.saved_tokens,
            error=error,
        )

    async def patch(self) -> str:
        """`git diff` of the scope's head against its fork point."""
        return await scope_patch(self.coord, self.scope)

    # -- called on the loop by the agent's thread -----------------------------------------

    async def _prepare(self, agent: Any, seen: str | None) -> list[dict[str, Any]] | None:
        """Before a step: let the supervisor act, then, when the head moved under the agent
        (a rewind), rebuild its messages from the trace. Returns actions of the rebuilt last
        turn that have no recorded result (to be run before the next query), or None."""
        if self.before_step is not None:
            await self.before_step()
        if seen is None or self.scope.head == seen:
            return None
        t = await self.coord.io(transcript_at, self.coord.trace, self.scope.head)
        self.rebuilt += 1
        first = agent.messages[:2]  # the system and task messages, rendered at the start
        rebuilt: list[dict[str, Any]] = [first[0]]
        if not t.messages:
            rebuilt.extend(first[1:])
        for m in t.messages:
            if isinstance(m, UserMessage):
                rebuilt.append({"role": "user", "content": m.text})
            elif isinstance(m, AssistantMessage):
                msg = _assistant(m.text, m.tool_calls)
                msg["extra"] = {"actions": [{"command": c.arguments.get("command", ""),
                                             "tool_call_id": c.id} for c in m.tool_calls]}
                rebuilt.append(msg)
            else:
                rebuilt.append({"role": "tool", "tool_call_id": m.call_id, "content": m.content,
                                "extra": {"returncode": 1 if m.is_error else 0}})
        agent.messages[:] = rebuilt
        agent.model.last_call = t.last_call
        agent.model.steps = t.steps
        agent.n_calls = t.steps
        return [{"command": c.arguments.get("command", ""), "tool_call_id": c.id}
                for c in t.pending] or None

    async def _record(self, action: dict[str, Any], observation: dict[str, Any],
                      cause: str | None) -> None:
        trace = self.coord.trace
        content = _text(observation.get("content"))
        blob = await self.coord.io(trace.write_blob, content.encode())
        failed = observation.get("extra", {}).get("returncode") not in (0, None)

        intent = ToolCall(tool="bash", arguments={"command": action.get("command", "")},
                          call_id=action.get("tool_call_id"))
        await self.scope.record(intent, ToolOutcome(result=blob, is_error=failed), cause=cause)


_STATUS: dict[str, AgentStatus] = {"Submitted": "finished", "LimitsExceeded": "step_limit"}

# Corral's team prompts (`corral run`, the CooperBench harness) are written for the
# built-in agent, whose tools include send_message; mini-swe-agent has bash alone.
# Only that instruction: a task may well be about a function named send_message.
_SEND_MESSAGE = re.compile(r"[ \t]*Use send_message\b[^.\n]*\.?")
NO_MESSAGES = ("You cannot send the other agents messages: your one tool is bash, in your own "
               "copy of the repository. Keep to your own task.")


def with_its_tools(task: str, team: bool = False) -> str:
    """`task` as mini-swe-agent can follow it: the team prompt's "Use send_message …"
    (a tool it does not have) becomes a sentence saying what it has; in a team
    (`team`), the `corral-team` command's usage is added."""
    if team:
        return _SEND_MESSAGE.sub("", task).rstrip() + "\n\n" + TEAM_COMMANDS_HELP
    if _SEND_MESSAGE.search(task) is None:
        return task
    return _SEND_MESSAGE.sub("", task).rstrip() + "\n" + NO_MESSAGES

_OBSERVATION = ("{% if output.exception_info %}<exception>{{output.exception_info}}</exception>\n"
                "{% endif %}<returncode>{{output.returncode}}</returncode>\n"
                "<output>\n{{output.output}}</output>")


def _scope_agent_class() -> type:
    """mini-swe-agent's DefaultAgent, with the supervisor's turn before each step and each
    observation recorded in the trace (defined late: the package is an optional extra)."""
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.exceptions import Submitted

    class ScopeAgent(DefaultAgent):  # type: ignore[misc]
        def __init__(self, model: ScopeModel, env: ScopeEnvironment, *, owner: MiniSweAgent,
                     bridge: _Bridge, **kwargs: Any) -> None:
            super().__init__(model, env, **kwargs)
            self.model: ScopeModel = model
            self.env: ScopeEnvironment = env
            self.owner, self.bridge = owner, bridge
            self.seen: str | None = None

        def step(self) -> list[dict[str, Any]]:
            pending = self.bridge(self.owner._prepare(self, self.seen))
            try:
                if pending:
                    return self.execute_actions({"extra": {"actions": pending}})
                return self.execute_actions(self.query())
            finally:  # also when the step ends in a format error or a submission
                self.seen = self.owner.scope.head

        def execute_actions(self, message: dict[str, Any]) -> list[dict[str, Any]]:
            actions = message.get("extra", {}).get("actions", [])
            cause = self.env.cause = self.model.last_call
            outputs: list[dict[str, Any]] = []
            for action in actions:
                try:
                    outputs.append(self.env.execute(action))
                except Submitted as done:
                    submitted = {"content": done.messages[0].get("content", ""),
                                 "extra": {"returncode": 0}}
                    self.bridge(self.owner._record(action, submitted, cause))
                    raise
            observations = self.model.format_observation_messages(
                message, outputs, self.get_template_vars())
            for action, observation in zip(actions, observations, strict=False):
                self.bridge(self.owner._record(action, observation, cause))
            return self.add_messages(*observations)  # type: ignore[no-any-return]

    return ScopeAgent


async def _mini_swe_agent(ctx: AgentContext) -> AgentResult:
    """mini-swe-agent (`MiniSweAgent`) as the `mini-swe-agent` entry of `corral.agents`.
    It limits steps (and cost), not tokens: `ctx.budget.max_tokens` is not used, nor
    `ctx.tools` (its one tool is bash)."""
    if ctx.provider is None:
        raise ValueError("mini-swe-agent needs a model provider")
    caller = ModelCaller(ctx.coord, ctx.provider, attempts=ctx.budget.retries)
    team = (LocalTeam(ctx.coord.team(ctx.team).member(ctx.scope.name))
            if ctx.team is not None else None)
    return await MiniSweAgent(ctx.coord, ctx.scope, caller, ctx.task,
                              max_steps=ctx.budget.max_steps, team=team).run()


run = _mini_swe_agent
"""The `mini-swe-agent` entry of the `corral.agents` group (an `Agent`)."""
