"""Prometheus metrics of one coordinator (its own registry, so several coordinators
in one process, as in tests and benchmarks, do not collide)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

if TYPE_CHECKING:
    from ._coordinator import Coordinator

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.effects = Counter(
            "corral_effects", "Intents decided, by effect kind and verdict", ["kind", "verdict"],
            registry=r,
        )
        self.op_seconds = Histogram(
            "corral_scope_operation_seconds", "Latency of scope operations",
            ["op"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.merge_conflicts = Counter(
            "corral_merge_conflicts", "Conflicting paths found by merges (dry runs included)",
            registry=r,
        )
        self.active_scopes = Gauge("corral_active_scopes", "Live scopes", registry=r)

    def decision(self, kind: str, verdict: str) -> None:
        self.effects.labels(kind, verdict).inc()

    @contextmanager
    def timed(self, op: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.op_seconds.labels(op).observe(time.perf_counter() - start)

    def conflicts(self, n: int) -> None:
        if n:
            self.merge_conflicts.inc(n)

    def scope_count(self, coord: Coordinator) -> None:
        self.active_scopes.set(sum(1 for s in coord.scopes.values() if not s.discarded))
