"""Prometheus metrics of one coordinator (its own registry, so several coordinators
in one process, as in tests and benchmarks, do not collide)."""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager as ContextManager
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..records._effects import ModelOutcome

if TYPE_CHECKING:
    from sandboxes import Workspace

    from ..records._events import Event, EventBus
    from ..store._journal import Journal

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (
    0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01,
    0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10,
)


class Layered(Protocol):
    """What the metrics read of a scope: its name, whether it is gone, its layer."""

    @property
    def name(self) -> str: ...

    @property
    def discarded(self) -> bool: ...

    @property
    def workspace(self) -> Workspace: ...


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
        self.review_seconds = Histogram(
            "corral_intent_review_seconds", "Time the policy chain took to decide an intent",
            ["kind"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.effect_seconds = Histogram(
            "corral_effect_seconds",
            "Coordinator time per effect requested over the API (inside the scope operation)",
            ["kind"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.model_tokens = Counter(
            "corral_model_tokens", "Model tokens used, by type (prompt, cached, completion)",
            ["type"], registry=r,
        )
        self.checkpoint_seconds = Histogram(
            "corral_trace_checkpoint_seconds",
            "Time to move the journal into the trace repository (pack, refs)",
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.checkpoint_objects = Counter(
            "corral_trace_checkpoint_objects", "Objects moved from the journal into packs",
            registry=r,
        )
        self.journal_bytes = Gauge(
            "corral_trace_journal_bytes",
            "Object bytes held in memory (and the journal) until the next checkpoint",
            registry=r,
        )
        self.backpressure_seconds = Histogram(
            "corral_trace_backpressure_seconds",
            "Time an effect waited because the journal was full (writers outran checkpoints)",
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.journal_objects = Gauge(
            "corral_trace_journal_objects",
            "Objects held in memory (and the journal) until the next checkpoint",
            registry=r,
        )
        self._layers: _LayerBytes | None = None

    def decision(self, kind: str, verdict: str) -> None:
        self.effects.labels(kind, verdict).inc()

    def timed(self, op: str) -> ContextManager[None]:
        """Time a scope operation (`corral_scope_operation_seconds{op}`)."""
        return self.op_seconds.labels(op).time()

    def observe(self, op: str, seconds: float, times: int = 1) -> None:
        """Count `times` scope operations of `seconds` each (several made in one go)."""
        observed = self.op_seconds.labels(op)
        for _ in range(times):
            observed.observe(seconds)

    def watch_journal(self, journal: Journal) -> None:
        """Export the journal's checkpoints and the bytes it holds."""

        def checkpointed(seconds: float, objects: int) -> None:
            self.checkpoint_seconds.observe(seconds)
            self.checkpoint_objects.inc(objects)

        journal.on_checkpoint = checkpointed
        journal.on_wait = self.backpressure_seconds.observe
        self.journal_bytes.set_function(lambda: journal.held_bytes)
        self.journal_objects.set_function(lambda: len(journal.objects) + len(journal.sealed))

    def watch_events(self, bus: EventBus) -> None:
        """Count `corral_model_tokens_total` from every recorded `model.call` effect,
        whoever made it (an in-process agent, the LLM supervisor, or a client whose
        calls the coordinator records): the trace is the one place they all pass.
        Replayed calls cost no tokens and are not counted."""

        def counted(event: Event) -> None:
            if event.type != "effect" or event.effect.kind != "model.call":
                return
            out = event.effect.outcome
            if isinstance(out, ModelOutcome) and not out.replayed:
                u = out.usage
                self.tokens(u.prompt_tokens, u.cached_prompt_tokens, u.completion_tokens)

        bus.listen(counted)

    def conflicts(self, n: int) -> None:
        if n:
            self.merge_conflicts.inc(n)

    def tokens(self, prompt: int = 0, cached: int = 0, completion: int = 0) -> None:
        """Count one model call's tokens (`cached` is the part of `prompt` served
        from the provider's prompt cache)."""
        for kind, n in (("prompt", prompt), ("cached", cached), ("completion", completion)):
            if n:
                self.model_tokens.labels(kind).inc(n)

    def scope_count(self, scopes: Mapping[str, Layered]) -> None:
        """Export the live-scopes gauge and each live scope's layer size from `scopes`
        (a registry kept up to date), both measured when Prometheus scrapes; later
        calls change nothing. Counted at each fork instead, the gauge cost a walk over
        every scope the coordinator ever held."""
        if self._layers is None:
            self.active_scopes.set_function(
                lambda: sum(1 for s in list(scopes.values()) if not s.discarded))
            self._layers = _LayerBytes(scopes)
            self.registry.register(self._layers)


class _LayerBytes(Collector):
    """`corral_layer_bytes{scope}`: bytes held in each live scope's own layer,
    measured when Prometheus scrapes (never on the agents' path)."""

    def __init__(self, scopes: Mapping[str, Layered]) -> None:
        self._scopes = weakref.ref(scopes)

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily("corral_layer_bytes", "Bytes held in a scope's own layer",
                                  labels=["scope"])]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("corral_layer_bytes", "Bytes held in a scope's own layer",
                                   labels=["scope"])
        scopes = self._scopes()
        for scope in list(scopes.values()) if scopes is not None else []:
            if scope.discarded:
                continue
            try:
                family.add_metric([scope.name], scope.workspace.layer_bytes)
            except OSError:  # a layer released between listing and measuring
                continue
        yield family
