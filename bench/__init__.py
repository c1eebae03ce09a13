"""Benchmarks: the substrate benchmark (fork, discard, write, rewind, merge, exec
over synthetic checkouts) and, later, the CooperBench harness."""

from ._synth import NAMED_SIZES, CheckoutSpec, checkout, default_cache, parse_size
from .substrate import TARGETS, render, run

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
