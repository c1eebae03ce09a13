"""Agents: tasks and model providers on top of the coordinator's public API.

One agent protocol (`Agent`: ``await agent(ctx: AgentContext) -> AgentResult``, see
`agents.protocol`), the built-in coding agent (`CodingAgent`), model calls recorded as effects
(`ModelCaller`), replay (`replay`), the LLM supervisor (`LLMSupervisor`), the
orchestration behind `corral run` (`run_tasks`), the scripted agent, and agents by name
(`load_agent`, the `corral.agents` group). Other agents in a scope, each an optional extra:
`agents.miniswe` (mini-swe-agent), `agents.mcp_server` (an MCP server per scope),
`agents.hooks` (Claude Code hooks).
"""

from ._model_effects import ModelBlocked, ModelCaller, ModelResult, canonical
from ._transcript import Transcript, step_commit, transcript_at
from .coding import SYSTEM_PROMPT, TOOLS, CodingAgent
from .protocol import Agent, AgentContext, AgentResult, AgentStatus, Budget, agent_names, load_agent
from .replay import Changes, ReplayProvider, ReplayReport, replay
from .run import RunReport, run_tasks
from .scripted import Delete, Patch, Run, ScriptedAgent, Send, Step, Write
from .supervisor import LLMSupervisor

__all__ = [
    "SYSTEM_PROMPT",
    "TOOLS",
    "Agent",
    "AgentContext",
    "AgentResult",
    "AgentStatus",
    "Budget",
    "Changes",
    "CodingAgent",
    "Delete",
    "LLMSupervisor",
    "ModelBlocked",
    "ModelCaller",
    "ModelResult",
    "Patch",
    "ReplayProvider",
    "ReplayReport",
    "Run",
    "RunReport",
    "ScriptedAgent",
    "Send",
    "Step",
    "Transcript",
    "Write",
    "agent_names",
    "canonical",
    "load_agent",
    "replay",
    "run_tasks",
    "step_commit",
    "transcript_at",
]
