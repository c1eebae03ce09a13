"""Plug-ins by name: one loader for every entry point group and `module:attr` path.

A plug-in spec is either the name of an entry point in a group (`corral.agents`,
`corral.policies`, `corral.commands`, `corral.server`) or a `module:attr` path. This module
uses the standard library only and imports nothing else of `coordinator`, so every layer
(the coordinator's own loaders, `agents`, `bench`) can use it.
"""

from __future__ import annotations

import importlib
from importlib.metadata import EntryPoint, entry_points

__all__ = ["load_plugin", "plugin_names"]


def plugin_names(group: str) -> list[str]:
    """The names registered in the entry point group `group`, sorted."""
    return sorted({ep.name for ep in entry_points(group=group)})


def load_plugin(group: str, spec: str, *, what: str) -> object:
    """The object registered as `spec` in the entry point group `group`, or at the
    `module:attr` path `spec` (`attr` may be dotted). `what` names the kind of plug-in in
    messages ("agent", "policy").

    Raises:
        LookupError: no entry point of that name (the message lists the installed ones),
            the module cannot be imported (the message names the extra that may be
            missing), or the module has no such attribute.
    """
    found = [ep for ep in entry_points(group=group) if ep.name == spec]
    if found:
        return _load_entry_point(found[0], group, what)
    module, colon, attr = spec.partition(":")
    if not colon or not module or not attr:
        names = ", ".join(plugin_names(group)) or f"none installed in {group}"
        raise LookupError(f"no {what} {spec!r}: use one of {names}, or module:attr")
    try:
        obj: object = importlib.import_module(module)
    except ImportError as e:
        raise LookupError(f"{what} {spec!r}: cannot import {module} ({e}); is the package "
                          "that provides it installed?") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise LookupError(f"{what} {spec!r}: {module} has no attribute {attr!r}") from e
    return obj


def _load_entry_point(ep: EntryPoint, group: str, what: str) -> object:
    try:
        return ep.load()
    except ImportError as e:
        # The extra an entry point declares, else (Corral's convention) the extra named
        # like the entry point, of the distribution that registers it.
        dist = ep.dist.name if ep.dist is not None else "its package"
        extra = ",".join(ep.extras) or ep.name
        raise LookupError(f"{what} {ep.name!r} ({ep.value} in {group}) cannot be loaded "
                          f"({e}); is its extra installed? (pip install '{dist}[{extra}]')"
                          ) from e
    except AttributeError as e:
        raise LookupError(f"{what} {ep.name!r} ({ep.value} in {group}): no such attribute "
                          f"({e})") from e
