"""Agents: tasks and model providers on top of the coordinator's public API."""

from .scripted import Delete, Patch, Run, ScriptedAgent, Send, Step, Write

__all__ = ["Delete", "Patch", "Run", "ScriptedAgent", "Send", "Step", "Write"]
