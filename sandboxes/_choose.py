"""Picking a backend: overlay where mounts are allowed, else copy; fuse only when asked."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

from ._base import Backend, BackendUnavailable
from .copy import CopyBackend
from .fuse import FuseBackend
from .overlay import OverlayBackend

__all__ = ["backends", "choose_backend"]

log = logging.getLogger("corral.sandboxes")

backends: dict[str, type[Backend]] = {
    OverlayBackend.name: OverlayBackend,
    CopyBackend.name: CopyBackend,
    FuseBackend.name: FuseBackend,
}
"""Every backend by name, in order of preference (those in OPT_IN only when asked for)."""

OPT_IN = frozenset({FuseBackend.name})
"""Backends never chosen automatically: fuse costs every process in the workspace
a trip through Python, worth it only for live interception."""


def choose_backend(root: Path, prefer: str | None = None, *, tmpfs: bool = False) -> Backend:
    """A backend owning `root`: `prefer` when given, else the first that works here.
    `tmpfs` puts the overlay backend's writable layers in memory (see OverlayBackend).

    Raises BackendUnavailable (with the reason) when `prefer` cannot run here,
    and KeyError for an unknown name. Falling back from overlay to copy logs
    and warns once with the reason.
    """
    if prefer is not None:
        cls = backends[prefer]
        reason = cls.unavailable_reason()
        if reason is not None:
            raise BackendUnavailable(prefer, reason)
        return _make(cls, root, tmpfs)
    skipped: list[str] = []
    for name, cls in backends.items():
        if name in OPT_IN:
            continue
        reason = cls.unavailable_reason()
        if reason is None:
            if skipped:
                message = f"sandbox backend {name!r} in use: {'; '.join(skipped)}"
                log.warning(message)
                warnings.warn(message, RuntimeWarning, stacklevel=2)
            return _make(cls, root, tmpfs)
        skipped.append(f"{name!r} unavailable ({reason})")
    raise BackendUnavailable("any", "; ".join(skipped))


def _make(cls: type[Backend], root: Path, tmpfs: bool) -> Backend:
    if cls is OverlayBackend:
        return OverlayBackend(root, tmpfs=tmpfs)
    return cls(root)
