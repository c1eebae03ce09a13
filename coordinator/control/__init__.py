"""Control: the `Coordinator` (one state directory's scopes, trace and supervisor) and
the supervisor's control actions on scopes: inject, handoff, rewind, discard
(`coordinator.control.rewind(...)` and friends; see `_actions`), and consistent cuts
of a team (`Coordinator.cut`, `fork_team`, `rewind_team`; see `_cut`)."""

from ._actions import Handoff, Steered, decide, discard, handoff, inject, rewind
from ._cut import CUT_PREFIX, Cut, MemberCut
from ._ship import Shipment, receive_state

__all__ = ["CUT_PREFIX", "Cut", "Handoff", "MemberCut", "Shipment", "Steered", "decide",
           "discard", "handoff", "inject", "receive_state", "rewind"]
