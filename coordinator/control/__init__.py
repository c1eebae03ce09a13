"""Control: the `Coordinator` (one state directory's scopes, trace and supervisor) and
the supervisor's control actions on scopes: inject, handoff, rewind, discard
(`coordinator.control.rewind(...)` and friends; see `_actions`)."""

from ._actions import Handoff, Steered, decide, discard, handoff, inject, rewind

__all__ = ["Handoff", "Steered", "decide", "discard", "handoff", "inject", "rewind"]
