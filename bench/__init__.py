"""Benchmarks: the substrate benchmark (fork, discard, write, rewind, merge and
exec over synthetic checkouts of 10 MB to 3 GB) and the CooperBench harness."""

from __future__ import annotations

import importlib
from typing import Any

from ._synth import NAMED_SIZES, CheckoutSpec, checkout, default_cache, parse_size

__all__ = [
    "NAMED_SIZES",
    "TARGETS",
    "CheckoutSpec",
    "checkout",
    "default_cache",
    "parse_size",
    "render",
    "run",
]

_LAZY = {"TARGETS", "render", "run"}


def __getattr__(name: str) -> Any:
    # Imported on first use, so `python -m bench.substrate` does not import the
    # module twice and the checkout generator works without the coordinator.
    if name in _LAZY:
        return getattr(importlib.import_module(".substrate", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
